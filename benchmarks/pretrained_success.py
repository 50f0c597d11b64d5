"""Greedy success of a model on maze eval tasks, zero-shot (our ReAct system prompt, as AgentEval plays it) or
with `--shots N` expert episodes of train tasks written into the system prompt, and optionally after SFT (LoRA,
or full with `--lora-rank 0`) on the first `--sft-episodes` maze AgentTraj episodes.

    python benchmarks/pretrained_success.py --model data/models/smollm2 [--tasks 20] [--shots 1] [--sft-episodes 0]
The tasks are `build_splits(maze, 0, --tasks, seed=0)["eval"]`; replies are cut at `--new-tokens` tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from sft_throughput import agenttraj_episodes

from gymflow import paths
from gymflow.config import EvalParams, RolloutParams, SFTParams
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits
from gymflow.eval.agenteval import evaluate_policy
from gymflow.models.build import resolve
from gymflow.rollout.expert import run_expert
from gymflow.train.sft import train_sft


def with_examples(shots: int) -> None:
    """Maze's system prompt followed by `shots` whole expert episodes of train tasks (observations and ReAct
    replies), as a few-shot prompt shows them. Patched on the class: this process's rollouts use it."""
    if not shots:
        return
    maze = ENVS["maze"]
    examples = []
    for i, task in enumerate(build_splits(maze, shots, 0, seed=1)["train"]):
        episode = run_expert(maze(), task)
        lines = [f"{m.role.capitalize()}: {m.text}" for m in episode.messages if m.role != "system"]
        examples.append(f"Example {i + 1}:\n" + "\n".join(lines))
    prompt = maze.spec.system_prompt + "\n\n" + "\n\n".join(examples) + "\n\nNow the real task."
    maze.spec = dataclasses.replace(maze.spec, system_prompt=prompt)


def success(name: str, model: str, tasks: list, new_tokens: int, out: Path) -> None:
    start = time.perf_counter()
    play = RolloutParams(max_new_tokens=new_tokens, batch_size=len(tasks))
    result = evaluate_policy(name, model, {"maze": tasks}, EvalParams(envs=["maze"], k=0), play, out)["maze"]
    print(f"{name}: {result['all']} ({time.perf_counter() - start:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(paths.model("smollm2")))
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--shots", type=int, default=0, help="expert episodes in the system prompt")
    parser.add_argument("--sft-episodes", type=int, default=0, help="0: zero-shot only")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--skip-zero-shot", action="store_true")
    parser.add_argument(
        "--out", type=Path, help="keep the SFT model and the rollouts here (default: a temporary folder)"
    )
    args = parser.parse_args()
    tasks = build_splits(ENVS["maze"], 0, args.tasks, seed=0)["eval"]
    with_examples(args.shots)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        if not args.skip_zero_shot:
            success(f"{args.shots}-shot", resolve(args.model), tasks, args.new_tokens, out)
        if args.sft_episodes:
            data = agenttraj_episodes("maze", args.sft_episodes)
            cfg = SFTParams(
                envs={"maze": 1}, batch_size=args.batch, lr=args.lr, lora_rank=args.lora_rank, max_length=1024
            )
            metrics = train_sft(resolve(args.model), out / "sft", data, cfg, out / "sft.csv")
            print(f"LoRA SFT: {metrics}", flush=True)
            success(
                f"after SFT on {args.sft_episodes} episodes", str(out / "sft"), tasks, args.new_tokens, out
            )


if __name__ == "__main__":
    main()
