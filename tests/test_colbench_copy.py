"""The copy measure (gymflow/eval/colbench_copy.py): a rule value counts as in the code only as the reference
writes it, and each value is classed by where the agent could have read it."""

import dataclasses

from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_env, load_tasks
from gymflow.eval.colbench_copy import copy_rates, value_in_code
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Message, RunInfo


def test_a_number_counts_as_a_whole_token_and_a_string_when_quoted():
    code = 'if total >= 142.5 and n > 15:\n    return "toys" if x else 7'
    assert value_in_code(142.5, code) and value_in_code(15, code) and value_in_code(7, code)
    assert not value_in_code(142, code) and not value_in_code(1, code) and not value_in_code(5, code)
    assert value_in_code(15.0, code)  # a whole float is written as an int
    assert value_in_code("toys", code) and not value_in_code("toy", code)


def test_the_expert_copies_every_value_and_a_guess_is_counted_by_where_the_rule_came_from(tmp_path):
    build_env(tmp_path, "colbench", 4, 2, seed=0)
    tasks = load_tasks(tmp_path, "colbench", "train")
    env = ColBench()
    experts = [run_expert(env, t) for t in tasks]
    # the same tasks, submitted at once with every number in the reference moved by one: nothing is told
    guesses = []
    for ep in experts:
        code = ep.task.hidden["reference"]
        for rule in ep.task.hidden["specifics"]:
            for value in rule["values"].values():
                if not isinstance(value, str):
                    code = code.replace(str(value), str(value + 1))
        guesses.append(
            dataclasses.replace(ep, messages=[*ep.messages[:2], Message("assistant", "", f"submit\n{code}")])
        )
    write_episodes(tmp_path / "expert", "colbench", experts, RunInfo("main", "trajectories", 0, "expert"))
    write_episodes(tmp_path / "guess", "colbench", guesses, RunInfo("main", "guess", 0, "guess"))
    expert = copy_rates(tmp_path / "expert", tmp_path)
    assert expert["submitted"] == 4 and expert["told"]["copied"] == expert["stated"]["copied"] == 1.0
    assert expert["never told"]["values"] == 0  # the expert asks about every hidden rule
    guess = copy_rates(tmp_path / "guess", tmp_path)
    hidden = sum(len(r["values"]) for t in tasks for r in t.hidden["specifics"] if r["hidden"])
    assert guess["told"]["values"] == 0 and guess["never told"]["values"] == hidden
    assert guess["stated"]["values"] == expert["stated"]["values"]
    numbers = [
        v
        for t in tasks
        for r in t.hidden["specifics"]
        for v in r["values"].values()
        if not isinstance(v, str)
    ]
    assert numbers and guess["stated"]["copied"] < 1.0  # moved numbers are not the stated ones
