"""The todo environment (gymflow/envs/todo.py): questions answered through the tools, changes checked on the
account they leave (nothing else may change), and tool refusals as observations."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.todo import TEMPLATES, Todo

TASKS = list(itertools.islice(Todo.generate("eval", 5), 120))


def _task(template: str):
    return next(t for t in TASKS if t.hidden["template"] == template)


def do(env, tool: str, **args) -> str:
    return env.step(f"{tool} with Action Input: {json.dumps(args)}").observation


def finish(env, answer="done"):
    return env.step(f"finish with Action Input: {json.dumps({'answer': answer})}")


def planned(env) -> None:
    """Every step of the expert's plan but the last."""
    for _, tool, args in env.plan[:-1]:
        do(env, tool, **args)


def test_every_template_and_level_is_drawn_and_the_expert_solves_60_through_the_tools():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    env, solved = make_env("todo"), 0
    for task in TASKS[:60]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 60


def test_a_change_succeeds_only_with_the_account_exactly_as_asked():
    env = make_env("todo")
    task = _task("complete")
    env.reset(task)
    assert not Todo.spec.is_success(finish(env).reward)  # nothing done yet
    env.reset(task)
    planned(env)
    target = env.plan[-1][2]["task_id"]
    other = next(t["id"] for t in env.state["tasks"] if not t["is_completed"] and t["id"] != target)
    do(env, "complete_task", task_id=target)
    do(env, "complete_task", task_id=other)  # collateral damage
    step = finish(env)
    assert step.done and step.reward < 1.0 and not Todo.spec.is_success(step.reward)
    env.reset(task)
    planned(env)
    do(env, "complete_task", task_id=target)
    assert finish(env).reward == 1.0


def test_deleting_overdue_tasks_spares_the_others():
    env = make_env("todo")
    task = _task("delete_overdue")
    env.reset(task)
    planned(env)
    overdue = [args["task_id"] for _, tool, args in env.plan if tool == "delete_task"]
    pid = next(args["project_id"] for _, tool, args in env.plan if tool == "get_tasks")
    keep = [t["id"] for t in env.state["tasks"] if t["project_id"] == pid and t["id"] not in overdue]
    for task_id in overdue:
        do(env, "delete_task", task_id=task_id)
    if keep:
        do(env, "delete_task", task_id=keep[0])
        assert not Todo.spec.is_success(finish(env).reward)
    env.reset(task)
    for _, tool, args in env.plan:
        do(env, tool, **args)
    assert finish(env).reward == 1.0


def test_a_question_is_right_only_with_its_answer():
    env = make_env("todo")
    task = _task("due")
    env.reset(task)
    planned(env)
    do(env, *env.plan[-1][1:2], **env.plan[-1][2])
    assert not Todo.spec.is_success(finish(env, "1999-01-01").reward)
    env.reset(task)
    assert finish(env, task.hidden["answer"]).reward == 1.0


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("get_tasks", {"project_id": "nope"}, "no project with id"),
        ("complete_task", {"task_id": "123"}, "no task with id"),
        ("get_task_duration", {"task_id": 123}, "task_id must be a string"),
        ("update_project", {"project_id": "x", "is_favorite": "maybe"}, "'true' or 'false'"),
    ],
)
def test_a_refused_call_is_an_observation_and_changes_nothing(tool, args, says):
    env = make_env("todo")
    env.reset(TASKS[0])
    before = json.dumps(env.state, sort_keys=True)
    step = env.step(f"{tool} with Action Input: {json.dumps(args)}")
    assert says in step.observation and not step.done
    assert json.dumps(env.state, sort_keys=True) == before


def test_a_bad_due_date_is_refused():
    env = make_env("todo")
    task = _task("postpone")
    env.reset(task)
    assert "not a date" in do(env, "update_task", task_id=env.plan[-1][2]["task_id"], due_date="next week")


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = _task("due")
    with pytest.raises(BadTask, match="not what the template makes"):
        make_env("todo").reset(replace(task, hidden={**task.hidden, "answer": "2000-01-01"}))
    with pytest.raises(BadTask, match="hidden.template"):
        Todo.check_task(replace(task, hidden={**task.hidden, "template": "rm -rf"}))
