"""The `apps` environment through its real interpreter (gymflow/envs/apps/env.py): the expert's gold programs
solve every template, a no-op and collateral damage do not, the interpreter lives exactly as long as the
episode, and code reaches the world only through the APIs."""

from __future__ import annotations

import itertools
import os

import pytest

from gymflow.envs.apps.env import Apps, api_calls, code_cells, doc_lookups, fence
from gymflow.envs.apps.scenarios import scenario_tasks
from gymflow.envs.apps.world import build_world
from gymflow.envs.base import Task
from gymflow.rollout.expert import run_expert
from tests.test_sandbox import REPO


def tasks(split: str = "eval", n: int = 300) -> list[Task]:
    return list(itertools.islice(Apps.generate(split, 0), n))


def one_per_template(split: str = "eval") -> list[Task]:
    first: dict[str, Task] = {}
    for task in tasks(split):
        first.setdefault(task.hidden["template"], task)
    return list(first.values())


@pytest.fixture
def env():
    env = Apps()
    yield env
    env.close()


def cell(code: str) -> str:
    return f"Thought: I run some code.\nAction: {fence(code)}"


def test_code_cells_and_api_parsing_by_hand() -> None:
    reply = "```python\nx = 1\n```\nthen\n```py\nprint(x)\n```"
    assert code_cells(reply) == ["x = 1", "print(x)"]
    assert code_cells("print(2)") == ["print(2)"]  # no fence: the whole reply is the cell
    assert code_cells("```python\nprint(3)") == ["print(3)"]  # an unclosed fence runs to the end
    assert code_cells("  ") == []
    code = "t = apis.phone.login(username=u)\napis.venmo.show_feed(access_token=t)\napis.phone.login()"
    assert api_calls(code) == [("phone", "login"), ("venmo", "show_feed")]
    assert doc_lookups("apis.api_docs.show_api_doc(app_name='phone', api_name=\"login\")") == {
        ("phone", "login")
    }
    assert doc_lookups("apis.api_docs.show_api_doc('venmo', 'like_transaction')") == {
        ("venmo", "like_transaction")
    }


@pytest.mark.slow  # 12 sandboxed episodes a split (the conformance test plays the expert in the fast tier)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_the_expert_solves_one_task_of_every_template(env: Apps, split: str) -> None:
    chosen = one_per_template(split)
    assert {t.difficulty for t in chosen} == {"1", "2", "3"}
    for task in chosen:
        episode = run_expert(env, task)
        assert episode.reward == 1.0 and episode.success, (task.task_id, episode.messages[-1].text)
        replies = [m.action for m in episode.messages if m.role == "assistant"]
        gold = task.hidden["gold"]
        lookups = [r for r in replies if "show_api_doc(" in r]
        assert len(replies) == len(gold) + len(lookups)  # every gold cell, plus one look-up per app API
        for app, api in {
            p for c in gold for p in api_calls(c["code"]) if p[0] not in ("api_docs", "supervisor")
        }:
            first_call = next(i for i, r in enumerate(replies) if f"apis.{app}.{api}(" in r)
            doc = next(i for i, r in enumerate(replies) if (app, api) in doc_lookups(r))
            assert doc < first_call  # documentation first, then the call
        assert env.session is None  # the episode ended: its interpreter is gone


def test_a_no_op_fails_every_task(env: Apps) -> None:
    """... but earns some reward, and `Apps.noop_reward` (no sandbox; beside every apps evaluation) is it."""
    for task in one_per_template():
        env.reset(task)
        step = env.step(cell("apis.supervisor.complete_task()"))
        assert step.done and step.reward < 1.0 and step.info["passed"] < step.info["tests"]
        assert Apps.noop_reward(task) == step.reward > 0


def test_the_interpreter_persists_across_turns_and_dies_with_the_episode(env: Apps) -> None:
    first, second = tasks()[:2]
    env.reset(first)
    assert env.step(cell("x = 41")).observation == "(no output)"
    assert env.step(cell("x += 1\nprint(x)")).observation == "42"
    pid = env.session.child.proc.pid
    env.reset(second)  # a new episode: the old interpreter is killed, not reused
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    step = env.step(cell("print(x)"))
    assert step.observation.startswith("Execution failed.") and "NameError" in step.observation


def test_several_cells_in_one_reply_all_run(env: Apps) -> None:
    env.reset(tasks()[0])
    reply = "Thought: two at once.\nAction: ```python\na = 2\n```\n```python\nprint(a * 3)\n```"
    assert env.step(reply).observation == "6"


def test_code_reaches_the_world_only_through_the_apis(env: Apps) -> None:
    task = tasks()[0]
    env.reset(task)
    secret = task.hidden["gold"][-1]["code"]  # the gold program is in the parent, never in the child
    attempts = [
        f"print(open({str(REPO / 'gymflow/envs/apps/world.py')!r}).read()[:40])",
        "import gymflow.envs.apps.checks",
        "import gc\nprint(sum(1 for o in gc.get_objects() if isinstance(o, str) and 'complete_task' in o "
        f"and o != {secret!r}))",
        "import os\nprint(sorted(os.listdir('/')))",
        "import socket\nsocket.create_connection(('127.0.0.1', 80))",
        "apis.__dict__['_link'].call = None",  # breaks only its own door
    ]
    seen = [env.step(cell(code)).observation for code in attempts]
    assert "Execution failed." in seen[0] and "Execution failed." in seen[1]
    assert "ModuleNotFoundError" in seen[1]
    assert "Execution failed." in seen[4]
    assert "gymflow" not in seen[3] and "work" not in seen[3]  # the project's directories do not exist there
    assert env.world.state == build_world(task.hidden["world_seed"])  # nothing changed without an API
    assert not env.world.completed


def test_an_api_error_is_an_observation_and_changes_nothing(env: Apps) -> None:
    task = tasks()[0]
    env.reset(task)
    step = env.step(cell("apis.venmo.show_account(access_token='forged')"))
    assert step.observation.startswith("Execution failed. Traceback:") and "401" in step.observation
    step = env.step(cell("apis.nowhere.nothing()"))
    assert step.observation.startswith("Execution failed.") and not step.done
    assert env.world.state == build_world(task.hidden["world_seed"])


def test_generation_is_deterministic_and_variants_share_a_scenario() -> None:
    a, b = tasks("train", 30), tasks("train", 30)
    assert [t.to_row() for t in a] == [t.to_row() for t in b]
    for first, second, third in zip(a[::3], a[1::3], a[2::3], strict=False):
        scenario = first.task_id.rsplit("_", 1)[0]
        assert [t.task_id for t in (first, second, third)] == [f"{scenario}_{v}" for v in (1, 2, 3)]
        assert len({t.hidden["world_seed"] for t in (first, second, third)}) == 3
    eval_scenarios = {t.task_id.rsplit("_", 1)[0] for t in tasks("eval")}
    train_scenarios = {t.task_id.rsplit("_", 1)[0] for t in tasks("train")}
    assert not eval_scenarios & train_scenarios
    assert list(itertools.islice(scenario_tasks("eval", 0), 3))[0][0] == tasks("eval", 1)[0].task_id


def test_a_forged_done_frame_and_a_timer_neither_answer_for_the_cell_nor_act_later(env: Apps) -> None:
    """Issue 37's attack: the cell writes the harness's "done" frame itself and arms a timer whose handler
    completes the task in the next turn."""
    env.reset(tasks()[0])
    forger = (
        "import json, os, signal, sys\ndef later(*args):\n    apis.supervisor.complete_task()\n"
        "signal.signal(signal.SIGPROF, later)\nsignal.setitimer(signal.ITIMER_PROF, 0.05)\n"
        "d = json.dumps({'done': {'output': 'All done.', 'error': None}}).encode()\n"
        "os.write(int(sys.argv[2]), len(d).to_bytes(4, 'big') + d)"
    )
    first = env.step(cell(forger))
    assert "All done." not in first.observation
    second = env.step(
        cell("import time\nt = time.process_time()\nwhile time.process_time() < t + 0.3:\n    pass")
    )
    assert not second.done and not env.world.completed
