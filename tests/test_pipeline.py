"""Smoke run of the DVC pipeline on tiny parameters in a temporary copy of the repository."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gymflow.store.db import connect

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}


def run(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name in ["dvc.yaml", "stages", "gymflow"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    envs = params["envs"]
    params["instructions"]["train"] = dict.fromkeys(envs, 3)
    params["instructions"]["eval"] = dict.fromkeys(envs, 2)
    params["trajectories"]["tasks"] = dict.fromkeys(envs, 2)
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    run(["git", "init", "-q"], repo)
    run([sys.executable, "-m", "dvc", "init", "-q"], repo)
    params["model"] = {**params["model"], "vocab_size": 400, "hidden_size": 16, "intermediate_size": 32}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    sft_envs = dict.fromkeys(params["sft"]["envs"], 1)
    params["sft"] = {**params["sft"], "envs": sft_envs, "batch_size": 2, "bf16": False, "log_every": 1}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    params["evaluate"] = {**params["evaluate"], "envs": ["maze", "wordle"], "k": 1, "max_new_tokens": 8}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    run([sys.executable, "-m", "dvc", "repro", "evaluate"], repo)
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


def test_evaluate_stores_every_episode_and_its_metrics_agree_with_sql(repo):
    metrics = json.loads((repo / "data/metrics/evaluate.json").read_text())
    assert set(metrics) == {"init", "sft"} and set(metrics["sft"]) == {"maze", "wordle"}
    for policy in ("init", "sft"):
        for env in ("maze", "wordle"):
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
    run([sys.executable, "-m", "stages.evaluate"], repo)  # same settings and weights: nothing replayed
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

    from flows.pipeline import HEAVY, STAGES, pipeline

    async def task_runs():
        async with get_client() as client:
            return await client.read_task_runs(limit=50, sort=TaskRunSort.EXPECTED_START_TIME_ASC)

    with prefect_test_harness():
        rows = pipeline(repo=str(repo))
        runs = asyncio.run(task_runs())
    metrics = json.loads((repo / "data/metrics/evaluate.json").read_text())
    assert {(r["policy"], r["env"], r["success"]) for r in rows} == {
        (p, e, m["all"]["success"]) for p, envs in metrics.items() for e, m in envs.items()
    }
    tags = {r.name.split("-", 1)[1].rsplit("-", 1)[0]: set(r.tags) for r in runs}
    assert set(tags) == set(STAGES)
    assert all(("gpu" in tags[s]) == (s in HEAVY) for s in STAGES)
