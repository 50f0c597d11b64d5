"""TextCraft (Prasad et al., ADaPT; AgentGym's TC): craft a Minecraft item from a list of crafting commands.

Recipes come from the `minecraft-data` package, Java edition data "1.16.2" (the file minecraft-data uses for
1.16.2 to 1.16.5). Version 1.16 is the one TextCraft's recipes come from: its tasks name netherite items
(AgentGym's example crafts a netherite ingot), which 1.16 introduced, and later versions add items the
original tasks never had.

How the recipe book is built:
- Shaped and shapeless recipes become ingredient counts ("2 stick, 1 gold ingot") and a result count.
  minecraft-data expands Minecraft's generic ingredients (the "planks" tag) into one recipe per variant, so
  names stay specific ("oak planks"); the variant recipes stay valid, so crafting sticks from birch planks
  works exactly as TextCraft's generic "planks" does.
- The recipe the tasks use for an item is the first one minecraft-data lists (the oak variant of the
  wooden recipes, coal before charcoal for torches): deterministic and close to the usual recipe.
- Cycles are removed so that crafting trees are well-founded: as in TextCraft, storage blocks are not
  unpacked (no "9 gold ingot using 1 gold block"); ingots are not made from nuggets (ingots are smelted,
  and smelting is not crafting, so ingots are base items); remaining two-way pairs (slab <-> chiseled block,
  honey bottle <-> honey block) keep the recipe with the smaller result count.
- Base items have no recipe left (logs, cobblestone, ingots, gems, dyes' flowers, ...): they are gathered
  with `get`. An item's depth is 1 + the largest depth of its chosen recipe's ingredients (base items: 0).

A task is one goal item of depth 1 to 4 (the difficulty). Its instruction lists the commands of its
crafting tree plus distractors (chosen recipes of other items that share an ingredient), shuffled, about 8
lines in all as in AgentGym's example. Reward is 1 when the goal is crafted, else 0.

Counts: a craft's ingredient counts must be the same whole multiple of a recipe's (`craft 8 stick using 4
oak planks` for the 4-stick recipe); the count written before the crafted item is ignored, as in TextCraft,
and the observation says how many were made. AgentGym's server takes only exact recipe counts, which stay
valid here; the expert uses multiples so that deep trees fit in 20 turns.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import minecraft_data
from pydantic import field_validator

from gymflow.envs.base import Env, EnvSpec, Hidden, Step, Task, echo, task_rng

MC_VERSION = "1.16.2"
DEPTHS = ["1", "2", "3", "4"]
COMMAND_LINES = 8  # AgentGym's example lists 8 commands: the needed ones plus distractors
MIN_DISTRACTORS = 2

SYSTEM_PROMPT = (
    "You are given a few useful crafting recipes to craft items in Minecraft. Crafting commands are of the "
    'format "craft [target object] using [input ingredients]". Every round I will give you an observation; '
    "respond with one action. You can get a base ingredient from the environment (get 2 oak log), look at "
    "your inventory (inventory), or craft a target using one of the crafting commands "
    "(craft 4 oak planks using 1 oak log). Use ONLY the crafting commands provided; their counts may be "
    "multiplied (craft 8 oak planks using 2 oak log). Crafted items cannot be got, craft them. "
    "Answer in the format:\nThought: <your thought>\nAction: <your action>"
)

USAGE = "Use: get 2 oak log | craft 4 oak planks using 1 oak log | inventory"


@dataclass(frozen=True)
class Recipe:
    output: str
    count: int
    inputs: tuple[tuple[str, int], ...]  # (ingredient, count) in the order the recipe names them

    def command(self, times: int = 1) -> str:
        used = ", ".join(f"{n * times} {name}" for name, n in self.inputs)
        return f"craft {self.count * times} {self.output} using {used}"


@dataclass(frozen=True)
class Cookbook:
    """Every valid recipe per item (the first is the one tasks use) and every item that recipes name."""

    recipes: dict[str, list[Recipe]]
    items: frozenset[str]
    depths: dict[str, int]  # crafting-tree depth of each craftable item

    def chosen(self, item: str) -> Recipe | None:
        options = self.recipes.get(item)
        return options[0] if options else None

    def is_base(self, item: str) -> bool:
        return item in self.items and item not in self.recipes

    def depth(self, item: str) -> int:
        return self.depths.get(item, 0)


def readable(item_id: str) -> str:
    return item_id.replace("_", " ")


def _read_recipes() -> list[Recipe]:
    """All shaped and shapeless crafting recipes of MC_VERSION, in minecraft-data's order."""
    root = Path(minecraft_data.__file__).parent / "data" / "data" / "pc" / MC_VERSION
    names = {it["id"]: readable(it["name"]) for it in json.loads((root / "items.json").read_text())}
    out: list[Recipe] = []
    for variants in json.loads((root / "recipes.json").read_text()).values():
        for raw in variants:
            cells = [x for row in raw.get("inShape", []) for x in row] + raw.get("ingredients", [])
            inputs = Counter(names[x] for x in cells if x is not None)
            result = raw["result"]
            out.append(Recipe(names[result["id"]], result["count"], tuple(inputs.items())))
    return out


def _unpacks_storage(recipe: Recipe) -> bool:
    """Storage-block and nugget recipes run both ways; keep packing, drop unpacking blocks and nuggets -> ingot."""
    names = [name for name, _ in recipe.inputs]
    single_block = len(recipe.inputs) == 1 and names[0].endswith(" block") and recipe.inputs[0][1] == 1
    return single_block or all(name.endswith(" nugget") for name in names)


def _acyclic(recipes: list[Recipe]) -> list[Recipe]:
    """Drop each recipe that would close a cycle, trying small result counts first (packing before unpacking)."""
    uses: dict[str, set[str]] = {}

    def reaches(start: str, target: str) -> bool:
        seen, stack = {start}, [start]
        while stack:
            item = stack.pop()
            if item == target:
                return True
            for nxt in uses.get(item, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    kept: set[int] = set()
    for i in sorted(range(len(recipes)), key=lambda i: (recipes[i].count, i)):
        r = recipes[i]
        if any(reaches(name, r.output) for name, _ in r.inputs):
            continue
        kept.add(i)
        uses.setdefault(r.output, set()).update(name for name, _ in r.inputs)
    return [r for i, r in enumerate(recipes) if i in kept]


@lru_cache(maxsize=1)
def cookbook() -> Cookbook:
    """The recipe book, built once per process (about 0.1 s)."""
    recipes: dict[str, list[Recipe]] = {}
    items: set[str] = set()
    for r in _acyclic([r for r in _read_recipes() if not _unpacks_storage(r)]):
        recipes.setdefault(r.output, []).append(r)
        items.add(r.output)
        items.update(name for name, _ in r.inputs)
    return Cookbook(recipes, frozenset(items), _depths(recipes))


def _depths(recipes: dict[str, list[Recipe]]) -> dict[str, int]:
    depth: dict[str, int] = {}

    def visit(item: str) -> int:
        if item not in recipes:
            return 0
        if item not in depth:
            depth[item] = 1 + max(visit(name) for name, _ in recipes[item][0].inputs)
        return depth[item]

    for item in sorted(recipes):
        visit(item)
    return depth


# ---- crafting trees and plans ---------------------------------------------------------------------------
def tree_order(book: Cookbook, goal: str) -> list[str]:
    """Items of the goal's crafting tree, each after all of its ingredients (depth-first post-order)."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(item: str) -> None:
        if item in seen:
            return
        seen.add(item)
        recipe = book.chosen(item)
        for name, _ in recipe.inputs if recipe else ():
            visit(name)
        order.append(item)

    visit(goal)
    return order


def shortfalls(book: Cookbook, goal: str, inventory: dict[str, int]) -> tuple[list[str], dict[str, int]]:
    """What each tree item still lacks to craft one goal from `inventory`: (tree order, missing counts)."""
    order = tree_order(book, goal)
    need: Counter[str] = Counter({goal: inventory.get(goal, 0) + 1})
    missing: dict[str, int] = {}
    for item in reversed(order):  # consumers before their ingredients
        short = need[item] - inventory.get(item, 0)
        if short <= 0:
            continue
        missing[item] = short
        recipe = book.chosen(item)
        if recipe is not None:
            times = math.ceil(short / recipe.count)
            for name, n in recipe.inputs:
                need[name] += times * n
    return order, missing


def next_move(book: Cookbook, goal: str, inventory: dict[str, int]) -> tuple[str, int]:
    """The plan's next item and its amount (to get) or multiple (to craft): the first unmet item in tree order."""
    order, missing = shortfalls(book, goal, inventory)
    item = next(i for i in order if i in missing)
    recipe = book.chosen(item)
    return item, (missing[item] if recipe is None else math.ceil(missing[item] / recipe.count))


def move_action(book: Cookbook, item: str, amount: int) -> str:
    recipe = book.chosen(item)
    return f"get {amount} {item}" if recipe is None else recipe.command(amount)


def users_of(book: Cookbook, goal: str, item: str) -> list[str]:
    """The items of the goal's tree whose recipe takes `item`."""
    tree = [i for i in tree_order(book, goal) if i in book.recipes]
    return [i for i in tree if any(name == item for name, _ in book.recipes[i][0].inputs)]


def plan(book: Cookbook, goal: str) -> list[str]:
    """The expert's actions from an empty inventory."""
    inventory: Counter[str] = Counter()
    actions: list[str] = []
    while True:
        item, amount = next_move(book, goal, inventory)
        actions.append(move_action(book, item, amount))
        if item == goal:
            return actions
        recipe = book.chosen(item)
        if recipe is None:
            inventory[item] += amount
        else:
            inventory.subtract({name: n * amount for name, n in recipe.inputs})
            inventory[item] += recipe.count * amount


def commands_for(book: Cookbook, goal: str, seed: int) -> tuple[list[str], list[str]]:
    """(needed commands, shuffled listing with distractors). Distractors share an ingredient with the tree."""
    tree = tree_order(book, goal)
    needed = [book.recipes[item][0].command() for item in tree if item in book.recipes]
    rng = task_rng("textcraft-commands", seed)
    in_tree = set(tree)
    others = sorted(item for item in book.recipes if item not in in_tree and book.depth(item) <= 4)
    related = [i for i in others if any(name in in_tree for name, _ in book.recipes[i][0].inputs)]
    unrelated = sorted(set(others) - set(related))
    count = max(MIN_DISTRACTORS, COMMAND_LINES - len(needed))
    picks = rng.sample(related, min(count, len(related)))
    picks += rng.sample(unrelated, count - len(picks))
    lines = needed + [book.recipes[i][0].command() for i in picks]
    rng.shuffle(lines)
    return needed, lines


def goal_seed(goal: str) -> int:
    return int.from_bytes(hashlib.sha256(f"textcraft/{goal}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def make_task(goal: str, split: str = "train") -> Task:
    """The one task whose goal is `goal`: its content depends on the goal only."""
    book = cookbook()
    seed = goal_seed(goal)
    needed, lines = commands_for(book, goal, seed)
    return Task(
        env="textcraft",
        task_id=f"textcraft-{goal.replace(' ', '_')}",
        split=split,
        difficulty=str(book.depth(goal)),
        seed=seed,
        instruction="Crafting commands:\n" + "\n".join(lines) + f"\nGoal: craft {goal}.",
        hidden={"goal": goal, "plan": plan(book, goal), "recipes": needed, "mc_version": MC_VERSION},
    )


# ---- action parsing ---------------------------------------------------------------------------------------
_COUNTED = re.compile(r"^(\d+)\s+(.+)$")
_USING = re.compile(r"\s+using\s+", re.IGNORECASE)


def normalise(name: str) -> str:
    name = name.strip().strip(".").lower().removeprefix("minecraft:").replace("_", " ")
    return " ".join(name.split())


def lookup(book: Cookbook, name: str) -> str | None:
    """The item a player meant, forgiving case, minecraft:ids and a plural s."""
    name = normalise(name)
    for candidate in (name, name[:-1], name[:-2]):
        if candidate and candidate in book.items:
            return candidate
    return None


def match_recipe(recipes: list[Recipe], given: dict[str, int]) -> tuple[Recipe, int] | None:
    """The recipe whose ingredient counts `given` are a whole multiple of, and that multiple.

    All quantity rules of crafting live here.
    """
    for recipe in recipes:
        want = dict(recipe.inputs)
        if set(want) != set(given):
            continue
        first = next(iter(want))
        times = given[first] // want[first]
        if times >= 1 and all(given[name] == times * n for name, n in want.items()):
            return recipe, times
    return None


class TextCraftHidden(Hidden):
    goal: str

    @field_validator("goal")
    @classmethod
    def _craftable(cls, goal: str) -> str:
        """An item with a recipe: the episode ends when it is crafted, so any other goal never ends."""
        if goal not in cookbook().recipes:
            raise ValueError(f"{echo(goal)!r} is no craftable item (minecraft-data {MC_VERSION})")
        return goal


class TextCraft(Env):
    hidden_schema = TextCraftHidden
    spec = EnvSpec(
        name="textcraft",
        description="TextCraft: craft a Minecraft item from listed crafting commands (minecraft-data recipes)",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=20,
        expert="crafting-tree plan, re-planned from the current inventory",
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(DEPTHS)

    @classmethod
    def goals(cls) -> list[str]:
        """Every craftable item of depth 1 to 4, sorted: the finite task pool."""
        book = cookbook()
        return sorted(item for item in book.recipes if str(book.depth(item)) in DEPTHS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        goals = cls.goals()
        task_rng("textcraft-tasks", seed).shuffle(goals)
        for goal in goals:
            yield make_task(goal, split)

    def _reset(self, task: Task) -> str:
        self.book = cookbook()
        self.goal: str = task.hidden["goal"]
        self.inventory: dict[str, int] = {}
        return task.instruction

    def _step(self, action: str) -> Step:
        text = " ".join(action.split())
        verb = text.split(" ", 1)[0].lower() if text else ""
        if verb == "inventory" and text.lower() == "inventory":
            return self._reply(self._inventory_line())
        if verb == "get":
            return self._reply(self._get(text[4:].strip()))
        if verb == "craft":
            return self._craft(text[6:].strip())
        if not text:
            return self._reply(f"Empty action. {USAGE}")
        return self._reply(f"Could not execute {echo(text)}. {USAGE}")

    def _reply(self, observation: str) -> Step:
        return Step(observation, 0.0, False)

    def _inventory_line(self) -> str:
        if not self.inventory:
            return "Inventory: empty"
        return "Inventory: " + " ".join(f"[{item}] ({n})" for item, n in self.inventory.items())

    def _get(self, rest: str) -> str:
        m = _COUNTED.match(rest)
        if not m:
            return f"Say how many: get 1 {echo(rest) or 'oak log'}"
        amount, item = int(m.group(1)), lookup(self.book, m.group(2))
        if item is None:
            return f"Could not find {echo(m.group(2))}"
        if not self.book.is_base(item):
            return f"Could not find {item}: it is crafted, not gathered"
        if amount < 1:
            return "Get at least 1"
        self.inventory[item] = self.inventory.get(item, 0) + amount
        return f"Got {amount} {item}"

    def _craft(self, rest: str) -> Step:
        target, *used_parts = _USING.split(rest, maxsplit=1)
        used = used_parts[0] if used_parts else ""
        if not target.strip() or not used.strip():
            return self._reply("Use: craft 4 oak planks using 1 oak log (a count before each ingredient)")
        m = _COUNTED.match(target.strip())
        target_name = m.group(2) if m else target
        item = lookup(self.book, target_name)
        if item is None or item not in self.book.recipes:
            why = "it is a base item, get it" if item else "no such item"
            return self._reply(f"Could not find a valid recipe for {echo(normalise(target_name))}: {why}")
        given: Counter[str] = Counter()
        for part in used.split(","):
            pm = _COUNTED.match(part.strip())
            ingredient = lookup(self.book, pm.group(2)) if pm else None
            if pm is None or ingredient is None:
                bad = echo(part.strip())
                return self._reply(
                    f"Wrong item format: {bad}. Write a count and a known item, e.g. 2 oak planks"
                )
            given[ingredient] += int(pm.group(1))
        found = match_recipe(self.book.recipes[item], given)
        if found is None:
            return self._reply(self._no_recipe(item, given))
        recipe, times = found
        lacking = [
            f"{n * times} {name} (have {self.inventory.get(name, 0)})"
            for name, n in recipe.inputs
            if self.inventory.get(name, 0) < n * times
        ]
        if lacking:
            return self._reply(f"Could not find enough items to craft {item}: need {', '.join(lacking)}")
        for name, n in recipe.inputs:
            self.inventory[name] -= n * times
            if not self.inventory[name]:
                del self.inventory[name]
        made = recipe.count * times
        self.inventory[item] = self.inventory.get(item, 0) + made
        if item == self.goal:
            return Step(f"Crafted {made} {item}. Goal reached.", 1.0, True)
        return self._reply(f"Crafted {made} {item}")

    def _no_recipe(self, item: str, given: Counter[str]) -> str:
        for recipe in self.book.recipes[item]:
            if {name for name, _ in recipe.inputs} == set(given):
                return f"Wrong counts for {item}: use {recipe.command()}, or a whole multiple of it"
        return f"Could not find a valid recipe for {item} using those ingredients"

    # ---- expert ----------------------------------------------------------------------------------------
    def expert_step(self) -> tuple[str, str]:
        item, amount = next_move(self.book, self.goal, self.inventory)
        return self._explain(item, amount), move_action(self.book, item, amount)

    def _explain(self, item: str, amount: int) -> str:
        """Why this move: which recipe in the tree wants the item, and what is missing."""
        goal_recipe = self.book.chosen(self.goal)
        assert goal_recipe is not None
        if item == self.goal:
            return f"I have everything the {item} needs, so I craft it."
        opening = ""
        if not self.inventory:
            needs = ", ".join(f"{n} {name}" for name, n in goal_recipe.inputs)
            opening = f"The {self.goal} needs {needs}. "
        users = " and ".join(users_of(self.book, self.goal, item))
        _, missing = shortfalls(self.book, self.goal, self.inventory)
        lack = missing[item]
        recipe = self.book.chosen(item)
        if recipe is None:
            return f"{opening}I need {lack} {item} for the {users}; it is a base item, so I get it."
        have = self.inventory.get(item, 0)
        used = ", ".join(f"{n * amount} {name}" for name, n in recipe.inputs)
        return (
            f"{opening}I need {have + lack} {item} for the {users} and have {have or 'none'}, "
            f"so I craft {recipe.count * amount} {item} from {used}."
        )
