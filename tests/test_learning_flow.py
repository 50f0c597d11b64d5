"""flows.learning: its overrides turn params.yaml into the valid maze regime for each seed, its table pools the
seeds' paired comparisons, and the pipeline's control and compare stages follow the last AgentEvol iteration."""

import math
import shutil
from pathlib import Path

import yaml
from dvc.utils.hydra import apply_overrides

import flows.learning as learning
from flows.experiments import overrides as experiment_overrides
from gymflow.config import load_params
from gymflow.eval.compare import Paired, pool


def test_the_overrides_make_params_yaml_the_maze_regime_for_the_seed(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy("params.yaml", path)
    apply_overrides(path, learning.overrides(load_params().model_dump(), "agentevol", 2))
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


def regime(tmp_path, variant):
    path = tmp_path / f"{variant}.yaml"
    shutil.copy("params.yaml", path)
    apply_overrides(path, learning.overrides(load_params().model_dump(), variant, 1))
    return load_params(path)  # every check of stage `params` holds


def test_each_variant_changes_only_what_its_method_needs(tmp_path):
    base = regime(tmp_path, "agentevol")
    rft = regime(tmp_path, "rft")  # one round, every success of 8 samples: AgentEvol's exploration budget
    assert list(rft.evol.iterations) == ["evol2"] and rft.evol.iterations["evol2"].explorer == "sft"
    assert rft.evol.keep == "all" and rft.evol.at("evol2").samples * rft.evol.tasks["maze"] == 2 * 4 * 300
    ei = regime(tmp_path, "ei")
    assert ei.evol.learn_from == "last" and ei.evol.iterations == base.evol.iterations
    for variant, algorithm, iterations in (
        ("loop", "loop", 16),
        ("rloo", "rloo", 16),
        ("grpo", "grpo", 16),
        ("grpo_long", "grpo", 64),  # 4x grpo's episodes, from the same SFT agent
    ):
        rl = regime(tmp_path, variant)
        assert (rl.rl.algorithm, rl.rl.iterations, rl.rl.lr) == (algorithm, iterations, base.rl.lr)
        assert rl.sft == base.sft and rl.evol == base.evol  # the same SFT agent and AgentEvol from the cache
    assert rft.sft == base.sft and rft.instructions == base.instructions and ei.rl == base.rl


def summary(n, mean, sd, method, baseline):
    return {"n": n, "mean": mean, "sd": sd, "method": method, "baseline": baseline}


def test_the_table_lists_each_seed_and_pools_them():
    runs = {
        "learning-s0": {"compare": {"evol2_vs_control": {"maze": summary(1000, 0.06, 0.35, 0.58, 0.52)}}},
        "learning-s1": {"compare": {"evol2_vs_control": {"maze": summary(1000, 0.02, 0.30, 0.55, 0.53)}}},
        "learning-head": {"compare": {"evol2_vs_control": {"maze": summary(100, 0.5, 0.1, 0.9, 0.4)}}},
        "learning-rft-s0": {"compare": {"evol2_vs_control": {"maze": summary(1000, -0.01, 0.2, 0.5, 0.51)}}},
    }
    lines = learning.table(runs).splitlines()
    assert lines[2] == "| agentevol | evol2 vs control | 0 | 0.580 | 0.520 | +0.060 | 0.011 | +5.4 | 1000 |"
    pooled = pool([Paired(1000, 0.06, 0.35, 0.58, 0.52), Paired(1000, 0.02, 0.30, 0.55, 0.53)])
    assert lines[4].startswith("| agentevol | evol2 vs control | pooled (2) | 0.565 | 0.525 | +0.040 |")
    assert f"| {pooled.se:.3f} |" in lines[4] and pooled.n == 2000 and math.isclose(pooled.mean, 0.04)
    # between seeds: means 0.06 and 0.02, sd 0.0283, SE 0.02
    between = "| agentevol | evol2 vs control | between seeds (2) | | | +0.040 | 0.020 | +2.0 | 2 seeds |"
    assert lines[5] == between
    # the head's run is not a seed; RFT's one seed is its own row, with no pooled line
    assert lines[6:] == ["| rft | evol2 vs control | 0 | 0.500 | 0.510 | -0.010 | 0.006 | -1.6 | 1000 |"]


def test_best_of_n_plays_two_critics_and_reports_their_pairs_at_the_largest_n(tmp_path):
    bon = regime(tmp_path, "bon")
    assert list(bon.sweet.critics) == ["hidden", "nohidden"] and bon.sweet.env == "maze"
    assert bon.sweet.best_of_n.ns[-1] == learning.BON_N and bon.sft == regime(tmp_path, "agentevol").sft
    assert (bon.sweet.offline.tasks, bon.sweet.critic.epochs) == (
        500,
        1,
    ) and bon.sweet.critic.lr == 1e-4  # kept
    at = {"2": summary(300, 0.5, 0.5, 0.9, 0.4), str(learning.BON_N): summary(300, 0.1, 0.4, 0.5, 0.4)}
    lines = learning.table({"learning-bon-s0": {"best_of_n_paired": {"hidden_vs_random": at}}}).splitlines()
    assert (
        lines[2]
        == f"| bon | hidden vs random (N={learning.BON_N}) | 0 | 0.500 | 0.400 | +0.100 | 0.023 | +4.3 | 300 |"
    )


def test_best_of_n_with_value_critics_changes_only_the_critics_kind(tmp_path):
    bon, value = regime(tmp_path, "bon"), regime(tmp_path, "bonvalue")
    assert (value.sweet.critic.kind, value.sweet.critic.value_target) == ("value", "success")
    assert bon.sweet.critic.kind == "advantage" and value.sweet.critic.epochs == bon.sweet.critic.epochs
    assert value.sweet.critics == bon.sweet.critics and value.sweet.offline == bon.sweet.offline
    assert value.sweet.best_of_n == bon.sweet.best_of_n and value.sft == bon.sft
    assert learning.TARGETS["bonvalue"] == learning.TARGETS["bon"]


def test_the_curve_counts_the_rows_each_agent_trained_on_after_sft():
    def ev(x):
        return {"maze": {"all": {"success": x}}}

    run = {
        "evaluate/sft": ev(0.5), "evaluate/evol1": ev(0.55), "evaluate/evol2": ev(0.6), "evaluate/control": ev(0.52),
        "learn/evol1": {"episodes": 100}, "learn/evol2": {"episodes": 120}, "control": {"episodes": 120},
    }  # fmt: skip
    run |= {"evaluate/rl": ev(0.49), "rl": {"episodes": 384, "algorithm": "loop"}}
    rl = {"evaluate/sft": ev(0.5), "evaluate/rl": ev(0.47), "rl": {"episodes": 1536, "algorithm": "rloo"}}
    long = {"evaluate/sft": ev(0.5), "evaluate/rl": ev(0.53), "rl": {"episodes": 3072, "algorithm": "grpo"}}
    rows = learning.curve({"learning-s0": run, "learning-rloo-s0": rl, "learning-grpo_long-s0": long})
    assert [(r["method"], r["rows"], r["success"]) for r in rows] == [
        ("sft", 0, 0.5), ("agentevol", 100, 0.55), ("agentevol", 120, 0.6), ("control (agentevol)", 120, 0.52),
        ("rl loop", 384, 0.49), ("rl rloo", 1536, 0.47), ("rl grpo_long", 3072, 0.53),
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


def test_overrides_set_nested_dicts_key_by_key_and_add_what_params_lack():
    params = {
        "evol": {"iterations": {"evol1": {"explorer": "sft"}, "evol2": {"explorer": "evol1"}}},
        "rl": {},
    }
    args = experiment_overrides(params, {"evol.iterations": {"evol1": {"explorer": "sft", "samples": 8}}})
    assert args == [
        "~evol.iterations.evol2",
        "evol.iterations.evol1.explorer=sft",
        "+evol.iterations.evol1.samples=8",
    ]
    assert experiment_overrides(params, {"rl.lr": 2e-5, "rl.tasks": {"maze": 8}}) == [
        "+rl.lr=2e-05",
        "+rl.tasks={maze:8}",
    ]


def test_finished_experiments_are_recorded_in_git_and_read_back_when_dvc_no_longer_has_them(
    tmp_path, monkeypatch
):
    metrics = {"compare": {"rl_vs_sft": {"maze": {"n": 3, "mean": 0.1}}}}
    shown = {"learning-loop-s1": metrics, "learning-head": {"compare": {}}, "other-exp": metrics}
    monkeypatch.setattr(learning, "finished", lambda repo, head, prefix: shown)
    first = learning.recorded(str(tmp_path))
    assert first == {"learning-loop-s1": metrics}  # the flow's own experiments only
    assert sorted(p.name for p in (tmp_path / learning.RUNS).iterdir()) == ["learning-loop-s1.json"]
    monkeypatch.setattr(learning, "finished", lambda repo, head, prefix: {})  # a fresh clone: no DVC refs
    assert learning.recorded(str(tmp_path)) == first


def test_sweet_trains_the_actor_from_bons_hidden_critic_and_reports_it_against_its_control(tmp_path):
    bon, sweet = regime(tmp_path, "bon"), regime(tmp_path, "sweet")
    assert list(sweet.sweet.critics) == ["hidden"] and sweet.sweet.actor.critic == "hidden"
    assert sweet.sweet.critic == bon.sweet.critic and sweet.sweet.offline == bon.sweet.offline
    assert sweet.sft == bon.sft and learning.TARGETS["sweet"] == ("sweet/dvc.yaml:compare_sweet",)
    pairs = {"sweet_vs_sweet_control": {"maze": summary(1000, 0.03, 0.3, 0.5, 0.47)}}
    lines = learning.table({"learning-sweet-s2": {"compare_sweet": pairs}}).splitlines()
    assert lines[2:] == [
        "| sweet | sweet vs sweet_control | 2 | 0.500 | 0.470 | +0.030 | 0.009 | +3.2 | 1000 |"
    ]
