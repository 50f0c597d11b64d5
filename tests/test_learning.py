"""The pieces of "learning, shown" (issue 38): the maze's verbal view, the imperfect demonstrator, the paired
comparison and its pooling over seeds, the control's matched learning set and the shortest-success filter, each
against hand-worked cases (the imitation ceiling's lookup table: tests/test_ceiling.py)."""

import dataclasses
import math
import random
from collections import Counter

import pytest

from gymflow.config import InstructionsParams, TrajectoriesParams
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits, with_view
from gymflow.envs.maze import Maze
from gymflow.eval.compare import paired, pool
from gymflow.rollout.expert import run_expert
from gymflow.train.evol import kept_episodes, matched_set
from tests.test_evol import TASKS, explored, fmt  # noqa: F401 (fixtures)

# a 3x3 maze, by hand: from 0,0 the only way is right; the goal 2,0 lies down
LAYOUT = [["r", "lrd", "l"], ["d", "ud", "d"], ["ur", "lu", "u"]]
HAND = dataclasses.replace(
    TASKS[0],
    task_id="maze-hand",
    instruction="Reach the goal at 2,0.",
    hidden={"size": 3, "open": LAYOUT, "start": [0, 0], "goal": [2, 0], "path": []},
)


def test_the_verbal_view_states_direction_open_ways_and_the_last_move():
    env = make_env("maze")
    assert env.reset(HAND) == "Reach the goal at 2,0. pos 0,0 goal 2,0 walls: up, down, left"
    verbal = with_view(HAND, "verbal")
    assert env.reset(verbal) == "Reach the goal at 2,0. Goal is down. Open: right. Last move: none."
    assert (
        env.step("move down").observation == "A wall blocks down. Goal is down. Open: right. Last move: none."
    )
    assert (
        env.step("move right").observation
        == "Goal is down and left. Open: down, left, right. Last move: right."
    )
    assert env.step("move down").observation == "Goal is down and left. Open: up, down. Last move: down."
    env.step("move down")
    step = env.step("move left")
    assert step.done and step.reward == 1.0


def test_the_greedy_demonstrator_is_seeded_per_task_and_solves_about_half():
    env = make_env("maze")
    tasks = [with_view(t, "verbal") for t in build_splits(Maze, 300, 0, seed=1)["train"]]
    first = [run_expert(env, t, demonstrator="greedy") for t in tasks]
    again = [run_expert(env, t, demonstrator="greedy") for t in tasks]
    assert [[m.text for m in e.messages] for e in first] == [[m.text for m in e.messages] for e in again]
    rate = sum(e.success for e in first) / len(first)
    assert 0.3 < rate < 0.65  # 0.46 over 2,000 train tasks; the expert solves all
    assert all(run_expert(env, t).success for t in tasks[:50])
    # the greedy move is toward the goal where open: from 0,0 of the hand maze only right is open
    env.reset(with_view(HAND, "verbal"))
    assert env.demonstrator_step("greedy", random.Random(0)) == (
        "The goal is down. Open: right. I move right.",
        "move right",
    )


def test_views_and_demonstrators_are_checked_in_params():
    assert InstructionsParams(train={}, eval={}, views={"maze": "verbal"}).views == {"maze": "verbal"}
    with pytest.raises(ValueError, match="'pictures' is not a view; it has views"):
        InstructionsParams(train={}, eval={}, views={"maze": "pictures"})
    with pytest.raises(ValueError, match="no choice of view"):
        InstructionsParams(train={}, eval={}, views={"wordle": "verbal"})
    with pytest.raises(ValueError, match="no demonstrator 'greedy'"):
        TrajectoriesParams(tasks={}, demonstrators={"wordle": "greedy"})


def test_paired_differences_by_hand():
    method = {"a": 1, "b": 1, "c": 0, "d": 1, "extra": 1}
    baseline = {"a": 0, "b": 1, "c": 0, "d": 0}
    p = paired(method, baseline)  # diffs 1, 0, 0, 1: mean 0.5, sd sqrt(1/3)
    assert (p.n, p.mean, p.method, p.baseline) == (4, 0.5, 0.75, 0.25)
    assert p.sd == pytest.approx(math.sqrt(1 / 3)) and p.se == pytest.approx(math.sqrt(1 / 3) / 2)
    assert p.z == pytest.approx(0.5 / (math.sqrt(1 / 3) / 2))
    assert paired({"a": 1}, {"a": 1}).z == 0.0


def test_pooling_seeds_equals_pairing_all_their_tasks():
    rng = random.Random(0)
    seeds = [
        (
            {f"{s}-{t}": rng.random() < 0.6 for t in range(n)},
            {f"{s}-{t}": rng.random() < 0.4 for t in range(n)},
        )
        for s, n in enumerate((50, 80, 30))
    ]
    parts = [paired(*map(lambda d: {k: float(v) for k, v in d.items()}, pair)) for pair in seeds]
    whole = paired(
        {k: float(v) for m, _ in seeds for k, v in m.items()},
        {k: float(v) for _, b in seeds for k, v in b.items()},
    )
    pooled = pool(parts)
    assert pooled.n == whole.n == 160
    for field in ("mean", "sd", "method", "baseline"):
        assert getattr(pooled, field) == pytest.approx(getattr(whole, field))


def test_the_control_learns_as_many_rows_of_the_sft_data_alone():
    sft = {
        "maze": [{"input_ids": [i], "assistant_masks": [1]} for i in range(3)],
        "babyai": [{"input_ids": [9], "assistant_masks": [1]}],
    }
    rows = matched_set(sft, {"maze": 2}, 11, seed=0)  # base: 3 maze x 2 + 1 babyai = 7 rows; 11 = 7 + 4
    assert len(rows) == 11
    ids = [r["input_ids"][0] for r in rows]
    assert sorted(ids[:7]) == [0, 0, 1, 1, 2, 2, 9]
    assert not Counter(ids[7:]) - Counter(ids[:7])  # a draw of the base's positions, none twice
    assert matched_set(sft, {"maze": 2}, 11, seed=0) == rows and matched_set({}, {}, 5, 0) == []


def test_the_shortest_filter_keeps_one_episode_per_task(explored, fmt):  # noqa: F811
    folder, played = explored
    all_kept = kept_episodes(folder, 2, 0.0, fmt)
    shortest = kept_episodes(folder, 2, 0.0, fmt, keep="shortest")
    by_task = {}
    for row in all_kept:
        best = by_task.get(row["task_id"])
        if best is None or (row["turns"], row["sample"]) < (best["turns"], best["sample"]):
            by_task[row["task_id"]] = row
    assert [(r["task_id"], r["sample"]) for r in shortest] == sorted(
        (t, r["sample"]) for t, r in by_task.items()
    )
    assert len(shortest) == 2 < len(all_kept)


def test_env_names_declares_the_views_and_demonstrators_the_classes_have():
    from gymflow import env_names
    from gymflow.envs import ENVS, maze

    for name, cls in ENVS.items():
        assert env_names.DEMONSTRATORS.get(name, ("expert",)) == cls.demonstrators
    assert env_names.VIEWS == {"maze": maze.VIEWS}
