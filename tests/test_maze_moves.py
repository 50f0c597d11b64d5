"""maze_moves: each executed move classed against the shortest path from where the agent stood."""

import runpy
import sys

import pytest

from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze, shortest_path
from gymflow.eval.maze_moves import classify


def test_moves_are_classed_from_where_the_agent_stands():
    task = next(t for t in build_splits(Maze, 20, 0, seed=0)["train"] if len(t.hidden["path"]) >= 3)
    env = Maze()
    env.reset(task)
    first = shortest_path(env.open, env.pos, env.goal)[0]
    others = sorted(env.open[env.pos[0]][env.pos[1]] - {first})
    walls = sorted({"up", "down", "left", "right"} - env.open[env.pos[0]][env.pos[1]])
    actions = [f"move {walls[0]}" if walls else "jump", "dance", f"move {first}"]
    counts = classify(task, actions)
    assert counts == {"shortest": 1, "other": 0, "invalid": 2}  # a wall and no move change nothing
    if others:  # a step off the path, then the first move of the new shortest path from there
        env.reset(task)
        env.step(f"move {others[0]}")
        back = shortest_path(env.open, env.pos, env.goal)[0]
        assert classify(task, [f"move {others[0]}", f"move {back}"]) == {
            "shortest": 1,
            "other": 1,
            "invalid": 0,
        }


def test_the_command_lines_take_their_arguments(monkeypatch, capsys):
    for module in ("gymflow.eval.behaviour", "gymflow.eval.maze_moves"):  # run as scripts, not imported ones
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(sys, "argv", ["behaviour", "--sql", "give_up_rate"])
    runpy.run_module("gymflow.eval.behaviour", run_name="__main__")
    assert "select" in capsys.readouterr().out.lower()
    monkeypatch.setattr(sys, "argv", ["maze_moves", "/nonexistent"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("gymflow.eval.maze_moves", run_name="__main__")
    assert stop.value.code == 2 and "\nerror: /nonexistent is not a folder" in "\n" + capsys.readouterr().err


def test_a_pairs_chosen_and_rejected_replies_are_judged_where_their_episode_stood(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gymflow.envs.instructions import save_tasks
    from gymflow.eval.maze_moves import pair_shares
    from gymflow.rollout.expert import run_expert
    from gymflow.rollout.records import RunInfo, episode_rows
    from gymflow.store.io import table_path, write_rows
    from gymflow.train.sweet import PAIRS_SCHEMA

    splits = build_splits(Maze, 20, 0, seed=0)
    task = next(t for t in splits["train"] if len(t.hidden["path"]) >= 3)
    save_tasks(tmp_path, "maze", splits)
    episode, turns = episode_rows(run_expert(Maze(), task), RunInfo("main", "offline", 0, "sft"))
    offline = tmp_path / "offline"
    write_rows(table_path(offline, "maze", "episodes"), "episodes", [episode])
    write_rows(table_path(offline, "maze", "turns"), "turns", turns)
    second = [t for t in turns if t["role"] == "assistant"][1]  # after the expert's first move
    env = Maze()
    env.reset(task)
    env.step(next(t for t in turns if t["role"] == "assistant")["action"])
    best = shortest_path(env.open, env.pos, env.goal)[0]
    wall = sorted({"up", "down", "left", "right"} - env.open[env.pos[0]][env.pos[1]])
    rejected = f"move {wall[0]}" if wall else "jump"
    pair = {name: None for name in PAIRS_SCHEMA.names} | {
        "env": "maze",
        "episode_id": episode["episode_id"],
        "task_id": task.task_id,
        "turn": second["turn"],
        "chosen_text": f"Thought: go.\nAction: move {best}",
        "rejected_text": f"Thought: go.\nAction: {rejected}",
    }
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist([pair], schema=PAIRS_SCHEMA), pairs)
    shares = pair_shares(pairs, offline, tmp_path)
    assert shares["chosen"] == {"shortest": 1.0, "other": 0.0, "invalid": 0.0, "pairs": 1}
    assert shares["rejected"] == {"shortest": 0.0, "other": 0.0, "invalid": 1.0, "pairs": 1}
