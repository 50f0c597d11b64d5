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
