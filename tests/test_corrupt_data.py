"""Damaged files under data/: every reader names the file and says how to rebuild it (one line, no traceback);
every stage's resume check counts a damaged file as missing and writes it again; files get the usual modes.

The kinds of damage: truncated, empty, a byte flipped in the middle, another schema under the right version key,
random bytes named .parquet, and a stray damaged file that no stage writes (dropped in by hand).
"""

import os
import random
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM

from gymflow import cli
from gymflow.config import EvalParams, ModelConfig, RLParams, RolloutParams, SFTParams
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_env, build_splits, load_tasks
from gymflow.envs.maze import Maze
from gymflow.errors import UserError
from gymflow.eval.agenteval import evaluate_policy, summarize_file
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout import agenttraj
from gymflow.rollout import play as play_module
from gymflow.rollout.expert import run_expert
from gymflow.rollout.play import shadow
from gymflow.rollout.records import RunInfo
from gymflow.store.db import connect
from gymflow.store.io import (
    atomic_dir,
    atomic_path,
    check_table,
    file_metadata,
    is_intact,
    read_rows,
    rebuild_hint,
    table_path,
    write_rows,
    write_text,
)
from gymflow.train import rl as rl_loop
from gymflow.train import sft

TASKS = build_splits(Maze, 4, 2, seed=0)
INFO = RunInfo(run="main", stage="evaluate", iteration=0, policy="sft")

# A DVC project of two stages, enough for DVC to say which stage writes a file.
DVC_YAML = """\
stages:
  instructions:
    cmd: python -m stages.instructions
    outs:
      - data/instructions
  evaluate:
    foreach: [init, sft]
    do:
      cmd: python -m stages.evaluate ${item}
      outs:
        - data/rollouts/evaluate/${item}
"""
TASKS_FILE = "data/instructions/maze.tasks.parquet"
EPISODES_FILE = "data/rollouts/evaluate/sft/maze.episodes.parquet"
STRAY = {"tasks": "scratch/instructions/maze.tasks.parquet", "episodes": "data/rollouts/foo.episodes.parquet"}


# ---- the damage ---------------------------------------------------------------------------------------------


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def empty(path):
    path.write_bytes(b"")


def flip_middle(path):
    """Flip a byte in the middle of the data pages (in files this small, the middle of the file is footer,
    mostly fields no reader uses: `test_page_checksums_turn_flipped_bytes_into_errors` flips every byte)."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    end = max(
        group.column(i).data_page_offset + group.column(i).total_compressed_size
        for i in range(group.num_columns)
    )
    data = bytearray(path.read_bytes())
    data[(4 + end) // 2] ^= 0x10  # the data pages start after the 4-byte magic "PAR1"
    path.write_bytes(bytes(data))


def wrong_schema(path):
    """The same rows with one column of another type, the version key kept: a table of another tool or
    another gymflow that forgot to bump the version."""
    table = pq.read_table(path)
    name = "seed" if "seed" in table.column_names else "reward"
    i = table.column_names.index(name)
    table = table.set_column(i, name, table.column(name).cast(pa.string()))
    pq.write_table(table, path)


def random_bytes(path):
    path.write_bytes(random.Random(0).randbytes(3000))


DAMAGE = {
    "truncated": truncate,
    "empty": empty,
    "flipped": flip_middle,
    "wrong_schema": wrong_schema,
    "random": random_bytes,
    "stray": truncate,  # a hand-dropped copy, cut short, where no stage writes
}


# ---- a project with a tasks file and an evaluation ------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A DVC project (no git) with maze's instructions and an evaluation's episodes, as the stages write them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    build_env("data", "maze", 4, 2, seed=0)
    env = make_env("maze")
    episodes = [run_expert(env, t) for t in load_tasks("data", "maze", "eval")]
    agenttraj.write_episodes(tmp_path / "data/rollouts/evaluate/sft", "maze", episodes, INFO)
    return tmp_path


def damage(root, kind: str, table: str) -> str:
    """Damage the file `table`'s readers read (for "stray", a copy where no stage writes); its path."""
    good = {"tasks": TASKS_FILE, "episodes": EPISODES_FILE}[table]
    path = STRAY[table] if kind == "stray" else good
    if kind == "stray":
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes((root / good).read_bytes())
    DAMAGE[kind](root / path)
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    return exit_.value.code, capsys.readouterr().err


# Every reader: (the table it reads, how to call it with that file's path; it returns the error message).
def _raises(call):
    with pytest.raises(UserError) as e:
        call()
    return str(e.value)


def _tasks_dir(path: str) -> str:
    return path.split("/instructions/")[0]


READERS = {
    "read_rows": ("episodes", lambda path, capsys: _raises(lambda: read_rows(path))),
    "check_table": ("episodes", lambda path, capsys: _raises(lambda: check_table(path, "episodes"))),
    "connect": ("episodes", lambda path, capsys: _raises(lambda: connect("data"))),
    "summary": ("episodes", lambda path, capsys: _raises(lambda: summarize_file(Path(path), 0))),
    "load_tasks": ("tasks", lambda path, capsys: _raises(lambda: load_tasks(_tasks_dir(path), "maze"))),
    # a query that reads every value: gymflow sql checks footers at open, pages as a query reads them
    "cli_sql": ("episodes", lambda path, capsys: run_cli(capsys, "sql", "select * from episodes")),
    "cli_envs": ("tasks", lambda path, capsys: run_cli(capsys, "--data", _tasks_dir(path), "envs")),
    "cli_solve": ("tasks", lambda path, capsys: run_cli(capsys, "--data", _tasks_dir(path), "solve", "maze")),
    "cli_play": ("tasks", lambda path, capsys: run_cli(capsys, "--data", _tasks_dir(path), "play", "maze")),
}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_names_the_damaged_file_and_how_to_rebuild_it(project, capsys, reader, kind):
    table, call = READERS[reader]
    path = damage(project, kind, table)
    out = call(path, capsys)
    if reader.startswith("cli_"):
        code, out = out
        assert code == 2 and out.startswith("error: ") and "Traceback" not in out
        assert out.endswith("\n") and out.count("\n") == 1, out  # one line
    assert "\n" not in out.rstrip("\n")
    assert path in out
    if kind == "stray":
        assert "no stage writes it: delete it" in out
    else:
        stage = "instructions" if table == "tasks" else "evaluate@sft"
        assert f"delete it and run `dvc repro {stage}` to rebuild it" in out
    if kind == "wrong_schema":
        assert "does not hold the" in out and "is string, not" in out
    elif kind in ("truncated", "empty", "random", "stray"):
        assert "is unreadable" in out


@pytest.mark.parametrize("kind", ["truncated", "empty", "random"])
def test_the_footer_reader_names_the_file(project, kind):
    """`file_metadata` reads only the footer: damage there is named; a flipped page is the full readers' part."""
    path = damage(project, kind, "episodes")
    message = _raises(lambda: file_metadata(path))
    assert message.startswith(f"{path} is unreadable") and "dvc repro evaluate@sft" in message


def test_a_task_that_does_not_load_is_named_too(project):
    table = pq.read_table(TASKS_FILE)
    hidden = pa.array(["{not json"] * table.num_rows)
    pq.write_table(table.set_column(table.column_names.index("hidden"), "hidden", hidden), TASKS_FILE)
    message = _raises(lambda: load_tasks("data", "maze"))
    assert (
        message.startswith(f"{TASKS_FILE} has a task that does not load")
        and "dvc repro instructions" in message
    )


@pytest.mark.slow  # DVC loads the real pipeline
def test_the_hint_names_the_stage_of_the_real_pipeline():
    """DVC itself maps a path to its stage, `foreach` stages included, so the hint follows dvc.yaml."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path, stage in [
        ("data/instructions/maze.tasks.parquet", "instructions"),
        ("data/rollouts/trajectories/maze.turns.parquet", "trajectories"),
        ("data/rollouts/evaluate/sft/maze.episodes.parquet", "evaluate@sft"),
        ("data/rollouts/rl/it001.episodes.parquet", "rl"),
    ]:
        assert (
            rebuild_hint(os.path.join(root, path)) == f"delete it and run `dvc repro {stage}` to rebuild it"
        )
    assert (
        rebuild_hint(os.path.join(root, "data/rollouts/foo.episodes.parquet"))
        == "no stage writes it: delete it"
    )


def test_another_tables_file_under_a_tables_name_is_caught(tmp_path):
    """Right version key, wrong table: the columns say so, whatever the file is called."""
    path = table_path(tmp_path, "maze", "episodes")
    write_rows(path, "turns", [])
    with pytest.raises(UserError, match=r"does not hold the episodes table \(no column run, no column stage"):
        read_rows(path)


@pytest.mark.slow  # every one of 2,774 byte flips, each written and read back
def test_page_checksums_turn_flipped_bytes_into_errors(tmp_path):
    """Every single-byte flip of a small tasks file: read back as an error, as a schema mismatch, or as the same
    rows, never as other rows (without page checksums, most flips read back silently changed)."""
    path = table_path(tmp_path, "maze", "tasks")
    write_rows(path, "tasks", [t.to_row() for split in TASKS.values() for t in split])
    good, rows = path.read_bytes(), read_rows(path)
    outcomes = {"caught": 0, "same": 0, "changed": 0}
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x10
        path.write_bytes(bytes(data))
        if not is_intact(path, "tasks"):  # what every reader checks, without asking DVC for a hint each time
            outcomes["caught"] += 1
        else:
            outcomes["same" if read_rows(path) == rows else "changed"] += 1
    assert outcomes["changed"] == 0, outcomes
    assert outcomes["caught"] > 0.6 * len(good), outcomes  # the rest: footer fields no reader uses


# ---- resume checks: a damaged file is missing, and written again ------------------------------------------


@pytest.mark.parametrize("kind", ["truncated", "empty", "flipped", "wrong_schema", "random"])
@pytest.mark.parametrize("table", ["episodes", "turns"])
def test_a_damaged_table_is_not_current(tmp_path, capsys, kind, table):
    env = make_env("maze")
    episodes = [run_expert(env, t) for t in TASKS["train"][:2]]
    agenttraj.write_episodes(tmp_path, "maze", episodes, INFO, {"gymflow.config_hash": "h"})
    assert agenttraj.is_current(tmp_path, "maze", "h")
    DAMAGE[kind](table_path(tmp_path, "maze", table))
    assert not agenttraj.is_current(tmp_path, "maze", "h")
    assert f"maze.{table}.parquet" in capsys.readouterr().err  # the stage says what it writes again


@pytest.mark.slow  # the stage's forked workers
def test_agenttraj_rewrites_a_damaged_table_as_a_clean_run_writes_it(tmp_path):
    tasks = {"maze": TASKS["train"][:3]}
    info = RunInfo(run="agenttraj", stage="trajectories", iteration=0, policy="expert", config_hash="c")
    agenttraj.gather_trajectories(tasks, tmp_path / "clean", tmp_path / "clean_json", info)
    agenttraj.gather_trajectories(tasks, tmp_path / "r", tmp_path / "r_json", info)
    truncate(table_path(tmp_path / "r", "maze", "episodes"))
    flip_middle(table_path(tmp_path / "r", "maze", "turns"))
    # crashed in its resume check before
    agenttraj.gather_trajectories(tasks, tmp_path / "r", tmp_path / "r_json", info)
    for table in ("episodes", "turns"):
        assert read_rows(table_path(tmp_path / "r", "maze", table)) == read_rows(
            table_path(tmp_path / "clean", "maze", table)
        )


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A tiny random agent saved like a stage's output."""
    env = make_env("maze")
    texts = [m.text for t in TASKS["train"] for m in run_expert(env, t).messages]
    tokenizer = train_tokenizer(texts * 3, 400)
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=1024)
    folder = tmp_path_factory.mktemp("agent")
    build_model(cfg, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


PLAY = RolloutParams(max_new_tokens=12, max_length=1024, batch_size=8)  # RL's rollouts


def test_evaluation_plays_a_damaged_environment_again(agent, tmp_path):
    tasks, cfg = {"maze": TASKS["eval"]}, EvalParams(envs=["maze"])
    play = RolloutParams(max_new_tokens=6, max_length=512)
    clean = evaluate_policy("sft", agent, tasks, cfg, play, tmp_path)
    tables = {t: read_rows(tmp_path / f"sft/maze.{t}.parquet") for t in ("episodes", "turns")}
    wrong_schema(tmp_path / "sft/maze.episodes.parquet")
    again = evaluate_policy("sft", agent, tasks, cfg, play, tmp_path)  # crashed in its summary before
    assert {t: read_rows(tmp_path / f"sft/maze.{t}.parquet") for t in tables} == tables
    speed = ("episodes_per_s", "steps_per_s", "tokens_per_s")
    assert {k: v for k, v in again["maze"]["all"].items() if k not in speed} == {
        k: v for k, v in clean["maze"]["all"].items() if k not in speed
    }


def _rl(folder, out):
    rl = RLParams(tasks={"maze": 2}, samples=2, iterations=2, lr=1e-3, horizon=[{"turns": 2}])
    tasks = {"maze": TASKS["train"]}
    return rl_loop.train_rl(str(folder), out / "model", tasks, rl, PLAY, out / "rollouts", out / "rl.csv")


def test_rl_resumed_over_a_damaged_iteration_starts_afresh_and_ends_as_a_clean_run(
    agent, tmp_path, monkeypatch
):
    """A kept iteration's episodes came from weights only a fresh run has again: a damaged table of one means
    starting over, and the end is the clean run's. Everything the run writes (rollouts, curve, checkpoint,
    model) has the modes open() gives."""
    _rl(agent, tmp_path / "clean")
    real = rl_loop.run_iteration

    def stop_at_2(*args, **kw):
        if args[6] == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(rl_loop, "run_iteration", stop_at_2)
    old = os.umask(0o022)
    try:
        with pytest.raises(KeyboardInterrupt):
            _rl(agent, tmp_path / "r")
        modes = _modes(tmp_path / "r")
        monkeypatch.setattr(rl_loop, "run_iteration", real)
        random_bytes(tmp_path / "r/rollouts/it001.turns.parquet")
        _rl(agent, tmp_path / "r")
        modes |= _modes(tmp_path / "r")
    finally:
        os.umask(old)
    assert any(p.endswith("/state.pt") for p in modes) and "model/model.safetensors" in modes
    assert {p: oct(m) for p, m in modes.items() if m != (0o755 if p.endswith("/") else 0o644)} == {}
    for name in ("it001.episodes", "it001.turns", "it002.episodes", "it002.turns"):
        assert read_rows(tmp_path / f"r/rollouts/{name}.parquet") == read_rows(
            tmp_path / f"clean/rollouts/{name}.parquet"
        )
    clean = AutoModelForCausalLM.from_pretrained(tmp_path / "clean/model").state_dict()
    resumed = AutoModelForCausalLM.from_pretrained(tmp_path / "r/model").state_dict()
    assert all(torch.equal(clean[k], resumed[k]) for k in clean)


def test_a_stray_file_named_like_an_iteration_is_left_alone(tmp_path):
    (tmp_path / "itx.episodes.parquet").write_bytes(b"x")
    (tmp_path / "it003.episodes.parquet").write_bytes(b"x")
    rl_loop._clear_rollouts(tmp_path, after=2)  # crashed on the name before
    assert [p.name for p in tmp_path.iterdir()] == ["itx.episodes.parquet"]


# ---- file modes ------------------------------------------------------------------------------------------


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_files_have_the_modes_open_gives(tmp_path, umask):
    """0o666 / 0o777 less the umask, as open() and mkdir() give (tempfile would give 0o600 / 0o700)."""
    write_rows(tmp_path / "a.episodes.parquet", "episodes", [])
    write_text(tmp_path / "m.json", "{}")
    with atomic_path(tmp_path / "state.pt") as tmp:
        torch.save({"x": torch.zeros(1)}, tmp)
    with atomic_dir(tmp_path / "model") as tmp:
        (tmp / "config.json").write_text("{}")
    for name in ("a.episodes.parquet", "m.json", "state.pt", "model/config.json"):
        assert _mode(tmp_path / name) == 0o666 & ~umask, name
    assert _mode(tmp_path / "model") == 0o777 & ~umask


def _modes(root) -> dict[str, int]:
    """Every file and directory (with a trailing /) under `root` -> its mode."""
    return {p.relative_to(root).as_posix() + "/" * p.is_dir(): _mode(p) for p in root.rglob("*")}


def test_sft_checkpoints_and_model_are_not_private(agent, tmp_path, monkeypatch):
    """TRL's checkpoints hold safetensors weights, which safetensors writes 0o600; they and the model get 0o644."""
    env = make_env("maze")
    data = [
        {"messages": [{"role": m.role, "content": m.text} for m in run_expert(env, t).messages[:-1]]}
        for t in TASKS["train"]
    ]
    monkeypatch.setattr(sft, "shutil", SimpleNamespace(rmtree=lambda *a, **kw: None))  # keep the checkpoints
    cfg = SFTParams(envs={"maze": 1}, lr=1e-2, batch_size=2, log_every=1, bf16=False)
    old = os.umask(0o022)
    try:
        sft.train_sft(str(agent), tmp_path / "sft", data, cfg, tmp_path / "sft.csv")
    finally:
        os.umask(old)
    modes = _modes(tmp_path)
    assert any("checkpoint-" in p and p.endswith(".safetensors") for p in modes), modes
    assert "sft/model.safetensors" in modes
    assert {p: oct(m) for p, m in modes.items() if m != (0o755 if p.endswith("/") else 0o644)} == {}


def test_a_file_name_with_a_newline_stays_one_line(project):
    path = project / "data/rollouts/bad\nname.episodes.parquet"
    path.write_bytes(b"PAR1")
    message = _raises(lambda: connect("data"))
    assert "\n" not in message and message.startswith(
        "'data/rollouts/bad\\nname.episodes.parquet' is unreadable"
    )


def test_gymflow_sql_reads_a_damaged_page_only_when_a_query_needs_it(project, capsys):
    """Opening checks footers only: a flipped data page fails the first query that reads it, naming the file,
    and never becomes an answer; queries that do not read it (a count from the footer, another table) answer."""
    path = damage(project, "flipped", "episodes")
    cli.main(["sql", "select count(*) as n from episodes"])  # row counts are in the footer
    assert "│ 2 │" in capsys.readouterr().out
    cli.main(["sql", "select count(*) as n from tasks"])
    assert "│ 6 │" in capsys.readouterr().out
    code, err = run_cli(capsys, "sql", "select * from episodes")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path} is unreadable")
    assert err.endswith("delete it and run `dvc repro evaluate@sft` to rebuild it\n")


def test_a_rerun_without_an_environment_leaves_none_of_its_rollouts_behind(agent, tmp_path):
    """Rollout folders persist (a rerun plays only what changed), so an environment dropped from the run must be
    deleted there: AgentEvol would learn from its episodes (another model's token ids) and SQL count them."""
    cfg, play = EvalParams(envs=["maze", "wordle"]), RolloutParams(max_new_tokens=6, max_length=512)
    tasks = {"maze": TASKS["eval"], "wordle": build_splits(ENVS["wordle"], 0, 2, seed=0)["eval"]}
    evaluate_policy("sft", agent, tasks, cfg, play, tmp_path)
    maze = tmp_path / "sft/maze.episodes.parquet"
    played = maze.stat().st_mtime_ns
    assert (tmp_path / "sft/wordle.turns.parquet").exists() and (tmp_path / ".sft.speed/wordle.json").exists()
    evaluate_policy("sft", agent, {"maze": tasks["maze"]}, cfg, play, tmp_path)
    assert sorted(p.name for p in (tmp_path / "sft").iterdir()) == [
        "maze.episodes.parquet",
        "maze.turns.parquet",
    ]
    assert (
        not (tmp_path / ".sft.speed/wordle.json").exists() and maze.stat().st_mtime_ns == played
    )  # not replayed
    assert sorted(p.name for p in shadow(tmp_path / "sft").iterdir()) == [
        "maze.episodes.parquet",
        "maze.turns.parquet",
    ]
    assert connect(tmp_path).execute("select distinct env from episodes").fetchall() == [("maze",)]


def test_a_run_whose_output_folder_dvc_emptied_finds_its_episodes_kept_and_plays_nothing(
    agent, tmp_path, monkeypatch
):
    """DVC deletes a stage's (non-persistent) output folder before running it: an interrupted or repeated
    evaluation must not play again what it played with the same settings and weights, and SQL must count each
    episode once though it has two names."""
    cfg, play = EvalParams(envs=["maze"]), RolloutParams(max_new_tokens=6, max_length=512)
    tasks = {"maze": TASKS["eval"]}
    first = evaluate_policy("sft", agent, tasks, cfg, play, tmp_path)
    tables = {t: read_rows(tmp_path / f"sft/maze.{t}.parquet") for t in ("episodes", "turns")}
    shutil.rmtree(tmp_path / "sft")  # as `dvc repro` does
    monkeypatch.setattr(play_module, "play_jobs", lambda *a, **k: pytest.fail("played again"))
    again = evaluate_policy("sft", agent, tasks, cfg, play, tmp_path)
    assert {t: read_rows(tmp_path / f"sft/maze.{t}.parquet") for t in tables} == tables
    assert again == first
    n = connect(tmp_path).execute("select count(*) from episodes").fetchone()[0]
    assert n == len(tables["episodes"]) == len(TASKS["eval"])
    other = EvalParams(envs=["maze"], seed=cfg.seed + 1)  # other settings: the kept tables are not current
    monkeypatch.undo()
    evaluate_policy("sft", agent, tasks, other, play, tmp_path)
    assert file_metadata(shadow(tmp_path / "sft") / "maze.episodes.parquet") == file_metadata(
        tmp_path / "sft/maze.episodes.parquet"
    )
