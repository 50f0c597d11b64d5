"""The environment protocol every gymflow environment speaks.

A `Task` is one row of the instruction table. An `Env` plays one task at a time:

    env = make_env("maze")
    obs = env.reset(task)               # first observation (the instruction is in it)
    step = env.step("move up")          # Step(observation, reward, done, info)
    thought, action = env.expert_step() # the expert solver's next move (privileged)
    env.close()

Invalid or malformed actions are part of the game: `step` answers any string with an observation that
says what was wrong and never raises. It cleans the action once before the game sees it (`clean_action`:
one line of printable text; `clean_lines` for an environment whose actions carry code, declared by
`EnvSpec.multiline_actions`) and answers an over-long one itself, and games quote a rejected action
through `echo`, so an observation stays bounded whatever the policy writes. Stepping a finished episode
is a programming error and raises `EpisodeOver`; so is an action that is not a `str` (`TypeError`).

A task that comes from outside (a row sent to `gymflow serve-env`) is checked before it is played:
`task_of_row` checks the row's columns and `Env.check_task` its `hidden` dict against the environment's
`hidden_schema`, so a malformed one is refused (`BadTask`) rather than failing halfway through an episode.
What only the built game can tell (a household walkthrough that is not the one its seed makes, a ScienceWorld
variation the simulator lacks) `reset` refuses with `BadTask` too, and a failed reset leaves no episode to step.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

MAX_ACTION_CHARS = 300  # about 3x the longest expert action (textcraft's 93); a longer one is not a command
ECHO_CHARS = 40  # how much of a rejected action an observation quotes back
HIDDEN_CHARS = 2_000  # a critic's hidden block (`Env.hidden_text`) at most: about 500 tokens
# A ```python (or ```py, or bare ```) block of an action that carries code; an unclosed one runs to the end.
CODE_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


class EpisodeOver(RuntimeError):
    """`step` was called after the episode ended (or before `reset`)."""


class NoExpert(RuntimeError):
    """The environment has no expert move in this state."""


class BadTask(ValueError):
    """A task row its environment cannot play: a column or a `hidden` field missing, of the wrong type, or
    out of range. Found when the row arrives (`check_task`), or at `reset` where only the game can tell, never
    halfway through an episode; `gymflow serve-env` answers it with a 400, as the client's mistake."""


class Hidden(BaseModel):
    """The schema of a task's `hidden` dict: the fields its environment reads, in JSON's types with no
    coercion (the environment reads the dict as given, so "5" must not pass for 5); other fields pass."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class TaskRow(BaseModel):
    """A row of the instruction table as it arrives from outside (`Task.to_row`'s shape)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    env: StrictStr
    task_id: StrictStr = Field(min_length=1)
    split: StrictStr
    difficulty: StrictStr | StrictInt
    seed: StrictInt = Field(ge=0, lt=2**32)  # every generator's range; minigrid and TextWorld need >= 0
    instruction: StrictStr
    hidden: StrictStr | dict[str, Any]

    @field_validator("hidden")
    @classmethod
    def _an_object(cls, hidden: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(hidden, str):
            try:
                parsed = json.loads(hidden)
            except ValueError:
                raise ValueError("not JSON") from None
            if not isinstance(parsed, dict):
                raise ValueError("not a JSON object")
        return hidden


def reason(error: ValidationError, prefix: str = "") -> str:
    """A pydantic error as one line: where (dotted) and what, e.g. "hidden.start: List should have at most 2
    items"."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "") or "the task"
    return f"{where}: {first['msg'].removeprefix('Value error, ')}"


def task_of_row(row: object) -> Task:
    """The task a row describes; `BadTask` with the first problem when its columns do not fit `TaskRow`."""
    try:
        TaskRow.model_validate(row)
    except ValidationError as e:
        raise BadTask(reason(e)) from None
    return Task.from_row(row)  # type: ignore[arg-type]  (a dict: TaskRow took it)


@dataclass(frozen=True)
class Task:
    """One instruction: what to do (`instruction`) and what only training may see (`hidden`)."""

    env: str
    task_id: str
    split: str
    difficulty: str
    seed: int
    instruction: str
    hidden: dict[str, Any] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["hidden"] = json.dumps(self.hidden, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        hidden = row["hidden"]
        return cls(
            env=row["env"],
            task_id=row["task_id"],
            split=row["split"],
            difficulty=str(row["difficulty"]),
            seed=int(row["seed"]),
            instruction=row["instruction"],
            hidden=json.loads(hidden) if isinstance(hidden, str) else dict(hidden),
        )


@dataclass(frozen=True)
class Step:
    """What one action did. `reward` is the episode's reward so far, in the declared range; the
    episode's reward is that of its last step (most games here pay only at the end)."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvSpec:
    """What an environment declares about itself."""

    name: str
    description: str
    system_prompt: str
    reward_range: tuple[float, float]
    success_threshold: float  # an episode succeeds when its final reward is at least this
    max_turns: int  # default turn limit (AgentGym / AgentGym-RL settings)
    expert: str  # what produces the expert trajectories, shown by `gymflow envs`
    multiline_actions: bool = False  # actions keep their lines (code): parsed and cleaned as `clean_lines`
    max_action_chars: int = MAX_ACTION_CHARS  # a longer action is answered by `Env.step`, unplayed
    variants: int = 0  # tasks per scenario, ids "<scenario>_<v>" (AppWorld: 3): evaluation adds SGC

    def is_success(self, reward: float) -> bool:
        return reward >= self.success_threshold


class Env(ABC):
    """Base class: subclasses implement the game; this class keeps the episode bookkeeping."""

    spec: ClassVar[EnvSpec]
    hidden_schema: ClassVar[type[Hidden]] = Hidden  # what `check_task` holds a task's hidden dict to
    # Its reset and step wait on another process (a sandbox, a server) and touch no state shared between
    # instances: the rollout engine then resets and steps a batch's episodes at once, so the waits overlap.
    waits_on_process: ClassVar[bool] = False

    def __init__(self) -> None:
        self.task: Task | None = None
        self.done = True
        self.turns = 0
        self.reward = 0.0

    # ---- task generation -------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        """Yield distinct candidate tasks for `split`, in a seeded random order.

        The stream may be endless; `gymflow.envs.instructions` draws from it, balanced over
        `difficulty`. Environments with an official split (ScienceWorld variations) honour `split`;
        the others ignore it and rely on the draw to keep splits disjoint by `task_id`.
        """

    @classmethod
    def hidden_text(cls, task: Task) -> str:
        """What a critic reads as the task's training-time information (SWEET-RL's `c`), never the policy:
        by default the hidden dict as sorted JSON, cut at `HIDDEN_CHARS`; "" when the task has none."""
        if not task.hidden:
            return ""
        text = json.dumps(task.hidden, sort_keys=True, ensure_ascii=False)
        return text if len(text) <= HIDDEN_CHARS else text[:HIDDEN_CHARS] + "..."

    @classmethod
    def difficulties(cls) -> list[str]:
        """The difficulty levels or categories, in order; instruction sets are balanced over them."""
        return []

    @classmethod
    def capacity(cls, split: str) -> dict[str, int]:
        """How many usable tasks each difficulty has in `split`, for sources that are finite and slow to
        generate; the draw then moves a short level's quota to the others instead of reading the stream
        to its end looking for more. Empty (the default) means no level runs short."""
        return {}

    @classmethod
    def noop_reward(cls, task: Task) -> float | None:
        """The reward of ending `task` at once without doing it, where the environment pays for that (apps:
        `complete_task()` passes the checks of what did not happen): the floor a policy finds when none of its
        rollouts succeeds, to read its reward against. None (the default): ending at once earns nothing."""
        return None

    @classmethod
    def check_task(cls, task: Task) -> None:
        """Raise `BadTask` unless `task` is this environment's and its hidden dict fits `hidden_schema`: a
        row from outside (a client of `gymflow serve-env`) must fail here, not at a submit turns later."""
        if task.env != cls.spec.name:
            raise BadTask(f"task {task.task_id} is for {task.env!r}, not {cls.spec.name!r}")
        try:
            cls.hidden_schema.model_validate(task.hidden)
        except ValidationError as e:
            raise BadTask(reason(e, "hidden")) from None

    # ---- episode ---------------------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        if task.env != self.spec.name:
            raise ValueError(f"task {task.task_id} is for env {task.env!r}, not {self.spec.name!r}")
        self.task = task
        self.done = False
        self.turns = 0
        self.reward = 0.0
        try:
            return self._reset(task)
        except BaseException:
            self.task, self.done = None, True  # no episode: a step raises EpisodeOver until a reset succeeds
            raise

    def step(self, action: str) -> Step:
        """Play one action. The game's `_step` sees it cleaned (`clean_action`, or `clean_lines` for
        multi-line actions) and at most `spec.max_action_chars` long: a longer action is answered here, as
        one turn that changes nothing."""
        if not isinstance(action, str):
            raise TypeError(f"{self.spec.name}: step() takes the action as str, not {type(action).__name__}")
        if self.done:
            raise EpisodeOver(
                f"{self.spec.name}: step() after the episode ended; call reset() to start a new one"
            )
        self.turns += 1
        text, limit, lines = action.strip(), self.spec.max_action_chars, self.spec.multiline_actions
        if len(text) > limit:
            hint = "Write a shorter reply." if lines else "Write one short action."
            step = Step(
                f"Action too long ({len(text)} characters, at most {limit}). {hint}", self.reward, False
            )
        else:
            step = self._step(clean_lines(text) if lines else clean_action(text))
        self.reward = step.reward
        self.done = step.done
        return step

    def available_actions(self) -> list[str] | None:
        """The actions valid now, where the environment can list them; None otherwise."""
        return None

    def expert_step(self) -> tuple[str, str]:
        """The expert's (thought, action) for the current state. Uses privileged state."""
        raise NoExpert(f"{self.spec.name} has no expert solver")

    demonstrators: ClassVar[tuple[str, ...]] = ("expert",)
    """Who can play AgentTraj (`trajectories.demonstrators`): "expert" and the imperfect ones a game offers."""

    def demonstrator_step(self, kind: str, rng: random.Random) -> tuple[str, str]:
        """The (thought, action) of demonstrator `kind` (one of `demonstrators`); its random choices come
        from `rng`, seeded per task, so a demonstration is the same on every run."""
        if kind == "expert":
            return self.expert_step()
        raise NoExpert(f"{self.spec.name} has no demonstrator {kind!r}; it has {list(self.demonstrators)}")

    def close(self) -> None:  # noqa: B027 (optional hook, not abstract)
        """Release external resources (processes, files)."""

    @abstractmethod
    def _reset(self, task: Task) -> str: ...

    @abstractmethod
    def _step(self, action: str) -> Step: ...


def turn_limit(spec: EnvSpec, horizon: int | None = None) -> int:
    """An episode's turn limit: `horizon` where one is set (ScalingInter-RL's phases, `serve-env --max-turns`),
    else the environment's own (AgentGym's settings)."""
    return horizon or spec.max_turns


def out_of_turns(env: Env, limit: int) -> bool:
    """Whether `env`'s episode, still running, has played its `limit` turns: its player ends it there (the
    rollout engine as `turn_limit`, `gymflow serve-env` with done and truncated), since `step` never does."""
    return not env.done and env.turns >= limit


def clean_action(text: str) -> str:
    """`text` as one line of printable text, stripped: control characters (NUL, newlines, the ESC that
    starts a terminal escape sequence) and other separators become spaces, invisible format characters
    (bidi overrides, zero-width spaces) go, and a lone surrogate, which no encoder accepts (the
    ScienceWorld and TextWorld bridges raised on one), becomes U+FFFD."""
    out = []
    for ch in text:
        kind = unicodedata.category(ch)
        if kind == "Cc" or kind[0] == "Z":
            out.append(" ")
        elif kind == "Cs":
            out.append("\ufffd")
        elif kind != "Cf":
            out.append(ch)
    return "".join(out).strip()


def clean_lines(text: str) -> str:
    """`text` cleaned as `clean_action` cleans it, but keeping its lines and tabs (code): any line break
    (CR LF, CR, U+2028) becomes a newline; other control characters and separators become spaces."""
    out = []
    for ch in text.replace("\r\n", "\n"):
        kind = unicodedata.category(ch)
        if ch in "\n\t":
            out.append(ch)
        elif ch == "\r" or kind in ("Zl", "Zp"):
            out.append("\n")
        elif kind == "Cc" or kind[0] == "Z":
            out.append(" ")
        elif kind == "Cs":
            out.append("\ufffd")
        elif kind != "Cf":
            out.append(ch)
    return "".join(out).strip()


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` as an observation quotes it back: its first `limit` characters, "..." marking a cut."""
    return text if len(text) <= limit else text[:limit] + "..."


def task_rng(*parts: object) -> random.Random:
    """A random generator seeded by a stable hash of `parts` (Python's hash() is salted per process)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))
