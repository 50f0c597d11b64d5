"""Smoke run of the DVC pipeline on tiny parameters in a temporary copy of the repository."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from gymflow.serving import free_port
from gymflow.store.db import connect

pytestmark = pytest.mark.slow  # runs the DVC pipeline and its stages

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}


def run(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def copy_code(repo: Path) -> None:
    """The pipeline's code and its declaration (dvc.yaml, stages, gymflow) copied into `repo`."""
    for name in ["dvc.yaml", "stages", "gymflow"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)


def tiny_params() -> dict:
    """The repository's params.yaml cut to a smoke run: 3 train and 2 eval tasks per environment, a model 16
    wide, one SFT pass, greedy and one sample on two evaluation environments, two short AgentEvol and RL
    iterations."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    envs = params["envs"]
    params["instructions"]["train"] = dict.fromkeys(envs, 3)
    params["instructions"]["eval"] = dict.fromkeys(envs, 2)
    params["trajectories"]["tasks"] = dict.fromkeys(envs, 2)
    params["trajectories"]["demonstrators"] = {}  # the experts: every AgentTraj task solved, checked below
    params["model"] = {**params["model"], "vocab_size": 400, "hidden_size": 16, "intermediate_size": 32}
    sft_envs = dict.fromkeys(params["sft"]["envs"], 1)
    params["sft"] = {**params["sft"], "envs": sft_envs, "batch_size": 2, "bf16": False, "log_every": 1}
    params["rollout"] = {**params["rollout"], "max_new_tokens": 8}
    params["evaluate"] = {**params["evaluate"], "envs": ["maze", "wordle"], "k": 1}
    # AgentEvol: two iterations on every train task of two environments, 2 samples each
    iterations = {"evol1": {"explorer": "sft"}, "evol2": {"explorer": "evol1"}}
    evol = {"tasks": {"maze": None, "textcraft": 2}, "samples": 2, "epochs": 1.0, "iterations": iterations}
    evol |= {"keep": "all", "merge_sft": True}  # AgentGym's merge: the learning set counted below
    params["evol"] = {**params["evol"], **evol}
    # RL: two iterations of 2 maze tasks x 2 samples, turn limits 2 then 3
    horizon = [{"turns": 2, "iterations": 1}, {"turns": 3}]
    params["rl"] = {**params["rl"], "tasks": {"maze": 2}, "samples": 2, "iterations": 2, "horizon": horizon}
    return params


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    copy_code(repo)
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
    run(["git", "init", "-q"], repo)
    run([sys.executable, "-m", "dvc", "init", "-q"], repo)
    run([sys.executable, "-m", "dvc", "repro"], repo)
    return repo


def test_repro_builds_instructions_trajectories_and_metrics(repo):
    envs = yaml.safe_load((repo / "params.yaml").read_text())["envs"]
    counts = json.loads((repo / "data/metrics/instructions.json").read_text())
    assert counts == {env: {"train": 3, "eval": 2} for env in envs}
    traj = json.loads((repo / "data/metrics/trajectories.json").read_text())
    assert {env: traj[env]["attempted"] for env in envs} == dict.fromkeys(envs, 2)
    assert all(traj[env]["success"] == 1.0 for env in envs)
    for env in envs:
        convs = json.loads((repo / f"data/agenttraj/{env}.json").read_text())
        assert len(convs) == 2
        turns = convs[0]["conversations"]
        assert [t["from"] for t in turns[:3]] == ["human", "gpt", "human"] and turns[-1]["from"] == "gpt"
        assert all(t["loss"] is True and t["value"].startswith("Thought: ") for t in turns[3::2])
        assert all("\nAction: " in t["value"] for t in turns[3::2])
    assert (repo / "dvc.lock").exists()


def test_init_model_builds_a_loadable_model_from_the_pipeline_text(repo):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(repo / "data/models/init")
    model = AutoModelForCausalLM.from_pretrained(repo / "data/models/init")
    metrics = json.loads((repo / "data/metrics/init_model.json").read_text())
    assert metrics["vocab"] == len(tok) == model.config.vocab_size <= 400
    assert metrics["parameters"] == sum(p.numel() for p in model.parameters())
    assert metrics["corpus_texts"] > 0 and model.config.hidden_size == 16


def test_sft_trains_the_initial_model_and_writes_its_curve(repo):
    from transformers import AutoModelForCausalLM

    metrics = json.loads((repo / "data/metrics/sft.json").read_text())
    sft_envs = yaml.safe_load((repo / "params.yaml").read_text())["sft"]["envs"]
    assert metrics["episodes"] == 2 * len(sft_envs)  # trajectories.tasks is 2 per environment here
    curve = (repo / "data/plots/sft.csv").read_text().splitlines()
    assert curve[0] == "step,loss,lr" and len(curve) > 1
    trained = AutoModelForCausalLM.from_pretrained(repo / "data/models/sft")
    assert trained.config.hidden_size == 16


def evaluation(repo):
    return {p.stem: json.loads(p.read_text()) for p in (repo / "data/metrics/evaluate").glob("*.json")}


def test_evaluate_stores_every_episode_and_its_metrics_agree_with_sql(repo):
    metrics = evaluation(repo)
    assert set(metrics) == {"init", "sft", "evol1", "evol2", "rl", "control"} and set(metrics["sft"]) == {
        "maze",
        "wordle",
    }
    # agents trained from SFT play where they trained (evaluate.derived): AgentEvol's and RL's tasks are maze's
    assert all(set(metrics[p]) == {"maze"} for p in ("evol1", "evol2", "rl", "control"))
    for policy in metrics:
        for env in metrics[policy]:
            query = (
                f"select count(*) filter (sample = 0), count(*) filter (sample = 1), "
                f"avg(success) filter (sample = 0) from episodes "
                f"where stage = 'evaluate' and policy = '{policy}' and env = '{env}'"
            )
            greedy, sampled, success = connect(repo / "data").execute(query).fetchone()
            assert greedy == sampled == 2  # the eval split has 2 tasks here, k = 1
            assert metrics[policy][env]["all"]["success"] == pytest.approx(success)
            assert "pass@1" in metrics[policy][env]["all"]
            speed = metrics[policy][env]["all"]
            assert speed["episodes_per_s"] > 0 and speed["steps_per_s"] >= speed["episodes_per_s"]
    empty = (
        connect(repo / "data")
        .execute(
            "select count(*) from turns join episodes using (episode_id) "
            "where stage = 'evaluate' and role = 'assistant' and len(token_ids) = 0"
        )
        .fetchone()
    )
    assert empty == (0,)  # every evaluation reply keeps its sampled ids
    unique = (
        connect(repo / "data")
        .execute("select count(*) = count(distinct episode_id) from episodes")
        .fetchone()
    )
    assert unique == (True,)  # two policies on the same tasks: the id names the policy
    before = {p: p.stat().st_mtime_ns for p in (repo / "data/rollouts/evaluate").rglob("*.parquet")}
    run([sys.executable, "-m", "stages.evaluate", "sft"], repo)  # same settings and weights: nothing replayed
    assert before == {p: p.stat().st_mtime_ns for p in (repo / "data/rollouts/evaluate").rglob("*.parquet")}


def test_sql_answers_one_row_per_environment(repo):
    envs = yaml.safe_load((repo / "params.yaml").read_text())["envs"]
    out = run(
        [sys.executable, "-m", "gymflow", "sql", "select env, count(*) as n from episodes group by env"], repo
    )
    assert sorted(line.split("│")[1].strip() for line in out.splitlines() if line.count("│") == 3) == sorted(
        envs
    )


def test_interrupted_run_resumes_only_missing_environments(repo):
    envs = yaml.safe_load((repo / "params.yaml").read_text())["envs"]
    (repo / f"data/rollouts/trajectories/{envs[0]}.episodes.parquet").unlink()
    out = run([sys.executable, "-m", "stages.trajectories"], repo)
    skipped = {line.split(":")[0] for line in out.splitlines() if "up to date, skipped" in line}
    assert skipped == set(envs[1:])
    assert (repo / f"data/rollouts/trajectories/{envs[0]}.episodes.parquet").exists()


def test_prefect_flow_runs_the_stages_with_heavy_ones_tagged_and_posts_the_table(repo):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import TaskRunSort
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import HEAVY, RL, STAGES, pipeline

    async def task_runs():
        async with get_client() as client:
            return await client.read_task_runs(limit=100, sort=TaskRunSort.EXPECTED_START_TIME_ASC)

    async def flow_runs():
        async with get_client() as client:
            return await client.read_flow_runs(limit=50)

    with prefect_test_harness():
        rows = pipeline(repo=str(repo))
        runs = asyncio.run(task_runs())
        flows = asyncio.run(flow_runs())
    assert {(r["policy"], r["env"], r["success"]) for r in rows} == {
        (p, e, m["all"]["success"]) for p, envs in evaluation(repo).items() for e, m in envs.items()
    }
    tags = {
        r.name.split("-", 1)[1].rsplit("-", 1)[0]: set(r.tags) for r in runs if r.name.startswith("repro-")
    }
    steps = {
        f"{step}@{name}" for step in ("explore", "learn", "evaluate_evol") for name in ("evol1", "evol2")
    }
    assert set(tags) == set(STAGES) | steps | {"plot_evol"} | set(RL)
    assert all(("gpu" in tags[s]) == (s in HEAVY or s in steps) for s in tags)
    iterations = [r.name for r in flows if r.name.startswith("iteration ")]
    assert sorted(iterations) == ["iteration evol1", "iteration evol2"]


def test_agentevol_explores_with_each_iterations_agent_and_learns_from_what_the_filter_keeps(repo):
    import csv

    import pyarrow.parquet as pq

    db = connect(repo / "data")
    explored = db.execute(
        "select iteration, policy, env, count(*), count(distinct task_id) from episodes "
        "where stage = 'explore' group by all order by all"
    ).fetchall()
    # maze: all 3 train tasks, textcraft: 2 drawn of 3, 2 samples each; iteration 2 explores with evol1
    assert explored == [
        (1, "sft", "maze", 6, 3),
        (1, "sft", "textcraft", 4, 2),
        (2, "evol1", "maze", 6, 3),
        (2, "evol1", "textcraft", 4, 2),
    ]
    sft_envs = yaml.safe_load((repo / "params.yaml").read_text())["sft"]["envs"]
    for index, name in enumerate(["evol1", "evol2"], start=1):
        successes = db.execute(
            f"select count(*) from episodes where stage = 'explore' and iteration = {index} and success = 1"
        ).fetchone()[0]
        kept = pq.read_table(repo / f"data/evol/{name}.kept.parquet")
        assert kept.num_rows == successes
        learned = json.loads((repo / f"data/metrics/learn/{name}.json").read_text())
        # epochs 1, one pass per environment here: the SFT data (2 per env) plus the kept episodes
        assert learned["episodes"] == 2 * len(sft_envs) + successes and learned["start"] == "sft"
    plot = list(csv.DictReader((repo / "data/plots/evol.csv").open()))
    metrics = evaluation(repo)
    assert [(r["iteration"], r["policy"]) for r in plot] == [("0", "sft"), ("1", "evol1"), ("2", "evol2")]
    assert all(float(r["maze"]) == metrics[r["policy"]]["maze"]["all"]["success"] for r in plot)


def test_compare_pairs_each_method_with_its_baseline_on_the_same_held_out_tasks(repo):
    from gymflow.eval.compare import greedy_success, paired

    compare = json.loads((repo / "data/metrics/compare.json").read_text())
    bf16 = json.loads((repo / "data/metrics/sft.json").read_text())["bf16"]
    assert compare.pop("cpu") and compare.pop("precision") == ("bf16" if bf16 else "fp32")
    assert set(compare) == {"evol2_vs_control", "evol2_vs_sft", "control_vs_sft", "rl_vs_sft"}
    rollouts = repo / "data/rollouts/evaluate"
    for pair, by_env in compare.items():
        method, baseline = pair.split("_vs_")
        for env, found in by_env.items():
            again = paired(greedy_success(rollouts, method, env), greedy_success(rollouts, baseline, env))
            assert found["n"] == again.n == len(greedy_success(rollouts, "sft", env)) > 0
            assert found["mean"] == pytest.approx(again.mean) and found["se"] == pytest.approx(again.se)
    table = (repo / "data/compare/default.md").read_text()
    assert table.startswith("| method | baseline | env |") and "training seconds: sft " in table


def test_a_change_to_one_iterations_settings_leaves_the_earlier_ones_alone(repo):
    original = (repo / "params.yaml").read_text()
    params = yaml.safe_load(original)
    params["evol"]["iterations"]["evol2"]["temperature"] = 1.3
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    try:
        out = run([sys.executable, "-m", "dvc", "status"], repo)
    finally:
        (repo / "params.yaml").write_text(original)
    changed = {
        line.rstrip(":") for line in out.splitlines() if line.endswith(":") and not line.startswith("\t")
    }
    # the plot and the comparison read the iterations' names, the control the last one's overrides (its lr);
    # `params` checks the whole file, and its output does not change
    assert changed == {"params", "explore@evol2", "learn@evol2", "plot_evol", "control", "compare"}


def test_learn_from_init_starts_from_the_initial_weights_and_last_from_the_explorer(repo):
    from transformers import AutoModelForCausalLM

    def weights(name):
        return AutoModelForCausalLM.from_pretrained(repo / "data/models" / name).state_dict()

    def close(a, b):
        return all(torch.allclose(a[k], b[k], atol=1e-20) for k in a)

    import torch

    original = (repo / "params.yaml").read_text()
    params = yaml.safe_load(original)
    try:
        for start, expected in [("init", "init"), ("last", "evol1")]:
            params["evol"] |= {
                "learn_from": start,
                "lr": 1e-30,
            }  # a step this small leaves the start unchanged
            (repo / "params.yaml").write_text(yaml.safe_dump(params))
            run([sys.executable, "-m", "stages.learn", "evol2"], repo)
            learned = weights("evol2")
            assert close(learned, weights(expected))
            assert not close(learned, weights("sft"))
    finally:
        (repo / "params.yaml").write_text(original)


def test_rl_trains_from_the_sft_agent_and_records_every_iteration(repo):
    import csv

    db = connect(repo / "data/rollouts/rl")
    rows = db.execute(
        "select iteration, count(*), max(horizon), count(distinct task_id) from episodes group by 1 order by 1"
    ).fetchall()
    assert rows == [(1, 4, 2, 2), (2, 4, 3, 2)]
    curve = list(csv.DictReader((repo / "data/plots/rl.csv").open()))
    assert [r["iteration"] for r in curve] == ["1", "2"] and float(curve[0]["success_maze"]) >= 0
    summary = json.loads((repo / "data/metrics/rl.json").read_text())
    assert summary["algorithm"] == "loop" and summary["episodes"] == 8
    status = run([sys.executable, "-m", "dvc", "status", "rl"], repo)
    assert "changed" not in status


def test_every_plot_column_dvc_yaml_names_is_written(repo):
    """dvc.yaml's plots name columns the stages wrote here. Per-environment columns (rl.csv's success_<env>,
    evol.csv's <env>) are named for the default params.yaml's environments, of which this run has fewer: they
    are checked as this run's columns with the environment swapped."""
    import csv

    per_env = {"data/plots/rl.csv": ("rl", "tasks"), "data/plots/evol.csv": ("evaluate", "envs")}
    tiny, default = (
        yaml.safe_load(path.read_text()) for path in (repo / "params.yaml", ROOT / "params.yaml")
    )

    def columns(path: str) -> set[str]:
        with (repo / path).open() as f:
            header = next(csv.reader(f))
        if path not in per_env:
            return set(header)
        section, key = per_env[path]
        here, there = list(tiny[section][key]), list(default[section][key])
        fixed = {c for c in header if not any(env in c for env in here)}
        return fixed | {c.replace(env, other) for c in header for env in here if env in c for other in there}

    dvc = yaml.safe_load((repo / "dvc.yaml").read_text())
    named = []  # (file, column)
    for plot in dvc["plots"]:
        (spec,) = plot.values()
        for path, ys in spec["y"].items():
            named += [(path, spec["x"])] + [(path, y) for y in ([ys] if isinstance(ys, str) else ys)]
    for stage in dvc["stages"].values():
        for entry in stage.get("do", stage).get("plots", []):
            if isinstance(entry, str):  # a plot file with no axes of its own (a top-level plot draws it)
                continue
            (path, spec), names = next(iter(entry.items())), list(tiny["evol"]["iterations"])
            for rendered in {path.replace("${key}", name) for name in names}:
                named += [(rendered, spec[axis]) for axis in ("x", "y") if axis in spec]
    assert len(named) > 10
    missing = [(path, column) for path, column in named if column not in columns(path)]
    assert not missing, f"dvc.yaml plots columns no stage writes: {missing}"


def snapshot(repo: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in (repo / "data").rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "command, key, value, message",
    [
        (["repro"], "instructions.train.maze", -5, "instructions.train.maze: .* or equal to 0, got -5"),
        (
            ["repro", "sft"],
            "sft.batch_size",
            True,
            "sft.batch_size: Input should be a valid integer, got true",
        ),
        (["repro", "rl"], "instructions.train.maze", 10**9, "more than the 100,000 tasks maze can make"),
        (["repro", "rl"], "evaluate.batch_size", 64, "evaluate.batch_size moved to rollout.batch_size"),
        # issue 37: a model that is not here used to cost data/models/init (/nonexistent) or fail at SFT (/etc)
        (["repro", "init_model"], "model.name_or_path", "/nonexistent", "/nonexistent is not a directory"),
        (["repro", "sft"], "model.name_or_path", "/etc", "model.name_or_path /etc holds no config.json"),
        (["repro", "sft"], "sft.lr", float("inf"), "sft.lr: Input should be a finite number, got Infinity"),
        (
            ["exp", "run", "-S", "instructions.train.maze=-5"],
            None,
            None,
            "instructions.train.maze: .*, got -5",
        ),
        (["repro"], "duplicate", "envs: [maze]\n", 'found duplicate key "envs"'),  # DVC's own parser says so
    ],
)
def test_a_bad_params_yaml_stops_dvc_before_any_output_is_deleted(repo, command, key, value, message):
    """DVC deletes a stage's outputs before it runs the stage: the `params` stage runs first and stops it."""
    import re

    original = (repo / "params.yaml").read_text()
    text = original + value if key == "duplicate" else original
    if key and key != "duplicate":
        *path, last = key.split(".")
        params = yaml.safe_load(original)
        section = params
        for part in path:
            section = section[part]
        section[last] = value
        text = yaml.safe_dump(params)
    if command[0] == "exp":  # an experiment starts from a commit
        for git in (
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny", "--allow-empty"],
        ):
            run(["git", *git], repo)
        # and first restores the outputs dvc.lock names (an earlier test retrained evol2 by hand): do it here
        run([sys.executable, "-m", "dvc", "checkout", "-f", "-q"], repo)
    before = snapshot(repo)
    (repo / "params.yaml").write_text(text)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "dvc", *command],
            cwd=repo,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        (repo / "params.yaml").write_text(original)
    assert out.returncode != 0 and re.search(message, out.stderr), out.stderr[-2000:]
    assert "Running stage 'params'" in out.stdout or "duplicate" in message
    assert [line for line in out.stdout.splitlines() if line.startswith("Running stage")] in (
        [],
        ["Running stage 'params':"],
    )
    assert snapshot(repo) == before  # not one output deleted or rewritten


def test_sweet_actor_is_paired_with_a_control_that_takes_as_many_steps_on_the_sft_data(repo, tmp_path):
    from gymflow.eval.compare import greedy_success, paired

    sweet_repo = tmp_path / "repo"
    shutil.copytree(repo, sweet_repo, symlinks=True)
    shutil.copytree(ROOT / "sweet", sweet_repo / "sweet")
    params = yaml.safe_load((sweet_repo / "params.yaml").read_text())
    critic = {"kind": "value", "value_target": "reward"}  # every tiny episode fails: a value head still ranks
    params["sweet"] |= {
        "env": "maze",
        "offline": {"tasks": 3, "samples": 2, "temperature": 1.0},
        "critic": {**params["sweet"]["critic"], "epochs": 1},
        "critics": {"hidden": critic},
        "actor": {"critic": "hidden", "candidates": 4, "turns": 6},
        "dpo": {**params["sweet"]["dpo"], "epochs": 2, "batch_size": 2, "lr": 0.001},
    }
    (sweet_repo / "params.yaml").write_text(yaml.safe_dump(params))
    run([sys.executable, "-m", "dvc", "repro", "sweet/dvc.yaml:compare_sweet"], sweet_repo)

    metrics = sweet_repo / "data/metrics"
    actor = json.loads((metrics / "actor.json").read_text())
    control = json.loads((metrics / "sweet_control.json").read_text())
    batch = params["sft"]["batch_size"]
    assert control["steps"] == actor["steps"] > 0 and control["episodes"] == actor["steps"] * batch
    assert control["start"] == "sft" and control["matches"] == "sweet"
    curve = (sweet_repo / "data/plots/sweet_control.csv").read_text().splitlines()
    assert curve[0].startswith("step") and int(curve[-1].split(",")[0]) == actor["steps"]
    compare = json.loads((metrics / "compare_sweet.json").read_text())
    assert compare.pop("cpu") and compare.pop("precision")
    assert set(compare) == {"sweet_vs_sweet_control", "sweet_vs_sft", "sweet_control_vs_sft"}
    rollouts = sweet_repo / "data/rollouts/evaluate"
    for pair, by_env in compare.items():
        method, baseline = pair.split("_vs_")
        assert list(by_env) == ["maze"]
        again = paired(greedy_success(rollouts, method, "maze"), greedy_success(rollouts, baseline, "maze"))
        assert by_env["maze"]["n"] == again.n == len(greedy_success(rollouts, "sft", "maze")) > 0
        assert by_env["maze"]["mean"] == pytest.approx(again.mean)
    table = (sweet_repo / "data/compare/sweet_actor.md").read_text()
    assert "SWEET-RL's actor" in table and "its steps-matched control on maze" in table


@contextmanager
def ray_head():
    """`ray start --head` as docs/scaling.md starts a cluster (on loopback, its own process group), until the
    block ends; then every process of that cluster is stopped."""
    ray = Path(sys.executable).parent / "ray"
    port = free_port()
    cmd = [
        str(ray),
        "start",
        "--head",
        "--port",
        str(port),
        "--num-cpus",
        "2",
        "--node-ip-address",
        "127.0.0.1",
    ]
    cmd += ["--include-dashboard=false", "--disable-usage-stats", "--block"]
    head = subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        # Up once "auto" names it (ray start records its address; until then "auto" finds an older record) and a
        # driver joins it by "auto" as the recipe's stage does. Not `ray status`: once any ray.init() on this
        # machine wrote ~/.ray/auth_token, the head wants the token, which `ray status` does not send.
        temp = (
            os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
        )  # where Ray keeps the record
        record = Path(temp) / "ray" / "ray_current_cluster"
        join = [sys.executable, "-c", "import ray; ray.init(address='auto'); ray.shutdown()"]
        deadline = time.monotonic() + 180
        while (
            not (record.exists() and record.read_text().strip().endswith(f":{port}"))
            or subprocess.run(join, env=ENV, capture_output=True, timeout=120).returncode
        ):
            assert head.poll() is None, "ray start --head exited"
            assert time.monotonic() < deadline, "the Ray head did not come up in 3 minutes"
            time.sleep(1)
        yield
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)


def test_the_ray_recipe_plays_on_the_cluster_ray_start_began(repo, tmp_path):
    """docs/scaling.md's Ray recipe as written, at tiny size: `ray start --head`, then `dvc exp run -S
    rollout.engine=ray -S rollout.workers=N -S rollout.ray_address=auto` (here of evaluate@sft alone). With no
    running cluster `auto` fails, so a run that ends has played on the one `ray start` began; its episodes are
    those the stage played in process."""
    ray_repo = tmp_path / "repo"
    shutil.copytree(repo, ray_repo, symlinks=True)
    query = (
        "select e.task_id, e.sample, e.reward, list(t.text order by t.turn), list(t.token_ids order by t.turn) "
        "from episodes e join turns t using (episode_id) where e.stage = 'evaluate' and e.policy = 'sft' "
        "group by all order by all"
    )
    in_process = connect(ray_repo / "data").execute(query).fetchall()
    run(["git", "add", "-A"], ray_repo)
    who = ["-c", "user.name=t", "-c", "user.email=t@localhost"]  # (an earlier test may have committed it all)
    run(["git", *who, "commit", "-qm", "tiny run", "--allow-empty"], ray_repo)
    recipe = ["-S", "rollout.engine=ray", "-S", "rollout.workers=2", "-S", "rollout.ray_address=auto"]
    with ray_head():
        run([sys.executable, "-m", "dvc", "exp", "run", *recipe, "evaluate@sft"], ray_repo)
    played = yaml.safe_load((ray_repo / "params.yaml").read_text())["rollout"]
    assert (played["engine"], played["workers"], played["ray_address"]) == ("ray", 2, "auto")
    assert connect(ray_repo / "data").execute(query).fetchall() == in_process
