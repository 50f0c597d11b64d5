"""ColBench backend programming (SWEET-RL, section 3.2): write a Python function with a user who knows its rules.

The agent sees a request (what the function does, its signature, some of its rules) and, each turn, either asks
the user one question or submits the function:

    Thought: I still need the free-shipping threshold.
    Action: ask Above what order total is shipping free?

    Thought: I know every rule now, so I write the function.
    Action: submit
    def shipping_fee(total, weight, express):
        ...

(the code may also come in a ``` block). The episode ends at the submit, whose code runs in the sandbox
(`gymflow.sandbox`, one call for all 10 hidden tests); reward is the fraction of tests passed, success all 10.
The agent has 10 rounds (`max_turns`, enforced by the rollout engine as for every environment). Actions keep
their lines (`EnvSpec.multiline_actions`).

Tasks come from `colbench_families`: procedurally generated functions of seven families whose reference, rules
and tests only `Task.hidden` holds (what SWEET-RL's critic sees). Difficulty is how many of a task's four rules
are hidden (2, 3 or 4); the rest are stated in the request.

The user is simulated. By default by rules: a question is matched to the rules by keywords and answered with
those rules in words (at most two); anything else gets a vague answer. `ColBench(human="http://host:8000/v1")`
asks an OpenAI-compatible chat model instead, given the request and the reference as the paper's simulator is
(two sentences, only from the reference); its answers lose every code-like line, and one left with too little
falls back to the rule-based answer, so the policy never reads code it did not write.

`colbench_single` is the paper's single-turn row: the same tasks under their own environment name (so an
instruction set and `evaluate` take it like any other environment, and with the same seed and sizes its eval
split holds exactly colbench's eval tasks), a system prompt asking for the function at once, and the first
action final. A registered variant needs no new switch in the rollout, evaluation or params code. Its expert
submits the reference at once: in `trajectories`, it teaches the format and each family's template; the values
of the hidden rules cannot be inferred from the request, which is what the row measures.

    gymflow solve colbench --n 50 --split eval     # the expert: asks about each hidden rule, then submits
"""

from __future__ import annotations

import keyword
import re
import textwrap
from collections.abc import Iterator
from typing import Any

from pydantic import Field, field_validator

from gymflow.envs.base import CODE_FENCE, Env, EnvSpec, Hidden, Step, Task, clean_action, echo
from gymflow.envs.colbench_families import (
    LEVELS,
    N_TESTS,
    answer,
    family_tasks,
    instruction,
    same,
    words_only,
)
from gymflow.sandbox import Limits, run_tests

MAX_ACTION_CHARS = 2_000  # about 7x the longest expert submit (300 characters)
ANSWER_CHARS = 400  # a chat-model user's answer is cut here (SWEET-RL's HUMAN_RESPONSE_CHARACTER_LIMIT)
NOTE_CHARS = 80  # how much of a run error an observation quotes
# A reference runs in microseconds; a case gets 0.2 s of wall time (margin for 2 busy cores), so a submission
# that loops costs at most 10 x 0.2 s, and one that hangs in C code the wall limit, twice (restarts=1).
LIMITS = Limits(cpu_seconds=2.0, wall_seconds=4.0, memory_mb=256, case_seconds=0.2)
RESTARTS = 1
USAGE = 'Write "ask <question>", or "submit" followed by the function\'s code.'

SYSTEM_PROMPT = (
    "You are a helpful agent writing a Python function together with a human user. The request leaves out "
    "rules that only the user knows (thresholds, rates, edge cases); the user answers one short question per "
    "turn, in words. Each turn, either ask one question (ask <question>) or give your final answer: submit, "
    "then the complete function on the next lines. The submission is final and is checked by 10 hidden unit "
    "tests. You have at most 10 turns. Answer in the format:\nThought: <your thought>\nAction: <your action>"
)
SINGLE_PROMPT = (
    "You are a helpful agent writing a Python function for a human user. There is no chance to ask "
    "questions: write the complete function at once, using your best guess for any rule the request leaves "
    "out. It is checked by 10 hidden unit tests. Answer in the format:\nThought: <your thought>\n"
    "Action: submit\n<the function>"
)

_VERB = re.compile(r"(ask|submit)\b[ \t]*:?", re.IGNORECASE)


def submitted_code(text: str) -> str:
    """The code of a submit: inside its first ``` block if it has one, else all of it, dedented."""
    fenced = CODE_FENCE.search(text)
    code = fenced.group(1) if fenced else text.lstrip(" \t")
    return textwrap.dedent(code.strip("\n")).strip("\n")


def grade(code: str, hidden: dict[str, Any], limits: Limits = LIMITS) -> tuple[int, str]:
    """Run `code` against the task's tests in the sandbox (one call); (tests passed, what to tell the agent).

    The note says what went wrong (an error's first line when the code did not load, else only the kind of
    error a case raised), never a test's input or expected value."""
    cases = [args for args, _ in hidden["tests"]]
    outcome = run_tests(code, hidden["function"], cases, limits, restarts=RESTARTS)
    if not outcome.ok or not isinstance(outcome.value, list):
        reason = echo(clean_action(str(outcome.error or "it did not run")), NOTE_CHARS).rstrip(".")
        return 0, f"Your code failed: {reason}. 0 of {N_TESTS} tests passed."
    passed, errors = 0, []
    for result, (_, expected) in zip(outcome.value, hidden["tests"], strict=False):
        if isinstance(result, dict) and "value" in result and same(result["value"], expected):
            passed += 1
        elif isinstance(result, dict) and "error" in result:
            errors.append(str(result["error"]).split(":")[0].strip()[:40] or "an error")
    if passed == N_TESTS:
        return passed, f"All {N_TESTS} tests passed."
    note = f"{passed} of {N_TESTS} tests passed."
    if errors:
        note += f" {len(errors)} raised an error (the first: {clean_action(errors[0])})."
    return passed, note


class Specific(Hidden):
    """One of a task's rules, as the rule-based user answers about it and the expert asks about it."""

    name: str
    hidden: bool
    answer: str
    keywords: list[str]
    question: str
    topic: str


class ColBenchHidden(Hidden):
    function: str
    reference: str
    specifics: list[Specific]
    tests: list[list[Any]] = Field(min_length=N_TESTS, max_length=N_TESTS)

    @field_validator("function")
    @classmethod
    def _a_name(cls, name: str) -> str:
        """The function the tests call: a Python name, or no submission could ever pass."""
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"{echo(name)!r} is not a Python function name")
        return name

    @field_validator("tests")
    @classmethod
    def _cases(cls, tests: list[list[Any]]) -> list[list[Any]]:
        """Each test is [arguments, expected], its arguments a list (the call is function(*arguments))."""
        for i, test in enumerate(tests):
            if len(test) != 2 or not isinstance(test[0], list):
                raise ValueError(f"tests[{i}] is not [arguments (a list), expected value]")
        return tests


class ColBench(Env):
    hidden_schema = ColBenchHidden
    waits_on_process = True  # a submit's tests run in the sandbox; a served human is a server
    spec = EnvSpec(
        name="colbench",
        description="ColBench backend programming: ask a simulated user for the rules, then write the function",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=10,
        expert="asks about each hidden rule, then submits the reference",
        multiline_actions=True,
        max_action_chars=MAX_ACTION_CHARS,
    )

    def __init__(
        self, human: str | None = None, human_model: str | None = None, limits: Limits = LIMITS
    ) -> None:
        """`human`: base URL of an OpenAI-compatible chat server to play the user (default: the rules);
        `human_model`: its model (default: the server's first); `limits`: the sandbox's (default: its own)."""
        super().__init__()
        self.human = ChatHuman(human, human_model) if human else None
        self.limits = limits

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        for task_id, level, task_seed, hidden in family_tasks(seed):
            yield Task(
                env=cls.spec.name,
                task_id=task_id,
                split=split,
                difficulty=level,
                seed=task_seed,
                instruction=instruction(hidden),
                hidden=hidden,
            )

    @classmethod
    def hidden_text(cls, task: Task) -> str:
        """The reference function, framed as SWEET-RL's critic reads it ("In light that the final answer
        is: ..."): the training-time information `c` of Eq. 3, never in a policy prompt."""
        return f"In light that the final answer is:\n{task.hidden['reference']}"

    def _reset(self, task: Task) -> str:
        self.specifics = task.hidden["specifics"]
        self.known = {s["name"] for s in self.specifics if not s["hidden"]}  # stated, or asked about since
        self.dialogue: list[tuple[str, str]] = []
        return task.instruction

    def _step(self, action: str) -> Step:
        verb = _VERB.match(action)
        rest = action[verb.end() :] if verb else ""
        if verb and verb.group(1).lower() == "ask" and rest.strip():
            return self._ask(" ".join(rest.split()))
        if verb and verb.group(1).lower() == "submit" and submitted_code(rest):
            passed, note = grade(submitted_code(rest), self.task.hidden, self.limits)
            return Step(note, passed / N_TESTS, True, {"passed": passed, "tests": N_TESTS})
        what = "a question after ask" if verb and verb.group(1).lower() == "ask" else None
        what = what or ("the function's code after submit" if verb else None)
        reply = (
            f"Missing {what}. {USAGE}" if what else f'Invalid action "{echo(clean_action(action))}". {USAGE}'
        )
        return Step(reply, 0.0, False)

    def _ask(self, question: str) -> Step:
        said, names = answer(question, self.specifics)
        if self.human is not None:
            said = self.human.reply(self.task, self.dialogue, question) or said
        self.known.update(names)
        self.dialogue.append((question, said))
        return Step(said, 0.0, False)

    def expert_step(self) -> tuple[str, str]:
        """Ask each hidden rule's question (one per turn), then submit the reference. Thoughts say only
        what the agent could know: which rule it has not heard yet."""
        for s in self.specifics:
            if s["name"] not in self.known:
                return f"I still need {s['topic']}.", f"ask {s['question']}"
        return "I know every rule now, so I write the function.", f"submit\n{self.task.hidden['reference']}"


class ColBenchSingle(ColBench):
    """The single-turn setting: the same tasks, no questions, the first action final."""

    spec = EnvSpec(
        name="colbench_single",
        description="ColBench backend programming, single turn: write the function at once, no questions",
        system_prompt=SINGLE_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=1,
        expert="submits the reference at once (it knows the hidden rules)",
        multiline_actions=True,
        max_action_chars=MAX_ACTION_CHARS,
    )

    def _step(self, action: str) -> Step:
        step = super()._step(action)
        if step.done:
            return step
        return Step(f"{step.observation} No second turn here: 0 of {N_TESTS} tests passed.", 0.0, True)

    def _ask(self, question: str) -> Step:
        return Step(f"No questions in this setting: 0 of {N_TESTS} tests passed.", 0.0, True)

    def expert_step(self) -> tuple[str, str]:
        return "I write the whole function at once.", f"submit\n{self.task.hidden['reference']}"


# ---- a chat model as the user ---------------------------------------------------------------------------
HUMAN_PROMPT = """You are role-playing a human user who asked an AI agent for help with a Python function.
Your request to the agent was:
{request}

You know exactly what the function must do, because you have its code; the agent does not:
{reference}

Answer the agent's last message briefly, in at most two sentences of plain words, using only what the code
says; if the code does not answer it, say you do not know. Never write, quote or describe code syntax.

The conversation so far:
{dialogue}
Your answer:"""


class ChatHuman:
    """The user played by a chat model on an OpenAI-compatible server (vLLM, or any /v1/chat/completions)."""

    def __init__(self, base_url: str, model: str | None = None, timeout: float = 60.0) -> None:
        from openai import OpenAI  # noqa: PLC0415 (only this option needs the client)

        self.client = OpenAI(base_url=base_url, api_key="EMPTY", timeout=timeout, max_retries=2)
        self.base_url, self.model = base_url, model

    def reply(self, task: Task, dialogue: list[tuple[str, str]], question: str) -> str | None:
        """The model's answer with its code-like lines removed; None if little is left (the caller then
        answers by the rules)."""
        if self.model is None:
            self.model = self.client.models.list().data[0].id
        turns = "".join(f"agent: {q}\nyou: {a}\n" for q, a in dialogue) + f"agent: {question}\n"
        prompt = HUMAN_PROMPT.format(
            request=task.instruction, reference=task.hidden["reference"], dialogue=turns
        )
        response = self.client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": prompt}],
            temperature=0.0,
            max_tokens=120,
        )
        text = clean_action(words_only(response.choices[0].message.content or ""))[:ANSWER_CHARS]
        return text if len(text.split()) >= 3 else None
