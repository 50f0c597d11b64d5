"""`apps`: an AppWorld-style world (LOOP, section 4.1 and 5.1) where the agent writes Python against app APIs.

Each turn the agent writes a code cell:

    Thought: I look up how to log in to the phone app.
    Action: ```python
    print(apis.api_docs.show_api_doc(app_name='phone', api_name='login'))
    ```

The cell runs in the episode's interpreter (`gymflow.sandbox.session`: one sandboxed process per episode, so
variables persist across turns and die with the episode), with `apis` in scope; every `apis.<app>.<api>(...)`
crosses to the world (`World.call`) as plain data. The observation is what the cell printed, or "Execution
failed. Traceback: ..." with its error, cut at `OBSERVATION_CHARS`. Several fenced cells in one reply all run,
in order, as one (LOOP's open-loop control, which `gymflow.eval.behaviour` counts); a reply without a fence runs
as it stands. The episode ends when the agent calls `apis.supervisor.complete_task(...)`: the reward is the
fraction of the task's unit tests that pass on the final state and answer (`checks.run_checks`, collateral
damage included), success all of them. An episode that never completes scores 0, as in LOOP.

The expert runs the task's gold program cell by cell in the ReAct shape: before the first call of an app API it
has not looked up in this episode, a turn that prints that API's documentation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from pydantic import Field

from gymflow.envs.apps.api import ApiError, World
from gymflow.envs.apps.checks import Check, run_checks
from gymflow.envs.apps.scenarios import LEVELS, scenario_tasks
from gymflow.envs.apps.world import build_world
from gymflow.envs.base import CODE_FENCE, Env, EnvSpec, Hidden, Step, Task
from gymflow.sandbox import Limits
from gymflow.sandbox.session import CallRefused, Session

MAX_ACTION_CHARS = 2_000  # a reply's code; the longest gold cell is about 300 characters
OBSERVATION_CHARS = (
    1_500  # what a cell printed, cut here with a note (LOOP truncates API responses at 3K tokens)
)
# One interpreter per episode: each cell gets 2 s (API calls take microseconds), the episode 30 s of CPU.
LIMITS = Limits(cpu_seconds=30.0, wall_seconds=5.0, memory_mb=256, file_mb=1, case_seconds=2.0, output_kb=16)
NO_DOCS = ("api_docs", "supervisor")  # apps the expert uses without looking up (the system prompt names them)

SYSTEM_PROMPT = (
    "You are an agent that does tasks for a user on their apps (phone, venmo, simple_note, file_system) by "
    "writing Python. Each turn, write one code cell; it runs in a persistent interpreter where `apis` is "
    "defined, and you see what it printed. apis.api_docs.show_api_descriptions(app_name=...) lists an app's "
    "APIs and apis.api_docs.show_api_doc(app_name=..., api_name=...) documents one. Passwords are in "
    "apis.supervisor.show_account_passwords(). When the task is done, call apis.supervisor.complete_task(), "
    "with answer=... if the task asks a question. Answer in the format:\nThought: <your thought>\n"
    "Action: ```python\n<code>\n```"
)

_API = re.compile(r"\bapis\s*\.\s*(\w+)\s*\.\s*(\w+)\s*\(")
_DOC = re.compile(
    r"show_api_doc\(\s*(?:app_name\s*=\s*)?['\"](\w+)['\"]\s*,\s*(?:api_name\s*=\s*)?['\"](\w+)['\"]"
)


def code_cells(action: str) -> list[str]:
    """The code cells of a reply: its ```python (or ```py, or bare ```) blocks; the whole reply if it has none."""
    cells = [cell.strip("\n") for cell in CODE_FENCE.findall(action)]
    return [cell for cell in cells if cell.strip()] if cells else ([action] if action.strip() else [])


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def api_calls(code: str) -> list[tuple[str, str]]:
    """The (app, api) pairs `code` calls, in order of first appearance."""
    return list(dict.fromkeys(_API.findall(code)))


def doc_lookups(code: str) -> set[tuple[str, str]]:
    """The (app, api) pairs whose documentation `code` prints with show_api_doc."""
    return set(_DOC.findall(code))


class GoldCell(Hidden):
    thought: str
    code: str


class AppsHidden(Hidden):
    """A world seed, the gold program the expert plays, and the checks the reward is the passing fraction of
    (so at least one: none would divide by zero when the task completes)."""

    world_seed: int = Field(ge=0)
    gold: list[GoldCell] = Field(min_length=1)
    checks: list[Check] = Field(min_length=1)


class Apps(Env):
    hidden_schema = AppsHidden
    waits_on_process = True  # every cell runs in the episode's sandboxed interpreter
    spec = EnvSpec(
        name="apps",
        description="AppWorld-style apps: write Python against phone, venmo, note and file APIs to do a task",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=50,  # LOOP evaluates with 50 interactions (and trains with 40)
        expert="runs the gold program, looking up each API's documentation before its first call",
        multiline_actions=True,
        max_action_chars=MAX_ACTION_CHARS,
        variants=3,
    )

    def __init__(self, limits: Limits = LIMITS) -> None:
        super().__init__()
        self.limits = limits
        self.session: Session | None = None

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        for task_id, level, task_seed, instruction, hidden in scenario_tasks(split, seed):
            yield Task(
                env=cls.spec.name,
                task_id=task_id,
                split=split,
                difficulty=level,
                seed=task_seed,
                instruction=instruction,
                hidden=hidden,
            )

    @classmethod
    def hidden_text(cls, task: Task) -> str:
        """The gold program: what a critic reads as the task's training-time information."""
        gold = "\n".join(cell["code"] for cell in task.hidden["gold"])
        return super().hidden_text(dataclasses.replace(task, hidden={"gold": gold}))

    @classmethod
    def noop_reward(cls, task: Task) -> float:
        """The fraction of the checks that `apis.supervisor.complete_task()` as the first action passes (those
        of what did not happen), run on the world directly: the same calls and checks as an episode, no sandbox."""
        initial = build_world(task.hidden["world_seed"])
        world = World(initial)
        world.call("supervisor", "complete_task", [], {})
        results = run_checks(task.hidden, initial, world.state, world.answer, world.completed)
        return sum(ok for _, ok in results) / len(results)

    def _reset(self, task: Task) -> str:
        self.close()
        self.initial = build_world(task.hidden["world_seed"])
        self.world = World(self.initial)
        self.session = Session(self._call, self.limits)
        self.next_gold = 0  # the expert's place in the gold program
        self.documented: set[tuple[str, str]] = set()
        return task.instruction

    def _call(self, app: str, api: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The world's one door: a refused call becomes the Exception the cell sees."""
        if self.world.completed:
            raise CallRefused("the task is already complete")
        try:
            return self.world.call(app, api, args, kwargs)
        except ApiError as e:
            raise CallRefused(str(e)) from None

    def _step(self, action: str) -> Step:
        cells = code_cells(action)
        if not cells:
            return Step("No code found. Write a Python code cell in a ```python block.", 0.0, False)
        code = "\n".join(cells)
        assert self.session is not None
        ran = self.session.run(code)
        self.documented |= doc_lookups(code)
        gold = self.task.hidden["gold"]
        if self.next_gold < len(gold) and code == gold[self.next_gold]["code"] and ran.error is None:
            self.next_gold += 1
        observation = _observation(ran.output, ran.error)
        if not self.world.completed:
            return Step(observation, 0.0, False, {"calls": ran.calls})
        results = run_checks(self.task.hidden, self.initial, self.world.state, self.world.answer, True)
        passed = sum(ok for _, ok in results)
        self.close()
        return Step(
            f"{observation}\nTask completed: {passed} of {len(results)} checks passed.",
            passed / len(results),
            True,
            {"passed": passed, "tests": len(results), "calls": ran.calls},
        )

    def expert_step(self) -> tuple[str, str]:
        """The next gold cell, after a documentation turn for each app API it calls first."""
        cell = self.task.hidden["gold"][min(self.next_gold, len(self.task.hidden["gold"]) - 1)]
        for app, api in api_calls(cell["code"]):
            if app not in NO_DOCS and (app, api) not in self.documented:
                lookup = f"print(apis.api_docs.show_api_doc(app_name='{app}', api_name='{api}'))"
                return f"I look up how to call {app}.{api}.", fence(lookup)
        return cell["thought"], fence(cell["code"])

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _observation(output: str, error: str | None) -> str:
    text = "\n".join(part for part in (output.rstrip("\n"), error) if part) or "(no output)"
    if len(text) > OBSERVATION_CHARS:
        text = f"{text[:OBSERVATION_CHARS]}\n[{len(text) - OBSERVATION_CHARS} more characters not shown]"
    return text


__all__ = ["Apps", "api_calls", "code_cells", "doc_lookups", "fence"]
