"""Imitation ceilings: how well a lookup table over what a policy needs can do with the same demonstrations.

    python -m gymflow.eval.ceiling maze              # reads data/instructions and data/rollouts/trajectories
    python -m gymflow.eval.ceiling babyai --data DIR # also textcraft, wordle
    python -m gymflow.eval.ceiling babyai --misread sft  # how many of SFT's held-out moves no table makes

A `Reader` per environment reads, from the text a policy is shown (and its own past actions), the features a
policy needs, as keys from the finest to the coarsest; it also writes an action in the table's terms (an object
by its role, not its name) and back. The table maps each key to the action the demonstrations took most often
there and backs off to a coarser key where a state was never seen. Fitted on AgentTraj, it is what imitation of
those demonstrations can reach without learning to read; fitted on the expert over the same train tasks, about
the best any policy over those features does with that much data. Both next to SFT show the gap a model leaves.

What each reader keeps (docs/results/ceilings.md says why):
- maze: where the goal lies, the open ways, the last move; backs off to (goal, open), then the first open way
  toward the goal.
- babyai: the mission's pending clause (with where its object lay at the start, "on your left"); whether
  that object is out of view, in view or right ahead (a door's state too); what is carried; for a door to
  open, whether a key or box is in view; for put-next, the fixed object; what is straight ahead; the roles in
  view; the last action. Backs off by dropping the last action, then what is ahead and the roles in view, then
  the key, box and fixed object, then all but the clause. Objects are named by role (target, fixed, key, box,
  door, other), so "go to red ball 1" is learned as "go to <target>" and played on the nearest target in view.
- textcraft: the goal's crafting tree as the listed commands give it (its shape and counts; items by their
  place in the tree) and what of it is in the inventory; backs off to the shape without counts and which
  tree items are held. An action is a get or craft of a tree place with its amount.
- wordle: every guess and its marks so far; backs off to what they tell (the expert's "Feedback so far"), then
  to the guess number.
"""

from __future__ import annotations

import argparse
import math
import re
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from gymflow import paths
from gymflow.agent.react import parse_action
from gymflow.envs import make_env
from gymflow.envs.base import Task
from gymflow.envs.maze import MOVES
from gymflow.envs.wordle import OPENER, knowledge, parse_guess

Key = tuple[str, ...]
Keys = tuple[Key, ...]  # one state's keys, finest first
VERBAL = re.compile(r"Goal is ([a-z ]+)\. Open: ([a-z, ]*)\. Last move: ([a-z]+)\.")
COORDS = re.compile(r"pos (\d+),(\d+) goal (\d+),(\d+) walls: ([a-z, ]+)")


class Reader(ABC):
    """One episode as a policy over features sees it: built on the first observation, told each action and the
    observation it got."""

    @abstractmethod
    def __init__(self, observation: str) -> None: ...

    @abstractmethod
    def update(self, action: str, observation: str) -> None:
        """Take in the action played and what the environment answered."""

    @abstractmethod
    def keys(self) -> Keys | None:
        """The state's keys, finest first; None where the text shows no state to act on."""

    def abstract(self, action: str) -> str | None:
        """The action in the table's terms (None: it names nothing the features know)."""
        return action

    def ground(self, abstract: str) -> str | None:
        """A table action as an action here (None: it cannot be played in this state)."""
        return abstract

    @abstractmethod
    def fallback(self) -> str:
        """The move where no key of the state was ever seen, or none of its actions can be played."""


# ---- maze ------------------------------------------------------------------------------------------------
def maze_features(observation: str, last_move: str | None) -> Key | None:
    """(goal directions, open ways, last move) from either view's observation text; None for one that shows
    no state (the goal reached, an invalid action)."""
    if m := VERBAL.search(observation):
        return m.group(1), m.group(2), m.group(3)
    if m := COORDS.search(observation):
        r, c, gr, gc = map(int, m.group(1, 2, 3, 4))
        walls = set(m.group(5).split(", "))
        toward = [
            w for w, n in (("down", gr - r), ("up", r - gr), ("right", gc - c), ("left", c - gc)) if n > 0
        ]
        return " and ".join(toward), ", ".join(d for d in MOVES if d not in walls), last_move or "none"
    return None


class MazeReader(Reader):
    """The current observation and the last move that went through (the coordinate view does not say it)."""

    def __init__(self, observation: str) -> None:
        self.observation, self.last = observation, None

    def update(self, action: str, observation: str) -> None:
        if not observation.startswith(("A wall blocks", "Invalid action")):
            self.last = action.split()[-1]
        self.observation = observation

    def keys(self) -> Keys | None:
        key = maze_features(self.observation, self.last)
        return None if key is None else (key, key[:2])

    def fallback(self) -> str:
        key = maze_features(self.observation, self.last)
        if key is None:
            return "move up"
        toward, open_ways = key[0].split(" and "), key[1].split(", ")
        return f"move {next((d for d in toward if d in open_ways), open_ways[0])}"


# ---- babyai ----------------------------------------------------------------------------------------------
DESC = r"(?:the|a) (?:(red|green|blue|purple|yellow|grey) )?(ball|box|key|door|object)"
WHERE = r"(?: (in front of you|behind you|on your left|on your right))?"  # as the agent stood at the start
CLAUSE = re.compile(rf"(go to|pick up|open|put) {DESC}{WHERE}(?: next to {DESC})?")
VIEW = re.compile(r"You see(?:: (.*?)| no objects)\. Facing: (.*?)\. Carrying(?:: (.*?)\.| nothing\.)")
SEEN = re.compile(r"([a-z]+(?: [a-z]+)* \d+) \(([^)]*)\)")
IN_PLACE = ("turn left", "turn right", "toggle", "pick up", "drop", "check available actions")
AT_START = {  # where a mission's object lay at the start, by its (ahead, right) as the agent then stood
    "in front of you": lambda ahead, right: ahead > 0,
    "behind you": lambda ahead, right: ahead < 0,
    "on your left": lambda ahead, right: right < 0,
    "on your right": lambda ahead, right: right > 0,
}
VERBS = ("toggle and go through", "go through", "go to", "pick up", "drop next to")  # longest first


@dataclass(frozen=True)
class Clause:
    """One part of a mission: its verb, the object it names by colour and type (None: any) and where it lay
    at the start; put-next's fixed object too."""

    verb: str
    color: str | None
    kind: str
    where: str | None = None
    fixed_color: str | None = None
    fixed_kind: str | None = None


def parse_mission(mission: str) -> list[Clause]:
    """The mission's clauses in the order they must be done (BabyAI's "a, then b", "a after you b")."""
    if " after you " in mission:
        first, second = mission.split(" after you ", 1)
        parts = [second, first]
    else:
        parts = re.split(r", then | and (?=go to|pick up|open|put)", mission)
    clauses = []
    for part in parts:
        if m := CLAUSE.search(part):
            clauses.append(Clause(*m.groups()))
    return clauses


def matches(name: str, color: str | None, kind: str | None) -> bool:
    """Whether an object in view ("red closed door 1", or "red ball" carried) fits a mission's description."""
    words = name.split()
    if words[-1].isdigit():
        words = words[:-1]
    return kind is not None and (color is None or words[0] == color) and kind in ("object", words[-1])


def offset(text: str) -> tuple[int, int]:
    """(ahead, right) of an object's offset text, "2 ahead, 1 left" -> (2, -1)."""
    ahead = re.search(r"(\d+) ahead", text)
    side = re.search(r"(\d+) (left|right)", text)
    right = 0 if side is None else int(side.group(1)) * (1 if side.group(2) == "right" else -1)
    return (int(ahead.group(1)) if ahead else 0), right


class BabyAIReader(Reader):
    """The mission's pending clause (advanced when an observation says it is done), the last view (objects
    nearest first with their offsets, what is ahead, what is carried), the last action, and while the agent
    has only turned in place, how far it has turned: that places an object in view where the mission's "on
    your left" means, as the agent stood at the start. Once it has walked, any object of the clause's colour
    and type is its target."""

    def __init__(self, observation: str) -> None:
        mission = observation.split("\n", 1)[0].removeprefix("Your goal: ")
        self.clauses = parse_mission(mission) or [Clause("go to", None, "object")]
        self.part = 0
        self.last = "none"
        self.turned: int | None = 0  # right turns since the start, mod 4; None once the agent has walked
        self.seen: list[str] = []
        self.offsets: dict[str, tuple[int, int]] = {}
        self.facing, self.carrying = "open floor", ""
        self._read(observation)

    def _read(self, observation: str) -> None:
        if m := VIEW.search(observation):
            found = SEEN.findall(m.group(1) or "")
            self.seen = [name for name, _ in found]
            self.offsets = {name: offset(text) for name, text in found}
            self.facing, self.carrying = m.group(2), m.group(3) or ""

    @property
    def clause(self) -> Clause:
        return self.clauses[min(self.part, len(self.clauses) - 1)]

    def update(self, action: str, observation: str) -> None:
        c, self.last = self.clause, self.abstract(action) or "other"
        if self.turned is not None and action in IN_PLACE:
            self.turned = (self.turned + {"turn right": 1, "turn left": 3}.get(action, 0)) % 4
        elif self.turned is not None:
            self.turned = None  # it walked (or may have): where it stood at the start is lost
        opened = re.match(r"The ([a-z]+) door is now open\.", observation)
        picked = re.match(r"You picked up the ([a-z ]+)\.", observation)
        dropped = re.match(r"You dropped the ([a-z ]+) next to ([a-z ]+ \d+)\.", observation)
        if (
            (c.verb == "open" and opened and matches(f"{opened.group(1)} door", c.color, c.kind))
            or (c.verb == "pick up" and picked and matches(picked.group(1), c.color, c.kind))
            or (c.verb == "put" and dropped and matches(dropped.group(2), c.fixed_color, c.fixed_kind))
        ) and self.part < len(self.clauses) - 1:  # the last clause done ends the episode: this one was wrong
            self.part += 1
        self._read(observation)

    def role(self, name: str) -> str:
        """What an object is to the pending clause: target, fixed, key, box, door or other."""
        c = self.clause
        if matches(name, c.color, c.kind) and self._where_fits(name):
            return "target"
        if c.verb == "put" and matches(name, c.fixed_color, c.fixed_kind):
            return "fixed"
        kind = name.split()[-2]
        if c.verb == "open" and kind in ("key", "box"):
            return kind
        return "door" if kind == "door" else "other"

    def _where_fits(self, name: str) -> bool:
        """Whether an object in view lay where the clause says at the start (true once that is unknown)."""
        if self.clause.where is None or self.turned is None or name not in self.offsets:
            return True
        ahead, right = self.offsets[name]
        for _ in range(self.turned):  # a right turn: what is ahead now was on the right before
            ahead, right = -right, ahead
        return AT_START[self.clause.where](ahead, right)

    def _status(self, role: str) -> str:
        """none, seen or ahead (right in front) for the nearest object of `role`; a door's state after it."""
        name = next((s for s in self.seen if self.role(s) == role), None)
        if name is None:
            return "none"
        where = "ahead" if self.facing == f"{name}, 1 step away" else "seen"
        return f"{where}:{name.split()[1]}" if name.split()[-2] == "door" else where

    def _carried(self) -> str:
        """nothing, target (what the clause names), key or box (for a door to open), or other."""
        if not self.carrying:
            return "nothing"
        if matches(self.carrying, self.clause.color, self.clause.kind):
            return "target"
        kind = self.carrying.split()[-1]
        return kind if self.clause.verb == "open" and kind in ("key", "box") else "other"

    def _ahead(self) -> str:
        what, _, distance = self.facing.partition(", ")
        near = ":1" if distance.startswith("1 ") else ""
        return (self.role(what) if what in self.seen else what) + near

    def keys(self) -> Keys | None:
        c = self.clause
        tag = f"{c.verb} {c.where} #{self.part}" if c.where else f"{c.verb} #{self.part}"
        target, carried = self._status("target"), self._carried()
        helpers = tuple(self._status(r) for r in ("key", "box", "fixed"))
        roles = ",".join(sorted({self.role(s) for s in self.seen}))
        return (
            (tag, target, carried, *helpers, self._ahead(), roles, self.last),
            (tag, target, carried, *helpers, self._ahead(), roles),
            (tag, target, carried, *helpers),
            (tag, target, carried),
            (tag,),
        )

    def abstract(self, action: str) -> str | None:
        for verb in VERBS:
            if action.startswith(verb + " "):
                name = action[len(verb) + 1 :]
                return f"{verb} <{self.role(name)}>" if name in self.seen else None
        return action

    def ground(self, abstract: str) -> str | None:
        if m := re.fullmatch(r"(.+) <([a-z]+)>", abstract):
            name = next((s for s in self.seen if self.role(s) == m.group(2)), None)
            return None if name is None else f"{m.group(1)} {name}"
        return abstract

    def fallback(self) -> str:
        return "turn left"


# ---- textcraft -------------------------------------------------------------------------------------------
LINE = re.compile(r"^craft (\d+) (.+?) using (.+)$", re.MULTILINE)
COUNTED = re.compile(r"(\d+) (.+)")
Recipes = dict[str, tuple[int, list[tuple[str, int]]]]


def listed_recipes(instruction: str) -> tuple[Recipes, str]:
    """The crafting commands an instruction lists, item -> (count made, ingredients), and its goal."""
    recipes: Recipes = {}
    for m in LINE.finditer(instruction):
        inputs = [
            (n.group(2), int(n.group(1))) for p in m.group(3).split(", ") if (n := COUNTED.fullmatch(p))
        ]
        recipes.setdefault(m.group(2), (int(m.group(1)), inputs))
    goal = re.search(r"Goal: craft (.+)\.", instruction)
    return recipes, goal.group(1) if goal else ""


def crafting_tree(recipes: Recipes, goal: str) -> tuple[dict[str, str], str, str]:
    """Each item of the goal's tree by its place ("g", "g.1", "g.1.2": the first ingredient's second
    ingredient), first visit depth-first as the listing orders ingredients; and the tree's shape with counts
    and without ("b" a base item, "@g.1" an item met before)."""
    places: dict[str, str] = {}

    def visit(item: str, place: str) -> tuple[str, str]:
        if item in places:
            return f"@{places[item]}", f"@{places[item]}"
        places[item] = place
        if item not in recipes:
            return "b", "b"
        made, inputs = recipes[item]
        subs = [visit(name, f"{place}.{i}") for i, (name, _) in enumerate(inputs, 1)]
        counted = ",".join(f"{n}*{s}" for (_, n), (s, _) in zip(inputs, subs, strict=True))
        return f"{made}({counted})", "(" + ",".join(f for _, f in subs) + ")"

    with_counts, shape = visit(goal, "g")
    return places, with_counts, shape


class TextCraftReader(Reader):
    """The listed recipes and the goal's tree (from the instruction) and the inventory, counted from the
    game's "Got" and "Crafted" answers."""

    def __init__(self, observation: str) -> None:
        self.recipes, goal = listed_recipes(observation)
        self.places, self.with_counts, self.shape = crafting_tree(self.recipes, goal)
        self.items = {place: item for item, place in self.places.items()}
        self.inventory: Counter[str] = Counter()

    def update(self, action: str, observation: str) -> None:
        if m := re.match(r"Got (\d+) (.+)$", observation):
            self.inventory[m.group(2)] += int(m.group(1))
        elif m := re.match(r"Crafted (\d+) (.+?)(?:\. Goal reached\.)?$", observation):
            self.inventory[m.group(2)] += int(m.group(1))
            for part in action.split(" using ", 1)[-1].split(", "):
                if n := COUNTED.fullmatch(part.strip()):
                    self.inventory[n.group(2)] -= int(n.group(1))

    def keys(self) -> Keys | None:
        held = [
            (place, self.inventory[item]) for item, place in self.places.items() if self.inventory[item] > 0
        ]
        exact = ",".join(f"{place}={n}" for place, n in held)
        return (self.with_counts, exact), (self.shape, ",".join(place for place, _ in held))

    def _asked(self, place: str) -> int:
        """How many of the item at `place` its parent's listed recipe takes."""
        parent = self.items[place.rsplit(".", 1)[0]]
        return dict(self.recipes[parent][1])[self.items[place]]

    def abstract(self, action: str) -> str | None:
        """A get as a multiple of what its parent's recipe takes ("get x3/2 <g.1>"), a craft as a multiple of
        its recipe ("craft x2 <g.1>"): the same tree asks for the same multiples whatever the counts."""
        if (m := re.fullmatch(r"get (\d+) (.+)", action)) and (place := self.places.get(m.group(2))):
            return None if place == "g" else f"get x{Fraction(int(m.group(1)), self._asked(place))} <{place}>"
        m = re.fullmatch(r"craft \d+ (.+?) using (\d+) .+", action)
        if m is None or m.group(1) not in self.recipes or m.group(1) not in self.places:
            return None
        times = Fraction(int(m.group(2)), self.recipes[m.group(1)][1][0][1])
        return f"craft x{times} <{self.places[m.group(1)]}>"

    def ground(self, abstract: str) -> str | None:
        m = re.fullmatch(r"(get|craft) x([\d/]+) <(.+)>", abstract)
        item = self.items.get(m.group(3)) if m else None
        if m is None or item is None or (m.group(1) == "get") == (item in self.recipes):
            return None  # a place this tree lacks, or a get of a crafted item (or the reverse)
        if m.group(1) == "get":
            return f"get {math.ceil(Fraction(m.group(2)) * self._asked(m.group(3)))} {item}"
        times = math.ceil(Fraction(m.group(2)))
        made, inputs = self.recipes[item]
        return f"craft {made * times} {item} using " + ", ".join(f"{n * times} {name}" for name, n in inputs)

    def fallback(self) -> str:
        return "inventory"


# ---- wordle ----------------------------------------------------------------------------------------------
MARKED = re.compile(r"^((?:[a-z] ){4}[a-z]) -> ((?:[byg] ){4}[byg])\.")


class WordleReader(Reader):
    """Every valid guess so far with its marks, as the observations show them."""

    def __init__(self, observation: str) -> None:
        self.history: list[tuple[str, str]] = []

    def update(self, action: str, observation: str) -> None:
        if m := MARKED.match(observation):
            self.history.append((m.group(1).replace(" ", ""), m.group(2).replace(" ", "")))

    def keys(self) -> Keys | None:
        full = " ".join(f"{g}:{m}" for g, m in self.history)
        return (full,), (knowledge(self.history),), (str(len(self.history)),)

    def abstract(self, action: str) -> str | None:
        return parse_guess(action)

    def ground(self, abstract: str) -> str | None:
        return None if any(g == abstract for g, _ in self.history) else " ".join(abstract)

    def fallback(self) -> str:
        return " ".join(OPENER)


def first_fitting_answer(reader: Reader) -> str:
    """Wordle's reference beside the table, not a table: the first answer of the official list that every mark
    so far allows. It reads the feedback perfectly and searches the answer list, with no lookahead."""
    from gymflow.envs.wordle import candidates, word_lists

    assert isinstance(reader, WordleReader)
    return " ".join(word_lists()[0][candidates(reader.history)[0]])


READERS: dict[str, type[Reader]] = {
    "maze": MazeReader,
    "babyai": BabyAIReader,
    "textcraft": TextCraftReader,
    "wordle": WordleReader,
}


# ---- the table, fitted and played ------------------------------------------------------------------------
def read_moves(
    messages: list[dict[str, str]], reader: type[Reader]
) -> Iterator[tuple[Keys | None, str | None]]:
    """Each move of an episode's chat messages as (keys, action in the table's terms), the keys read from what
    was shown before the move; the action is None where the reader cannot place it (or none was written)."""
    state: Reader | None = None
    played: str | None = None
    for message in messages:
        if message["role"] == "user":
            if state is None:
                state = reader(message["content"])
            elif played is not None:
                state.update(played, message["content"])
        elif message["role"] == "assistant" and state is not None:
            played = parse_action(message["content"])
            yield state.keys(), None if played is None else state.abstract(played)


def states_and_moves(
    messages: list[dict[str, str]], reader: type[Reader] = MazeReader
) -> Iterator[tuple[Keys, str]]:
    """Each (keys, action in the table's terms) of a demonstration, where both can be read."""
    for keys, abstract in read_moves(messages, reader):
        if keys is not None and abstract is not None:
            yield keys, abstract


def misread(env_name: str, episodes: Iterable[list[dict[str, str]]]) -> tuple[int, int]:
    """(moves the table's terms cannot hold, moves) of a policy's episodes: an action that names an object not
    in view (babyai), gets or crafts nothing of the goal's tree (textcraft), is no word (wordle), or is not an
    action at all. No demonstration does any of these: they measure how often a policy misreads."""
    moves = [abstract for m in episodes for _, abstract in read_moves(m, READERS[env_name])]
    return sum(a is None for a in moves), len(moves)


class LookupPolicy:
    """The most frequent demonstrated action per key, at the finest level of keys where the state was seen and
    one of its actions can be played here (ties: alphabetical); else the reader's fallback. `levels` counts
    which level decided, the last index for the fallback."""

    def __init__(self, pairs: Iterable[tuple[Keys, str]]) -> None:
        self.tables: list[dict[Key, Counter[str]]] = []
        for keys, action in pairs:
            while len(self.tables) < len(keys):
                self.tables.append(defaultdict(Counter))
            for table, key in zip(self.tables, keys, strict=False):
                table[key][action] += 1
        self.levels: Counter[int] = Counter()

    def __call__(self, reader: Reader) -> str:
        for level, (table, key) in enumerate(zip(self.tables, reader.keys() or (), strict=False)):
            for abstract, _ in sorted(table.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0])):
                if (action := reader.ground(abstract)) is not None:
                    self.levels[level] += 1
                    return action
        self.levels[len(self.tables)] += 1
        return reader.fallback()


def play(env_name: str, policy: Callable[[Reader], str], tasks: list[Task]) -> list[bool]:
    """Whether `policy` solves each of `tasks`, played in process within the environment's turn limit."""
    env = make_env(env_name)
    wins: list[bool] = []
    try:
        for task in tasks:
            reader = READERS[env_name](env.reset(task))
            for _ in range(env.spec.max_turns):
                action = policy(reader)
                step = env.step(action)
                if step.done:
                    break
                reader.update(action, step.observation)
            wins.append(step.done and env.spec.is_success(step.reward))
    finally:
        env.close()
    return wins


def demonstrated(env_name: str, tasks: list[Task], demonstrator: str) -> list[list[dict[str, str]]]:
    """The chat messages of `demonstrator` playing each task, successes and failures alike (the expert
    fails none of these environments' tasks, so all are demonstrations)."""
    from gymflow.rollout.expert import run_expert

    env = make_env(env_name)
    try:
        episodes = [run_expert(env, t, demonstrator=demonstrator) for t in tasks]
    finally:
        env.close()
    return [[{"role": m.role, "content": m.text} for m in ep.messages] for ep in episodes]


def demonstrator_solves(env_name: str, tasks: list[Task], demonstrator: str) -> list[bool]:
    """Whether `demonstrator` itself solves each of `tasks`."""
    from gymflow.rollout.expert import run_expert

    env = make_env(env_name)
    try:
        return [run_expert(env, t, demonstrator=demonstrator).success for t in tasks]
    finally:
        env.close()


def by_difficulty(tasks: list[Task], solved: list[bool]) -> dict[str, float]:
    """Success over all tasks ("all") and per difficulty, as data/metrics/evaluate/<policy>.json has it."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for task, ok in zip(tasks, solved, strict=True):
        groups["all"].append(ok)
        groups[str(task.difficulty)].append(ok)
    return {d: sum(oks) / len(oks) for d, oks in groups.items()}


def fitted(env_name: str, demonstrations: Iterable[list[dict[str, str]]]) -> LookupPolicy:
    """The table of every (state, action) in `demonstrations`, read by the environment's reader."""
    return LookupPolicy(p for m in demonstrations for p in states_and_moves(m, READERS[env_name]))


def default_demonstrator(data_dir: str | Path, env_name: str) -> str:
    """Who played the run's AgentTraj: `trajectories.demonstrators` of the params.yaml beside the data
    folder (the trajectory files do not record it); the expert where none is named."""
    import yaml

    params = Path(data_dir).resolve().parent / "params.yaml"
    named = yaml.safe_load(params.read_text()) if params.exists() else {}
    return ((named.get("trajectories") or {}).get("demonstrators") or {}).get(env_name, "expert")


def ceilings(
    data_dir: str | Path, env_name: str = "maze", demonstrator: str | None = None
) -> dict[str, object]:
    """Held-out success (all and per difficulty) of the demonstrator, of the lookup tables fitted on AgentTraj
    and on the expert over the same train tasks (the first as many as AgentTraj attempted), with how many
    episodes AgentTraj kept of how many and how often each table decided on its finest key."""
    from gymflow.envs.instructions import load_tasks
    from gymflow.store.io import file_metadata, table_path
    from gymflow.train.sft import conversations

    demonstrator = demonstrator or default_demonstrator(data_dir, env_name)
    trajectories = paths.under(data_dir, paths.TRAJECTORY_ROLLOUTS)
    attempted = int(file_metadata(table_path(trajectories, env_name, "episodes"))["gymflow.attempted"])
    train = load_tasks(data_dir, env_name, "train")[:attempted]
    held_out = load_tasks(data_dir, env_name, "eval")
    agenttraj = [conv["messages"] for conv in conversations(trajectories, [env_name])]
    result: dict[str, object] = {
        "demonstrator": demonstrator,
        "agenttraj_episodes": len(agenttraj),
        "agenttraj_attempted": attempted,
        "demonstrator_on_held_out": by_difficulty(
            held_out, demonstrator_solves(env_name, held_out, demonstrator)
        ),
    }
    for name, demos in (("agenttraj", agenttraj), ("expert", demonstrated(env_name, train, "expert"))):
        table = fitted(env_name, demos)
        result[f"table_from_{name}"] = by_difficulty(held_out, play(env_name, table, held_out))
        result[f"table_from_{name}_finest_key"] = table.levels[0] / max(sum(table.levels.values()), 1)
    if env_name == "wordle":
        result["first_fitting_answer"] = by_difficulty(
            held_out, play(env_name, first_fitting_answer, held_out)
        )
    result["held_out_tasks"] = len(held_out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env", choices=list(READERS), help="the environment")
    parser.add_argument("--data", default=str(paths.DATA), help=f"the data folder (default: {paths.DATA})")
    parser.add_argument(
        "--demonstrator",
        help="who played AgentTraj (default: params.yaml beside the data folder, else expert)",
    )
    parser.add_argument(
        "--misread",
        metavar="POLICY",
        help="only count the moves of POLICY's held-out episodes (data/rollouts/evaluate/POLICY) that the "
        "table's terms cannot hold",
    )
    args = parser.parse_args()
    if args.misread:
        from gymflow.train.sft import conversations

        folder = paths.under(args.data, paths.EVALUATE_ROLLOUTS) / args.misread
        episodes = [conv["messages"] for conv in conversations(folder, [args.env], stage="evaluate")]
        bad, moves = misread(args.env, episodes)
        print(f"misread: {bad / max(moves, 1):.3f} of {moves} moves in {len(episodes)} episodes")
        return
    for name, value in ceilings(args.data, args.env, args.demonstrator).items():
        if isinstance(value, dict):
            parts = ", ".join(f"{d} {v:.2f}" for d, v in sorted(value.items()) if d != "all")
            print(f"{name}: {value['all']:.3f} ({parts})")
        else:
            print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
