"""ScienceWorld (AgentGym's SciWorld): elementary science experiments in a text world, on the `scienceworld`
package (a Scala simulator run in a JVM through py4j).

A task is one (task type, variation) of ScienceWorld with no simplifications, as in AgentGym. Splits are
ScienceWorld's own: train tasks come from its train variations, eval tasks from its test variations. The
category is the task type. Only task types whose gold paths mostly fit the 30-turn limit are used (AgentGym
likewise left out the long grow-plant, inclined-plane and genetics types), and only variations whose gold
path reaches score 100 within `max_turns` when replayed at generation time; the gold path, cut where the
task completes, is stored in the task's `hidden` and is the expert.

Reward is ScienceWorld's score (0-100, negative on a failure such as focusing on the wrong object) mapped
to max(score, 0) / 100, so partial progress pays; the episode ends on completion or failure. Each env
object owns one simulator (one JVM, ~1 s to start, ~480 MB), started on the first reset, reused across
resets and shut down by `close()`. The JVM runs with a constant identity hash so that a variation is the
same world on every load (see `start_simulator`): without it the gold path of some variations fails.
Generating a task costs a simulator run (~0.5-1.5 s); episodes take ~0.2 s.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from typing import Any

from py4j.protocol import Py4JJavaError
from pydantic import Field, field_validator
from scienceworld import ScienceWorldEnv

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, NoExpert, Step, Task, echo, task_rng

# Task types whose gold paths mostly fit 30 turns, in ScienceWorld's topic order, with their usable (train, test)
# variation counts: at least this many have a gold path that reaches score 100 within the turn limit
# (`usable_variations`; a variation or two can flip with what the JVM loaded before, so flaky counts keep a
# margin). The draw moves a short type's quota to the others up front instead of verifying every variation.
# Left out: boil/melt/freeze/change-state and identify-life-stages-1 (no or one short test variation),
# measure-melting-point-unknown-substance (23 of 150 train variations fit, slow to generate) and the grow,
# inclined-plane and genetics types (60-190 gold actions).
TASK_TYPES: dict[str, tuple[int, int]] = {
    "use-thermometer": (270, 135),
    "measure-melting-point-known-substance": (183, 47),
    "power-component": (10, 5),
    "power-component-renewable-vs-nonrenewable-energy": (10, 5),
    "test-conductivity": (276, 143),
    "test-conductivity-of-unknown-substances": (276, 133),
    "find-living-thing": (150, 75),
    "find-non-living-thing": (150, 75),
    "find-plant": (150, 75),
    "find-animal": (150, 75),
    "chemistry-mix": (10, 3),  # measured 12/4 and 12/5: a margin
    "chemistry-mix-paint-secondary-color": (18, 9),
    "chemistry-mix-paint-tertiary-color": (15, 7),  # measured 16-17/8
    "lifespan-longest-lived": (62, 32),
    "lifespan-shortest-lived": (62, 32),
    "lifespan-longest-lived-then-shortest-lived": (62, 32),
    "identify-life-stages-2": (4, 4),
}
SIMPLIFICATION = ""  # none, as in AgentGym: doors start closed (gold paths are the same with "easy")
# Same world on every load (see start_simulator); a bounded heap and the serial collector keep a JVM near
# 480 MB instead of ~900 MB at the same speed (measured over 150 episodes).
JVM_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2 -Xmx512m -XX:+UseSerialGC"
STEP_LIMIT = 10**6  # the rollout engine enforces the turn limit, not the simulator

SYSTEM_PROMPT = (
    "You are an agent in ScienceWorld, a text world for science experiments. Each turn you see the result "
    "of your last action; act to finish the task. Actions (OBJ is an object or place you can see):\n"
    "look around | look at OBJ | look in OBJ | read OBJ | inventory | task\n"
    "go to LOC | open OBJ | close OBJ (doors must be opened before going through)\n"
    "pick up OBJ | put down OBJ | move OBJ to OBJ | pour OBJ in OBJ | dunk OBJ in OBJ | mix OBJ | eat OBJ\n"
    "activate OBJ | deactivate OBJ | use OBJ on OBJ | connect OBJ to OBJ | disconnect OBJ | flush OBJ\n"
    "focus on OBJ (signals your answer: focusing on the wrong object fails the task) | wait (10 steps) | wait1\n"
    "If the game lists numbered choices for an ambiguous action, answer with the number.\n"
    "Answer in the format:\nThought: <your thought>\nAction: <your action>"
)

NO_MATCH = "No known action matches that input."
NO_MATCH_HINT = " Use a verb form from the action list with an object you can see, e.g. look around, open door to kitchen."
NOT_A_CHOICE = "Unknown action. Type 'help'"  # after compact(): the answer to a numbered choice was no number
NOT_A_CHOICE_HINT = (
    "That was not one of the numbers offered, so the choice was cancelled; enter your action again."
)


def compact(text: str) -> str:
    """ScienceWorld's text with runs of spaces and tabs collapsed and blank lines dropped."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def score_of(server: Any) -> int:
    """The simulator's score on its 0-100 scale (negative after a failure)."""
    return int(round(100 * server.getScore()))


def is_over(server: Any) -> bool:
    """ScienceWorld ends an episode on completion and, through a negative score, on failure."""
    return bool(server.getCompleted()) or score_of(server) < 0


_LAUNCH_LOCK = threading.Lock()


def start_simulator() -> ScienceWorldEnv:
    """A simulator whose worlds are the same on every load of a variation.

    Objects with the same name (two wood cups) are listed, numbered in ambiguity prompts and wired up in
    an order that follows Java identity hash codes, so by default a variation's first observation and
    whether its gold path works change from load to load. A constant identity hash (an experimental
    HotSpot option, passed through JAVA_TOOL_OPTIONS since the package does not take JVM options) makes
    that order the insertion order, at no measurable cost in speed.
    """
    with _LAUNCH_LOCK:  # the environment variable is process-wide: one launch at a time
        previous = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = f"{previous or ''} {JVM_OPTIONS}".strip()
        try:
            return ScienceWorldEnv("", envStepLimit=STEP_LIMIT)
        finally:
            if previous is None:
                del os.environ["JAVA_TOOL_OPTIONS"]
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = previous


def load(sw: ScienceWorldEnv, task_name: str, variation: int, gold: bool = False) -> str:
    """Load a task variation, reset it and return the first "look around" text."""
    sw.load(task_name, variation, SIMPLIFICATION, generateGoldPath=gold)
    sw.server.reset()
    return sw.server.step("look around")


MAX_VARIATIONS: dict[str, int] = {}  # task type -> how many variations the simulator has (all splits)


def max_variations(sw: ScienceWorldEnv, task_name: str) -> int:
    """How many variations `task_name` has, asked of the simulator once per process."""
    if task_name not in MAX_VARIATIONS:
        MAX_VARIATIONS[task_name] = int(sw.get_max_variations(task_name))
    return MAX_VARIATIONS[task_name]


def verified_gold(sw: ScienceWorldEnv, task_name: str, variation: int, limit: int) -> list[str] | None:
    """The gold path cut where it completes the task (a "wait1" or "look around" often trails), or None
    if it fails or does not complete within `limit` actions."""
    load(sw, task_name, variation, gold=True)  # the solver's run leaves the world as a plain load does
    gold = list(sw.get_gold_action_sequence())
    for i, action in enumerate(gold[:limit]):
        sw.server.step(action)
        if is_over(sw.server):
            return gold[: i + 1] if score_of(sw.server) == 100 else None
    return None


# Process-wide caches: generating a row costs a simulator run, and splits are drawn more than once.
VARIATIONS: dict[tuple[str, str], list[int]] = {}  # (task type, "train" or "test") -> variation ids
ROWS: dict[tuple[str, int], tuple[str, list[str]] | None] = {}  # -> (description, gold), or None if unusable


class _TaskSource:
    """Task rows for one generate() call: starts a simulator only when a row is not cached yet."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sw: ScienceWorldEnv | None = None

    def simulator(self) -> ScienceWorldEnv:
        if self.sw is None:
            self.sw = start_simulator()
        return self.sw

    def split_variations(self, task_name: str, split: str) -> list[int]:
        """ScienceWorld's variation ids of a split: "train" is its train set, any other split its test set."""
        if (task_name, "test") not in VARIATIONS:
            sw = self.simulator()
            sw.load(task_name, 0, SIMPLIFICATION)
            VARIATIONS[(task_name, "train")] = sorted(int(v) for v in sw.get_variations_train())
            VARIATIONS[(task_name, "test")] = sorted(int(v) for v in sw.get_variations_test())
        return VARIATIONS[(task_name, "train" if split == "train" else "test")]

    def row(self, task_name: str, variation: int) -> tuple[str, list[str]] | None:
        key = (task_name, variation)
        if key not in ROWS:
            sw = self.simulator()
            gold = verified_gold(sw, task_name, variation, self.limit)
            ROWS[key] = None if gold is None else (compact(sw.get_task_description()), gold)
        return ROWS[key]

    def close(self) -> None:
        if self.sw is not None:
            self.sw.close()
            self.sw = None


def usable_variations(task_name: str, split: str, limit: int = 30) -> int:
    """How many of a task type's variations in `split` have a gold path that works within `limit` turns."""
    source = _TaskSource(limit)
    try:
        return sum(source.row(task_name, v) is not None for v in source.split_variations(task_name, split))
    finally:
        source.close()


class SciWorldHidden(Hidden):
    """A variation of one of the task types; whether the simulator has that variation only loading tells."""

    task_name: str
    variation: int = Field(ge=0)
    gold: list[str]

    @field_validator("task_name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in TASK_TYPES:
            raise ValueError(f"{echo(name)!r} is not one of the {len(TASK_TYPES)} task types played here")
        return name


class SciWorld(Env):
    hidden_schema = SciWorldHidden
    spec = EnvSpec(
        name="sciworld",
        description="ScienceWorld science experiments (17 task types, official train/test variations)",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=30,
        expert="ScienceWorld gold action sequence, verified to reach score 100",
    )

    def __init__(self) -> None:
        super().__init__()
        self.sw: ScienceWorldEnv | None = None
        self.gold: list[str] = []
        self.progress = 0  # gold actions taken so far
        self.history: list[str] = []  # observations of this episode, for the expert's thoughts

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(TASK_TYPES)

    @classmethod
    def capacity(cls, split: str) -> dict[str, int]:
        column = 0 if split == "train" else 1
        return {name: usable[column] for name, usable in TASK_TYPES.items()}

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        """Round-robin over the task types, each with its split's variations in a seeded random order; a
        variation whose gold path does not fit the turn limit is skipped for the type's next one.

        Every round takes the types in `difficulties()` order, the order in which `draw_balanced` gives out
        its quotas, so a draw wastes few simulator runs on tasks it would not keep (about 0.5 s each).
        """
        rng = task_rng("sciworld-tasks", split, seed)
        source = _TaskSource(cls.spec.max_turns)
        try:
            queues: dict[str, list[int]] = {}
            for name in TASK_TYPES:
                ids = list(source.split_variations(name, split))
                rng.shuffle(ids)
                queues[name] = ids
            while any(queues.values()):
                for name in TASK_TYPES:
                    while queues[name]:
                        variation = queues[name].pop()
                        row = source.row(name, variation)
                        if row is not None:
                            yield make_task(name, variation, split, *row)
                            break
        finally:
            source.close()

    def _reset(self, task: Task) -> str:
        if self.sw is None:
            self.sw = start_simulator()
        name, variation = task.hidden["task_name"], int(task.hidden["variation"])
        if variation >= (count := max_variations(self.sw, name)):
            # ScienceWorld would load some other world without a word, or fail in the JVM past 2**31
            raise BadTask(
                f"hidden.variation {variation} is out of range: {name} has variations 0-{count - 1}"
            )
        look = load(self.sw, name, variation)
        self.gold = list(task.hidden["gold"])
        self.progress = 0
        first = f"{task.instruction}\n{compact(look)}"
        self.history = [first]
        return first

    def _step(self, action: str) -> Step:
        assert self.sw is not None
        try:
            raw = self.sw.server.step(action)
        except Py4JJavaError:  # the simulator's parser threw: treat it like any unparsable input
            raw = NO_MATCH
        text = compact(raw) or "Nothing happens."
        if text.startswith(NO_MATCH):
            text += NO_MATCH_HINT
        elif text.startswith(NOT_A_CHOICE):
            text = NOT_A_CHOICE_HINT
        if self.progress < len(self.gold) and same_action(action, self.gold[self.progress]):
            self.progress += 1
        self.history.append(text)
        score = score_of(self.sw.server)
        return Step(text, max(score, 0) / 100, is_over(self.sw.server), {"score": score})

    def available_actions(self) -> list[str] | None:
        """ScienceWorld's action templates: its full list of valid action-object pairs runs to thousands."""
        if self.sw is None or self.done:
            return None
        templates = [t.replace("go OBJ", "go to LOC") for t in self.sw.get_possible_actions()]
        return [t for t in templates if t != "reset task"]

    def expert_step(self) -> tuple[str, str]:
        if self.task is None or self.progress >= len(self.gold):
            raise NoExpert("sciworld: the gold path is used up; the expert has no further move")
        action = self.gold[self.progress]
        return explain(self.gold, self.progress, self.task, self.history), action

    def close(self) -> None:
        if self.sw is not None:
            self.sw.close()
            self.sw = None


def make_task(task_name: str, variation: int, split: str, description: str, gold: list[str]) -> Task:
    return Task(
        env="sciworld",
        task_id=f"sciworld-{task_name}-{variation}",
        split=split,
        difficulty=task_name,
        seed=variation,
        instruction=description,
        hidden={"task_name": task_name, "variation": variation, "gold": gold},
    )


def same_action(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


# ---- the expert's thoughts: simple rules over the action, the gold plan and the task description ----------

NAV = ("open door to ", "go to ")
LOOKS = ("look around", "look at ", "look in ", "examine ", "inventory", "wait")
HEATERS = ("stove", "oven", "burner", "blast furnace", "hot plate")


def clean(obj: str) -> str:
    """An object reference as a person would say it in a thought."""
    obj = re.sub(r"\s+in inventory$", "", obj.strip())
    return re.sub(r"^(\w+) \1 ", r"\1 ", obj)  # "baby baby brown bear" -> "baby brown bear"


def main_object(action: str) -> str:
    """The first object an action names ("move X to Y" -> X)."""
    for verb in ("focus on", "pick up", "put down", "look at", "look in", "open door to", "go to"):
        if action.startswith(verb + " "):
            return clean(action[len(verb) + 1 :])
    words = action.split(" ", 1)
    rest = words[1] if len(words) > 1 else action
    return clean(re.split(r" (?:to|in|on) ", rest, maxsplit=1)[0])


def target_of(action: str) -> str | None:
    """The second object of "move X to Y" / "pour X in Y", if the action has one."""
    match = re.match(r"(?:move .+? to|pour .+ in) (.+)$", action)
    return clean(match.group(1)) if match else None


def a_or_an(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def task_says(description: str, place: str) -> str | None:
    """What the task says about `place` ("the gallium is located around the kitchen"), if anything short."""
    located = re.search(rf"of ([\w ]+?), which is located around the {re.escape(place)}\b", description)
    if located:
        return f"the {located.group(1)} is located around the {place}"
    for sentence in re.split(r"(?<=\.)\s+", description):
        if re.search(rf"\b{re.escape(place)}\b", sentence) and len(sentence) <= 90:
            sentence = re.sub(r"^(First|Then|Next), ", "", sentence.rstrip("."))
            return lower_first(sentence)
    return None


def kind_sought(description: str) -> str | None:
    match = re.search(r"find an? ?(?:\(n\))? ([\w -]+?)\.", description)
    return match.group(1) if match else None


def held_before(plan: list[str], i: int) -> set[str]:
    """Objects the plan picked up before step i."""
    return {main_object(a) for a in plan[:i] if a.startswith("pick up ")}


def destination_reason(plan: list[str], i: int, task: Task) -> tuple[str, str]:
    """Where a run of door/go actions leads, and why the expert goes there."""
    j = i
    dest = ""
    while j < len(plan) and plan[j].startswith(NAV):
        if plan[j].startswith("go to "):
            dest = plan[j][len("go to ") :]
        j += 1
    dest = dest or plan[i].split(" to ", 1)[-1]
    said = task_says(task.instruction, dest)
    if said:
        return dest, f"since the task says {said}"
    kind = kind_sought(task.instruction)
    if kind:
        return dest, f"to look for {a_or_an(kind)}"
    held = held_before(plan, i)
    later = [a for a in plan[j:] if not a.startswith(LOOKS + ("drop ",)) and main_object(a) not in held]
    if later and later[0].startswith("connect "):
        return dest, "to build a circuit there"
    if later:
        return dest, f"to get to the {main_object(later[0])}"
    return dest, "to continue the task"


def current_room(history: list[str]) -> str:
    """The room the episode's observations last placed the agent in."""
    for text in reversed(history):
        match = re.search(r"(?:You move to|is called) the ([\w ]+?)\.", text)
        if match:
            return match.group(1)
    return "room"


def explain(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    """A one- or two-sentence ReAct thought for the gold action plan[i]."""
    thought = explain_action(plan, i, task, history)
    if i == 0:
        goal = re.sub(r"^your task is to ", "", task.instruction.split(".")[0], flags=re.IGNORECASE)
        thought = f"My task is to {goal}. {thought}"
    return thought


def explain_action(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    action = plan[i]
    if action.startswith(NAV):
        return explain_move(plan, i, task)
    if action.isdigit():
        return f"The game asks which object I meant; option {action} is the one I want."
    verb_rules = [
        ("focus on ", explain_focus),
        ("look around", explain_look),
        ("pick up ", explain_pick),
        ("move ", explain_put),
        ("connect ", explain_connect),
        ("wait", explain_wait),
    ]
    for prefix, rule in verb_rules:
        if action.startswith(prefix):
            return rule(plan, i, task, history)
    return explain_simple(action)


def explain_move(plan: list[str], i: int, task: Task) -> str:
    action = plan[i]
    place = action.split(" to ", 1)[1]
    dest, why = destination_reason(plan, i, task)
    if action.startswith("open door to "):
        if place == dest:
            return f"I need to go to the {dest} {why}, so I open the door to it."
        return f"I need to reach the {dest} {why}; the way leads through the {place}, so I open its door."
    if place == dest:
        return f"The door is open, so I go to the {dest}."
    return f"I go to the {place} on my way to the {dest}."


def explain_look(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    where = current_room(history)
    kind = kind_sought(task.instruction)
    if kind:
        return f"I look around the {where} to see if there is {a_or_an(kind)} here."
    wired = any(a.startswith("connect ") for a in plan[:i])
    if task.difficulty.startswith("test-conductivity") and wired:
        return f"I look around the {where} to see whether the {circuit_device(plan)} in my circuit is on."
    later = [a for a in plan[i + 1 :] if not a.startswith(LOOKS + NAV)]
    if not later or "box" in (target_of(later[0]) or ""):
        return f"I look around the {where} to check the result."
    if later[0].startswith(("pick up ", "focus on ", "read ")):
        return f"I look around the {where} to find the {main_object(later[0])}."
    if later[0].startswith(("connect ", "drop ")):
        return f"I look around the {where} to see which electrical parts I can use."
    if later[0].startswith(("pour ", "mix ", "move ")):
        return f"I look around the {where} to find the ingredients and containers I need."
    return f"I look around the {where} to see what is here."


def explain_focus(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    obj = main_object(plan[i])
    name = task.difficulty
    earlier = sum(1 for a in plan[:i] if a.startswith("focus on "))
    if name.startswith("find-"):
        kind = kind_sought(task.instruction)
        return f"The {obj} is {a_or_an(kind)}, so I focus on it." if kind else f"I focus on the {obj}."
    if name.startswith("lifespan-"):
        extreme = "shortest" if "shortest" in name and (earlier or "then" not in name) else "longest"
        return f"Of the animals here, the {obj} has the {extreme} life span, so I focus on it."
    if name.startswith("identify-life-stages"):
        return f"From earliest to latest life stage, the next one is the {obj}, so I focus on it."
    if name == "chemistry-mix-paint-tertiary-color" and earlier == 0:
        return f"The {obj} is the intermediate (secondary color) paint the task asks me to focus on part-way."
    if name.startswith("chemistry-"):
        return f"The {obj} is the substance the task asks me to make, so I focus on it to finish."
    if "box" in obj:
        return (
            f"{evidence(task, history, plan, i)}By the task's rule the answer is the {obj}, so I focus on it."
        )
    order = "first" if earlier == 0 else "next"
    return f"The task says to focus on the {obj} {order}, so I do."


def explain_pick(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    obj = main_object(plan[i])
    if obj == "thermometer":
        return "I pick up the thermometer so I can measure temperatures wherever I go."
    for later in plan[i + 1 :]:
        if later.startswith(("move ", "pour ")) and target_of(later) == obj:
            return f"I pick up the {obj} to use it as a container."
        if later.startswith(("move ", "use ", "pour ", "connect ", "read ")) and obj in later:
            where = target_of(later) if later.startswith("move ") else None
            return f"I pick up the {obj} to take it " + (
                f"to the {where}." if where else "with me and use it."
            )
    return f"I pick up the {obj} so I have it with me for the task."


def explain_put(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    obj, target = main_object(plan[i]), target_of(plan[i])
    if target is None:
        return explain_simple(plan[i])
    if "box" in target:
        if task.difficulty.startswith("find-"):
            focused = [main_object(a) for a in plan[:i] if a.startswith("focus on ")]
            obj = focused[-1] if focused else obj
            return f"I have the {obj}; the task says to move it to the {target}, so I put it there."
        return f"{evidence(task, history, plan, i)}By the task's rule the {obj} goes in the {target}, so I move it there."
    if target in HEATERS:
        return f"I put the {obj} on the {target} to heat it."
    if target in ("freezer", "fridge"):
        return f"I put the {obj} in the {target} to cool it."
    if task.difficulty.startswith("measure-melting-point"):
        return f"I put the {obj} in the {target} so I can heat it and watch it melt."
    return f"I put the {obj} in the {target} to combine what the task needs."


def circuit_device(plan: list[str]) -> str:
    """The light bulb or motor that the plan's wires connect to ("... to anode in red light bulb")."""
    for action in plan:
        match = re.search(r" (?:anode|cathode) in ([\w ]+)$", action)
        if action.startswith("connect ") and match:
            return match.group(1)
    return ""


def evidence(task: Task, history: list[str], plan: list[str], i: int) -> str:
    """What the episode's observations showed, for the step that answers a measuring or testing task."""
    readings = re.findall(r"measures a temperature of (-?\d+(?:\.\d+)?) degrees", "\n".join(history))
    threshold = re.search(r"above (-?\d+(?:\.\d+)?) degrees", task.instruction)
    if task.difficulty == "use-thermometer" and readings and threshold:
        side = "above" if float(readings[-1]) > float(threshold.group(1)) else "below"
        return f"The thermometer read {readings[-1]} degrees celsius, {side} {threshold.group(1)}. "
    if task.difficulty.startswith("measure-melting-point") and readings:
        return f"My readings ({', '.join(readings)} degrees celsius) settle where the melting point lies. "
    device = circuit_device(plan[:i])
    looks = [text for text in history if f"{device}, which is" in text]
    if task.difficulty.startswith("test-conductivity") and device and looks:
        on = f"{device}, which is on" in looks[-1]
        return f"The {device} in my circuit is " + (
            "on, so it conducts. " if on else "off, so it does not conduct. "
        )
    return ""


def explain_connect(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    match = re.match(r"connect (.+?) to (.+)$", plan[i])
    a, b = (clean(match.group(1)), clean(match.group(2))) if match else ("parts", "circuit")
    if task.difficulty.startswith("test-conductivity"):
        device = circuit_device(plan) or "device"
        return f"I connect the {a} to the {b}: the circuit must run through the tested object, so the {device} shows if it conducts."
    return f"I connect the {a} to the {b} to build the circuit that powers the light."


def explain_wait(plan: list[str], i: int, task: Task, history: list[str]) -> str:
    if any(a.startswith("connect ") for a in plan[:i]):
        return "The circuit is set up; I wait a moment for the current to take effect."
    if task.difficulty.startswith("identify-life-stages"):
        return "I wait for the plants to grow into their next stage."
    if any(a.startswith("activate ") and main_object(a) in HEATERS for a in plan[:i]):
        return "I wait for the heat to take effect."
    return "I wait a moment for the change to take effect."


def explain_simple(action: str) -> str:
    """Thoughts for verbs whose purpose does not depend on the plan."""
    obj = main_object(action)
    rules = [
        (
            "use thermometer",
            f"I measure the temperature of the {clean(action.split(' on ', 1)[-1])} with the thermometer.",
        ),
        ("activate sink", "I turn on the sink to fill the container with water."),
        ("deactivate ", f"The {obj} has done its job, so I turn it off."),
        (
            "activate ",
            f"I turn on the {obj} to start heating." if obj in HEATERS else f"I turn on the {obj}.",
        ),
        ("read ", f"I read the {obj} to learn what the task needs."),
        ("pour ", f"I pour the {obj} into the {target_of(action)} to combine the ingredients."),
        ("mix ", f"The ingredients are together in the {obj}, so I mix them."),
        ("drop ", f"I put down the {obj} here, where I will use it."),
        ("put down ", f"I put down the {obj} here, where I will use it."),
        ("open ", f"I open the {obj} to see what is inside."),
        ("examine ", f"I examine the {obj} to check its state."),
        ("look at ", f"I look at the {obj} to check its state."),
        ("look in ", f"I look in the {obj} to see what it holds."),
    ]
    for prefix, thought in rules:
        if action.startswith(prefix):
            return thought
    return f"Next I {action}, which the task requires."
