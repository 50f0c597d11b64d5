"""SFT on the default's own mixture: where the stage's time goes, and what the alternatives cost, in one run.

A seeded draw of rows from the mixture stage `sft` trains on (`sft.envs` of params.yaml, as `mixture` builds
it), trained for one pass under each variant from the same initial model, in the same run:
- as the stage trains (`sft_args`);
- with the collator's padding mask passed to the model, as before `causal_mask` (a right-padded batch needs none);
- with the model's own loss (`labels=`), whose LM head projects every position, the context's included;
- with activation checkpointing (TRL's default; `sft.activation_checkpointing`, off for the 0.8M-parameter model);
- in fp32 and in bf16 autocast (what `sft.bf16` picks on this machine is printed).
Prints per variant: training tokens per second (real tokens, no padding), the padded tokens per real token the
length-grouped batches cost, the final loss, and each variant's speed over the stage's.

    python benchmarks/sft_mixture.py [--rows 400] [--seed 0] [--repeats 1]
Reads data/rollouts/trajectories and data/models/init (`dvc repro init_model`).
"""

from __future__ import annotations

import argparse
import platform
import random
from contextlib import nullcontext
from unittest import mock

import torch
from rich.console import Console
from rich.table import Table
from sft_throughput import timed_training  # benchmarks/, on the path as the script's dir

from gymflow import paths
from gymflow.config import load_params
from gymflow.train.sft import AssistantLossTrainer, causal_mask, mixture, use_bf16


class EveryPositionLoss(AssistantLossTrainer):
    """The stage's loss before its LM head ran on the labelled positions alone: the model's own (one process)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(
            input_ids=inputs["input_ids"],
            attention_mask=causal_mask(inputs.get("attention_mask")),
            labels=inputs["labels"],
            num_items_in_batch=num_items_in_batch,
        )
        return (outputs.loss, outputs) if return_outputs else outputs.loss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=400, help="rows drawn from the mixture (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds over the variants, each a range min-max (default 1)"
    )
    args = parser.parse_args()
    sft = load_params().sft
    rows = mixture(paths.TRAJECTORY_ROLLOUTS, sft.envs)
    if not rows:
        raise SystemExit("no AgentTraj episodes: run `dvc repro trajectories` first")
    data = random.Random(args.seed).sample(rows, min(args.rows, len(rows)))
    cfg = sft.model_copy(update={"log_every": 10**6})
    variants = {
        "as the stage trains": {},
        "the padding mask passed": {},
        "the LM head on every position": {},
        "activation checkpointing": {"activation_checkpointing": True},
        "fp32": {"bf16": False},
        "bf16 autocast": {"bf16": True},
    }
    speeds: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants}  # each round's, over its stage speed
    losses: dict[str, tuple[float, float]] = {}  # padded / real and the final loss (the same every round)
    for _ in range(args.repeats):  # round-robin: a slow spell of a shared machine hits every variant alike
        for name, changes in variants.items():
            keep = mock.patch("gymflow.train.sft.causal_mask", lambda mask: mask)
            with keep if name == "the padding mask passed" else nullcontext():
                trainer = (
                    EveryPositionLoss if name == "the LM head on every position" else AssistantLossTrainer
                )
                speed, padding, loss = timed_training(trainer, cfg, data, **changes)
            speeds[name].append(speed)
            losses[name] = (padding, loss)
            ratios[name].append(speed / speeds["as the stage trains"][-1])
    table = Table("variant", "tokens/s", "padded / real", "final loss", "speed / stage's")
    for name in variants:
        table.add_row(
            name,
            _span(speeds[name], "{:.0f}"),
            f"{losses[name][0]:.2f}",
            f"{losses[name][1]:.4f}",
            _span(ratios[name], "{:.2f}x"),
        )
    Console().print(table)
    cpu = platform.processor() or platform.machine()
    print(
        f"{len(data)} rows of the sft mixture, batch {cfg.batch_size}, {torch.get_num_threads()} threads on "
        f"{cpu}; sft.bf16 {cfg.bf16} picks {'bf16' if use_bf16(cfg.bf16) else 'fp32'} here"
    )


def _span(values: list[float], fmt: str) -> str:
    """One value, or the range min-max of the rounds."""
    low, high = min(values), max(values)
    return fmt.format(low) if len(values) == 1 else f"{fmt.format(low)}-{fmt.format(high)}"


if __name__ == "__main__":
    main()
