"""SFT precision: our trainer in fp32 against bf16 autocast, on this machine, and what `sft.bf16: auto` picks.

bf16 autocast is fast only where the hardware computes bf16 (AVX-512 BF16 or AMX on a CPU, most GPUs); on
an AVX2-only CPU it is emulated. Same model, episodes, batches and TRL configuration (`sft_args`) in one
run; prints training tokens per second for each precision and the ratio. Reads the AgentTraj episodes and
the initial model the pipeline built (`dvc repro init_model`).

    python benchmarks/sft_precision.py [--env maze] [--episodes 100] [--batch 8]
"""

from __future__ import annotations

import argparse

import torch
from rich.console import Console
from rich.table import Table
from sft_throughput import agenttraj_episodes, timed_training  # benchmarks/, on the path as the script's dir

from gymflow.config import SFTParams
from gymflow.train.sft import AssistantLossTrainer, use_bf16


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="maze")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    data = agenttraj_episodes(args.env, args.episodes)
    table = Table("precision", "tokens/s", "final loss")
    speed = {}
    for bf16 in (False, True):
        cfg = SFTParams(envs={args.env: 1}, batch_size=args.batch, log_every=10**6, bf16=bf16)
        speed[bf16], _, loss = timed_training(AssistantLossTrainer, cfg, data)
        table.add_row("bf16 autocast" if bf16 else "fp32", f"{speed[bf16]:.0f}", f"{loss:.4f}")
    Console().print(table)
    print(
        f"bf16 / fp32: {speed[True] / speed[False]:.2f}x on a CPU with {torch.backends.cpu.get_cpu_capability()} "
        f"({args.episodes} {args.env} episodes, batch {args.batch}); sft.bf16 auto picks "
        f"{'bf16' if use_bf16('auto') else 'fp32'} here"
    )


if __name__ == "__main__":
    main()
