"""What AgentGym's tool environments (Weather, Movie, Academia, TODOList, Sheet, from AgentBoard) share: tools
called as `name with Action Input: {JSON}`, their documentation in the system prompt, errors as observations,
and AgentBoard's progress rate.

An environment lists its tools (`Tool`: name, parameters, what it returns, and the method that runs it) and its
task templates: a template draws a question, its answer and the expert's plan from a seed (`Made`). A task's
`hidden` holds the template's name and seed, and what they made: the answer and the subgoals, the values a
solver meets on the way (a city's
coordinates, a day's temperature, the answer last). Each tool call's result is a subgoal the episode reached;
the reward is the fraction of the task's subgoals reached so far, AgentBoard's progress rate, counting a right
`finish` as one more subgoal, so that 1.0 (success) is reached only there. A tool that does not exist, input that is not a JSON object, missing
or unknown arguments, arguments of the wrong type and a tool's own refusal (`ToolError`) are observations that
say what was wrong; the episode goes on. A reset makes the task again from its template and seed and refuses a
row whose instruction, answer or subgoals differ (a client's row can then never be unsolvable).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any, ClassVar

from pydantic import Field, field_validator

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, Step, Task, echo, task_rng

ACTION = re.compile(r"(\w+)\s+with\s+Action\s+Input:\s*(.*)", re.IGNORECASE | re.DOTALL)
TYPES: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "string": (str,),
    "integer": (int,),
    "array": (list,),
}
ACTION_CHARS = 1_000  # a whole reply, thought included, as AgentGym's tool clients send it
MAX_NUMBER = 1e12  # what a tool's number may be at most (no world needs more)
ANSWER_TOLERANCE = 0.01  # relative, for numbers; at least 0.05 absolute (one decimal as tools round)


class ToolError(Exception):
    """A tool's documented refusal (no such city, a date out of range): its message is the observation."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: tuple[tuple[str, str, str], ...]  # (name, type in TYPES, description)
    returns: str

    def doc(self) -> str:
        lines = [
            f"Name: {self.name}({', '.join(p for p, _, _ in self.params)})",
            f"Description: {self.description}",
        ]
        if self.params:
            lines += ["Parameters:", *(f"- {p} (Type: {t}): {d}" for p, t, d in self.params)]
        return "\n".join([*lines, f"Returns:\n{self.returns}"])


Plan = list[tuple[str, str, dict[str, Any]]]  # the expert's calls: (thought, tool, arguments)


@dataclass(frozen=True)
class Made:
    """What a task template makes of its seed: the task's level, question, answer and subgoals (which the task
    keeps), the expert's plan, and for a task that asks for a change the state it must leave (`expected`) and the
    world the tools change (`world`: todo's account, sheet's workbook)."""

    level: str
    question: str
    answer: Any
    subgoals: list[Any]
    plan: Plan
    expected: Any = None
    world: Any = None


class TemplateHidden(Hidden):
    """A tool task's hidden dict: its template (one of `templates`), the seed of the template's draws, and what
    they made. An environment subclasses it to name its templates and add what its world needs."""

    templates: ClassVar[Collection[str]] = ()
    template: str
    choices: int = Field(ge=0)
    answer: Any = None
    subgoals: list[Any] = Field(min_length=1, max_length=40)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value not in cls.templates:
            raise ValueError(f"not one of {sorted(cls.templates)}")
        return value


def day_within(value: str, first: date, last: date) -> str:
    """`value` if it is a date YYYY-MM-DD from `first` to `last` (a hidden dict's "current_date")."""
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise ValueError("not a date YYYY-MM-DD") from None
    if not first <= day <= last:
        raise ValueError(f"outside {first} to {last}")
    return value


FINISH = Tool(
    "finish", "Return an answer and finish the task", (("answer", "any", "the answer"),), "The end."
)


def system_prompt(intro: str, tools: list[Tool], example: str) -> str:
    """AgentGym's tool prompt: what the agent is, every tool's documentation, the action format, an example."""
    docs = "\n\n".join(t.doc() for t in [*tools, FINISH])
    return (
        f"{intro} We detail name, description, input (parameters) and output (returns) of each action as "
        f"follows:\n{docs}\n\nAnswer in the format:\nThought: <your thought>\nAction: <action name> with "
        f"Action Input: <a JSON object of its parameters>\n\nFor example:\n{example}"
    )


def tool_spec(
    name: str,
    description: str,
    tools: list[Tool],
    example: str,
    max_turns: int,
    expert: str = "the template's plan",
) -> EnvSpec:
    """The spec of an AgentGym tool environment: its prompt as `system_prompt` writes it, rewards from 0 to 1 with
    success at 1 (a right finish), replies of at most ACTION_CHARS."""
    return EnvSpec(
        name=name,
        description=description,
        system_prompt=system_prompt(
            "You are an autonomous intelligent agent. You can use actions to help people solve problems.",
            tools,
            example,
        ),
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_action_chars=ACTION_CHARS,
        max_turns=max_turns,
        expert=expert,
    )


def same_answer(given: Any, expected: Any) -> bool:
    """A finish answer against the task's: numbers within ANSWER_TOLERANCE, strings without case or the spaces
    around them, lists as sets of those."""
    if isinstance(expected, list):
        if not isinstance(given, list) or len(given) != len(expected):
            return False
        rest = list(given)
        for e in expected:
            hit = next((g for g in rest if same_answer(g, e)), None)
            if hit is None:
                return False
            rest.remove(hit)
        return True
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        number = _number(given)
        return number is not None and math.isclose(number, expected, rel_tol=ANSWER_TOLERANCE, abs_tol=0.05)
    return (
        isinstance(given, str | int | float) and str(given).strip().lower() == str(expected).strip().lower()
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


class ToolEnv(Env):
    """An environment of tools and task templates. Subclasses give `hidden_schema` (a `TemplateHidden` naming
    the templates), `make` (a hidden dict's template run on its seed), `tools()` (name -> (Tool, the callable
    that runs it on keyword arguments)) and, where the tools read more than the made world, `begin`."""

    hidden_schema: ClassVar[type[TemplateHidden]]
    ids_from_question: ClassVar[bool] = False
    """True where two seeds can make the same question (a small world): a task's id comes from its question,
    so a split holds each question once."""

    @classmethod
    def difficulties(cls) -> list[str]:
        return ["easy", "medium", "hard"]  # each template's own grading of its question

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made | None:
        """What `hidden`'s template makes of its seed; None where the seed draws nothing usable (the task
        stream moves on)."""
        raise NotImplementedError

    @classmethod
    def draw(cls, rng: Any) -> dict[str, Any]:
        """A new task's hidden choices: a template and the seed of its draws (and whatever the world needs)."""
        return {"template": rng.choice(sorted(cls.hidden_schema.templates)), "choices": rng.randrange(2**31)}

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        name, rng = cls.spec.name, task_rng(f"{cls.spec.name}-tasks", seed)
        while True:
            hidden = cls.draw(rng)
            made = cls.make(hidden)
            if made is None:
                continue
            key = task_rng(made.question).randrange(10**9) if cls.ids_from_question else hidden["choices"]
            yield Task(
                env=name,
                task_id=f"{name}-{hidden['template']}-{key}",
                split=split,
                difficulty=made.level,
                seed=hidden["choices"],
                instruction=made.question,
                hidden={**hidden, "answer": made.answer, "subgoals": made.subgoals},
            )

    def _reset(self, task: Task) -> str:
        self.reached: list[Any] = []  # every tool result so far, and the answer last
        self.called: set[str] = set()  # every call made, as `name with Action Input: {...}`
        made = self.make(task.hidden)
        kept = (task.instruction, task.hidden["answer"], task.hidden["subgoals"])
        if made is None or (made.question, made.answer, made.subgoals) != kept:
            raise BadTask(
                "the instruction, answer and subgoals are not what the template makes of these choices"
            )
        self.plan, self.expected, self.world = made.plan, made.expected, made.world
        self.begin(task)
        return f"{task.instruction}\nNew trial starts. Once you have finished the goal, take the 'finish' action."

    def begin(self, task: Task) -> None:  # noqa: B027 (optional hook, not abstract)
        """Set up what the tools read beyond the made world (today's date, which sheet is open)."""

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        raise NotImplementedError

    def expert_step(self) -> tuple[str, str]:
        """The first call of `plan` not made yet, then `finish_step`."""
        for thought, tool, args in self.plan:
            action = f"{tool} with Action Input: {json.dumps(args)}"
            if " ".join(action.split()) not in self.called:
                return thought, action
        return self.finish_step()

    def finish_step(self) -> tuple[str, str]:
        """The expert's last move: `finish` with the task's answer."""
        answer = json.dumps({"answer": self.task.hidden["answer"]})
        return "That answers the question.", f"finish with Action Input: {answer}"

    def finished_right(self, answer: Any) -> bool:
        """Whether `finish` with `answer` succeeds: the task's answer by default (a change checks the state)."""
        return same_answer(answer, self.task.hidden["answer"])

    def progress(self) -> float:
        """AgentBoard's progress rate, with a right finish as the last subgoal: the share of the task's
        subgoals met by a value of some result so far (a number, a string, or one inside a result's lists and
        objects), over one more than their number. So only a right finish reaches 1, the success threshold, as
        a change with collateral damage or a wrong answer after every value was seen must not."""
        goals = self.task.hidden["subgoals"] if self.task else []
        values = [v for result in self.reached for v in _leaves(result)]
        met = sum(any(same_answer(v, goal) for v in values) for goal in goals)
        return met / (len(goals) + 1)

    def _step(self, action: str) -> Step:
        # AgentGym's tool clients send the model's whole reply ("Thought: ... Action: x with Action Input: {}"):
        # the call is what follows its last "Action:"
        call = re.split(r"\bAction:\s*", action, flags=re.IGNORECASE)[-1]
        self.called.add(" ".join(call.split()))
        match = ACTION.fullmatch(call)
        if match is None:
            return self._told(
                f'Invalid action "{echo(action)}". Write: <action name> with Action Input: {{...}}'
            )
        name, raw = match.group(1), match.group(2).strip()
        try:
            args = json.loads(raw or "{}")
        except ValueError:
            return self._told(
                f'Action Input "{echo(raw)}" is not JSON; give a JSON object such as {{"name": "x"}}'
            )
        if not isinstance(args, dict):
            return self._told("Action Input must be a JSON object of the parameters, e.g. {}")
        if name == "finish":  # {"answer": ...}, or {} where a change is the answer (AgentBoard's sheet)
            if args and set(args) != {"answer"}:
                return self._told('finish takes one parameter: {"answer": ...}')
            answer = args.get("answer")
            right = self.finished_right(answer)
            self.reached.append(answer)
            reward = 1.0 if right else self.progress()
            return Step(f"Finished with answer {echo(json.dumps(answer), 80)}.", reward, True)
        tools = self.tools()
        if name not in tools:
            return self._told(f'No action "{echo(name)}". Actions: {", ".join([*tools, "finish"])}.')
        tool, run = tools[name]
        problem = _argument_problem(tool, args)
        if problem:
            return self._told(problem)
        try:
            result = run(**args)
        except ToolError as e:
            return self._told(f"Error: {e}")
        self.reached.append(result)
        return Step(result if isinstance(result, str) else json.dumps(result), self.progress(), False)

    def _told(self, text: str) -> Step:
        return Step(text, self.progress(), False)


def _argument_problem(tool: Tool, args: dict[str, Any]) -> str | None:
    """Why `args` do not fit `tool`'s parameters, or None."""
    names = [p for p, _, _ in tool.params]
    missing, unknown = [n for n in names if n not in args], [a for a in args if a not in names]
    if missing or unknown:
        return f"{tool.name} takes ({', '.join(names)}): " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unknown {', '.join(map(echo, unknown))}"] if unknown else [])
        )
    for name, kind, _ in tool.params:
        value = args[name]
        if kind in TYPES and (isinstance(value, bool) or not isinstance(value, TYPES[kind])):
            return f"{tool.name}: {name} must be a {kind}, not {echo(json.dumps(value), 30)}"
        if kind in ("number", "integer") and not _finite(value):
            return f"{tool.name}: {name} must be a finite number of at most {MAX_NUMBER:g} in size"
    return None


def _finite(value: float) -> bool:
    """NaN, infinities and numbers too large for a float (JSON allows 1e400 and 10**400) are refused."""
    try:
        return math.isfinite(value) and abs(value) <= MAX_NUMBER
    except OverflowError:
        return False


def _leaves(value: Any) -> Iterator[Any]:
    """The plain values inside a tool's result."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value
