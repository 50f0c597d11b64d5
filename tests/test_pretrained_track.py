"""The pretrained track's DVC experiment: its overrides turn params.yaml into a valid maze-only SmolLM2 run, and
its table reads the experiments' metrics."""

import shutil

from dvc.utils.hydra import apply_overrides

import flows.pretrained_track as track
from gymflow.config import load_params


def test_the_overrides_make_params_yaml_a_valid_maze_only_track_for_the_seed(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy("params.yaml", path)
    apply_overrides(path, track.overrides(load_params().model_dump(), 1, "/models/smollm2"))
    params = load_params(path)  # every check of stage `params` holds
    assert params.envs == ["maze"] and params.model.name_or_path == "/models/smollm2"
    assert params.sft.envs == {"maze": 1} and params.sft.seed == 1 and params.sft.lora_rank == 0
    assert params.evol.tasks == {"maze": 150} and list(params.evol.iterations) == ["evol1"]
    assert params.evol.seed == 1 and params.evol.lr is None and params.evol.learn_from == "init"
    assert params.instructions.train["maze"] == 600 and "wordle" not in params.instructions.train
    assert params.evaluate.envs == ["maze"] and params.rl.tasks == {"maze": 8}
    assert params.sft.lr == 2e-4 and params.rollout.max_new_tokens == 48


def test_the_loop_run_is_the_seed_0_track_then_rl_from_its_sft_agent(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy("params.yaml", path)
    apply_overrides(path, track.loop_overrides(load_params().model_dump(), "/models/smollm2"))
    params = load_params(path)
    assert params.envs == ["maze"] and params.sft.seed == 0 and params.sft.lr == 2e-4
    assert params.rl.start == "sft" and params.rl.algorithm == "loop" and params.rl.tasks == {"maze": 8}
    assert params.rl.iterations == 4 and params.rl.lr == 1e-5 and params.rl.max_tokens == 4096


def test_a_dict_the_params_lack_is_added_and_keys_dropped_from_one_they_have_are_removed():
    params = {"sft": {"envs": {"maze": 3, "babyai": 5}}, "evol": {}}
    args = track.overrides(params, 0, "m")
    assert "~sft.envs.babyai" in args and "sft.envs.maze=1" in args
    assert "+evol.tasks={maze:150}" in args and "+evol.iterations={evol1:{explorer:sft}}" in args
    assert "+envs=[maze]" in args and "+evol.lr=null" in args and "+model.name_or_path=m" in args


def evaluation(success):
    return {"maze": {"all": {"success": success}}}


def test_the_table_has_a_row_per_finished_seed_and_their_mean_with_the_range():
    runs = {
        "pretrained-s0": {
            "evaluate/sft": evaluation(0.3),
            "evaluate/evol1": evaluation(0.4),
            "explore/evol1": {"maze": {"success": 0.25}},
            "learn/evol1": {"kept": {"maze": 37}},
        },
        "pretrained-s1": {"evaluate/sft": evaluation(0.2), "evaluate/evol1": evaluation(0.1)},
        "pretrained-head": {"evaluate/sft": evaluation(0.9)},  # the default pipeline, not the track
    }
    lines = track.table(runs).splitlines()
    assert lines[2] == "| 0 | 0.30 | 0.40 | 0.25 | 37 |"
    assert lines[3] == "| 1 | 0.20 | 0.10 | - | - |"
    assert lines[4] == "| mean (range) | 0.25 (0.20-0.30) | 0.25 (0.10-0.40) | | |"


def test_the_loop_run_gets_its_own_table_under_the_seeds():
    runs = {
        "pretrained-s0": {"evaluate/sft": evaluation(0.3), "evaluate/evol1": evaluation(0.4)},
        "pretrained-loop-s0": {
            "evaluate/sft": evaluation(0.3),
            "evaluate/rl": evaluation(0.35),
            "rl": {"success_first": 0.1, "success_last": 0.2, "iterations": 4},
        },
    }
    lines = track.table(runs).splitlines()
    assert lines[-4:] == [
        "",
        "| seed | SFT agent | LOOP (rl) | training success, first -> last iteration | iterations |",
        "|---|---|---|---|---|",
        "| 0 | 0.30 | 0.35 | 0.1 -> 0.2 | 4 |",
    ]
    del runs["pretrained-loop-s0"]["evaluate/rl"]  # still running, or failed: no row
    assert "LOOP" not in track.table(runs)
