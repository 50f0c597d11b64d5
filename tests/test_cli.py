"""The `gymflow` command, run as a user runs it."""

import argparse
import json
import os
import subprocess
import sys

import pytest
from rich.cells import cell_len

from gymflow.cli import FILLED_BY, main, parser
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits, save_tasks
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo


def gymflow(*args, data=None, stdin="", env=None):
    cmd = [sys.executable, "-m", "gymflow", *(["--data", str(data)] if data else []), *args]
    env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data folder with maze instructions and a few expert episodes."""
    root = tmp_path_factory.mktemp("data")
    splits = build_splits(ENVS["maze"], n_train=6, n_eval=3, seed=0)
    save_tasks(root, "maze", splits)
    env = ENVS["maze"]()
    episodes = [run_expert(env, t) for t in splits["train"]]
    write_episodes(root / "rollouts", "maze", episodes, RunInfo("r", "trajectories", 0, "expert"))
    return root


@pytest.mark.slow  # `gymflow` processes
def test_solve_json(data):
    out = gymflow("solve", "maze", "--n", "5", "--split", "eval", data=data)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"error: maze has only 3 eval tasks in {data}; ask for --n 3 or fewer"
    )
    out = gymflow("solve", "maze", "--n", "3", "--split", "eval", "--json", data=data)
    result = json.loads(out.stdout)
    assert result["env"] == "maze" and result["n"] == 3 and result["success"] == 1.0
    assert result["mean_reward"] == 1.0 and result["mean_turns"] >= 2


@pytest.mark.slow  # `gymflow` processes
def test_envs_lists_every_environment_with_split_sizes(data):
    out = gymflow("envs", data=data)
    assert out.returncode == 0
    for name in ENVS:
        assert name in out.stdout
    maze_row = next(line for line in out.stdout.splitlines() if "│ maze" in line)
    assert "│ 6 " in maze_row and "│ 3 " in maze_row and "15" in maze_row


@pytest.mark.slow  # `gymflow` processes
def test_envs_fits_an_80_column_pipe_with_every_expert_described(data):
    out = gymflow("envs", data=data, env={"COLUMNS": ""})  # a pipe: rich's 80 columns
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and max(map(cell_len, lines)) <= 80
    assert len(lines) <= 2 * len(ENVS) + 12  # a table row and at most one wrapped line per description
    words = " ".join(out.stdout.split())
    for name, cls in ENVS.items():
        assert f"{name} {cls.spec.expert}" in words  # whole, not cut with an ellipsis


@pytest.mark.slow  # `gymflow` processes
def test_envs_keeps_the_expert_column_where_it_fits(data):
    out = gymflow("envs", data=data, env={"COLUMNS": "200"})
    maze_row = next(line for line in out.stdout.splitlines() if "│ maze" in line)
    assert "│ breadth-first shortest path" in maze_row and "expert (" not in out.stdout


@pytest.mark.parametrize("command", ["play", "solve", "view", "serve-env", "serve-model", "rl-noise"])
def test_every_argument_of_a_command_is_described(command, capsys):
    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    undescribed = [a.dest for a in sub.choices[command]._actions if not a.help]
    assert not undescribed
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    if command in ("play", "solve", "serve-env"):
        assert f"env the environment: {', '.join(sorted(ENVS)[:3])}," in text and "wordle" in text


@pytest.fixture
def sql(data, capsys):
    """`gymflow sql` in-process over `data` (or another folder): its stdout."""

    def run(query, folder=data):
        main(["--data", str(folder), "sql", query])
        return capsys.readouterr().out

    return run


def test_an_empty_result_names_the_stage_that_fills_an_empty_table(sql, data, tmp_path):
    out = sql("select e.env, c.critic from episodes e join critic_scores c using (episode_id)")
    assert f"table critic_scores is empty in {data}: {FILLED_BY['critic_scores']}" in out
    assert "table episodes" not in out  # it has rows: the join is what found none
    out = sql("select task_id from TASKS where env = 'wordle'", tmp_path)
    assert out.splitlines()[-1] == f"table tasks is empty in {tmp_path}: `dvc repro instructions` writes it"


def test_no_hint_when_the_query_itself_finds_nothing_or_rows_come_back(sql):
    assert "is empty" not in sql("select * from episodes where reward > 5")
    assert "is empty" not in sql("select count(*) from critic_scores")  # one row: 0


@pytest.mark.slow  # `gymflow` processes
def test_sql_over_rollouts(data):
    out = gymflow("sql", "select env, count(*) as n, avg(reward) as r from episodes group by env", data=data)
    assert out.returncode == 0
    row = next(line for line in out.stdout.splitlines() if "maze" in line)
    assert row.split("│")[2].strip() == "6" and row.split("│")[3].strip() == "1.0"  # as DuckDB writes it


@pytest.mark.slow  # `gymflow` processes
@pytest.mark.parametrize(
    "args, message",
    [
        (["sql", "select * from nowhere"], "error: SQL: Catalog Error"),
        (["solve", "chess", "--n", "2"], "error: unknown environment 'chess'"),
        (["solve", "maze", "--n", "0"], "error: --n must be at least 1"),
        (["play", "maze", "--task-id", "nope"], "error: no task 'nope' for maze"),
        (["rl-noise", "--batches", "1"], "error: --batches must be at least 2"),
        (["rl-noise", "nowhere"], "error: no agent in nowhere"),
    ],
)
def test_user_mistakes_are_one_line_errors(data, args, message):
    out = gymflow(*args, data=data)
    assert out.returncode == 2
    assert out.stderr.startswith(message) and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


@pytest.mark.slow  # `gymflow` processes
def test_play_colbench_takes_a_multi_line_submission(tmp_path):
    """Colbench's actions are code: at the prompt an action runs to the first empty line."""
    splits = build_splits(ENVS["colbench"], n_train=2, n_eval=1, seed=0)
    save_tasks(tmp_path, "colbench", splits)
    task = splits["eval"][0]
    env = ENVS["colbench"]()
    env.reset(task)
    typed = []
    while not env.done:
        _, action = env.expert_step()
        typed += [action, ""]
        env.step(action)
    out = gymflow("play", "colbench", "--task-id", task.task_id, data=tmp_path, stdin="\n".join(typed) + "\n")
    assert out.returncode == 0, out.stderr
    assert "All 10 tests passed." in out.stdout
    assert f"reward 1 (success) in {env.turns} turns" in out.stdout


@pytest.mark.slow  # `gymflow` processes
def test_play_an_episode_from_stdin(data):
    task = build_splits(ENVS["maze"], n_train=6, n_eval=3, seed=0)["eval"][0]
    moves = [f"move {d}" for d in task.hidden["path"]]
    out = gymflow(
        "play", "maze", "--task-id", task.task_id, data=data, stdin="\n".join(["jump", *moves]) + "\n"
    )
    assert out.returncode == 0, out.stderr
    assert 'Invalid action "jump"' in out.stdout
    assert f"reward 1 (success) in {len(moves) + 1} turns" in out.stdout
