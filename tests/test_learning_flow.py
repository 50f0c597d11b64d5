"""flows.learning: its overrides turn params.yaml into the valid maze regime for each seed, its table pools the
seeds' paired comparisons, and the pipeline's control and compare stages follow the last AgentEvol iteration."""

import math
import shutil
from pathlib import Path

import yaml
from dvc.utils.hydra import apply_overrides

import flows.learning as learning
from gymflow.config import load_params
from gymflow.eval.compare import Paired, pool


def test_the_overrides_make_params_yaml_the_maze_regime_for_the_seed(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy("params.yaml", path)
    apply_overrides(path, learning.overrides(load_params().model_dump(), 2))
    params = load_params(path)  # every check of stage `params` holds
    assert params.envs == ["maze"] and params.instructions.views == {"maze": "verbal"}
    assert params.trajectories.demonstrators == {"maze": "greedy"} and params.trajectories.tasks == {
        "maze": 2000
    }
    assert params.instructions.eval == {"maze": 1000} and params.evaluate.envs == ["maze"]
    assert params.sft.envs == {"maze": 6} and params.evol.tasks == {"maze": 300} and params.rl.lr == 2e-5
    assert (params.evol.samples, params.evol.keep, params.evol.merge_sft) == (4, "shortest", False)
    assert params.evol.learn_from == "sft" and list(params.evol.iterations) == ["evol1", "evol2"]
    seeds = (params.instructions.seed, params.model.seed, params.sft.seed, params.evol.seed, params.rl.seed)
    assert seeds == (2, 2, 2, 2, 2) and params.rl.tasks == {"maze": 8}


def summary(n, mean, sd, method, baseline):
    return {"n": n, "mean": mean, "sd": sd, "method": method, "baseline": baseline}


def test_the_table_lists_each_seed_and_pools_them():
    runs = {
        "learning-s0": {"compare": {"evol2_vs_control": {"maze": summary(1000, 0.06, 0.35, 0.58, 0.52)}}},
        "learning-s1": {"compare": {"evol2_vs_control": {"maze": summary(1000, 0.02, 0.30, 0.55, 0.53)}}},
        "learning-head": {"compare": {"evol2_vs_control": {"maze": summary(100, 0.5, 0.1, 0.9, 0.4)}}},
    }
    lines = learning.table(runs).splitlines()
    assert lines[2] == "| evol2 vs control | 0 | 0.580 | 0.520 | +0.060 | 0.011 | +5.4 | 1000 |"
    pooled = pool([Paired(1000, 0.06, 0.35, 0.58, 0.52), Paired(1000, 0.02, 0.30, 0.55, 0.53)])
    assert lines[4].startswith("| evol2 vs control | pooled (2) | 0.565 | 0.525 | +0.040 |")
    assert f"| {pooled.se:.3f} |" in lines[4] and pooled.n == 2000
    assert math.isclose(pooled.mean, 0.04) and len(lines) == 6  # the head's run is not a seed
    # between seeds: means 0.06 and 0.02, sd 0.0283, SE 0.02
    assert lines[5] == "| evol2 vs control | between seeds (2) | | | +0.040 | 0.020 | +2.0 | 2 seeds |"


def test_the_curve_counts_the_rows_each_agent_trained_on_after_sft():
    def ev(x):
        return {"maze": {"all": {"success": x}}}

    run = {
        "evaluate/sft": ev(0.5), "evaluate/evol1": ev(0.55), "evaluate/evol2": ev(0.6), "evaluate/control": ev(0.52),
        "learn/evol1": {"episodes": 100}, "learn/evol2": {"episodes": 120}, "control": {"episodes": 120},
    }  # fmt: skip
    rows = learning.curve({"learning-s0": run})
    assert [(r["method"], r["rows"], r["success"]) for r in rows] == [
        ("sft", 0, 0.5), ("agentevol", 100, 0.55), ("agentevol", 120, 0.6), ("control", 120, 0.52)
    ]  # fmt: skip
    assert "<html>" in learning.plot(rows)


def test_control_and_compare_follow_the_last_agentevol_iteration():
    stages = yaml.safe_load(Path("dvc.yaml").read_text())["stages"]
    last = list(load_params().evol.iterations)[-1]
    assert f"data/metrics/learn/{last}.json" in stages["control"]["deps"]
    assert {f"data/rollouts/evaluate/{last}", f"data/metrics/learn/{last}.json"} <= set(
        stages["compare"]["deps"]
    )
    assert "control" in stages["evaluate"]["foreach"]
