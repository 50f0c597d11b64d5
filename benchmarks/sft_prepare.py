"""SFT's data preparation: each distinct row tokenized once (as `train_sft` does) against every row of the mixture.

The default's mixture repeats each environment's episodes by its passes (`sft.envs`: textcraft 30, maze 6, ...),
so most of its rows are repeats. Both ways build TRL's prepared dataset (chat template, assistant labels,
truncation) from a seeded draw of the mixture `sft` trains on, in the same run, and must hold the same rows in the
same order; prints each one's seconds and the ratio.

    python benchmarks/sft_prepare.py [--rows 0] [--seed 0]
Reads data/rollouts/trajectories and data/models/init (`dvc repro init_model`).
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer
from gymflow.rollout.records import config_hash
from gymflow.train.sft import AssistantLossTrainer, mixture, sft_args


def prepared(rows: list, cfg, out: Path) -> Dataset:
    """TRL's preparation of `rows` (what `AssistantLossTrainer` trains on)."""
    return AssistantLossTrainer(
        model=AutoModelForCausalLM.from_pretrained(paths.model("init")),
        args=sft_args(cfg, out),
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(paths.model("init")),
    ).train_dataset


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=0, help="rows drawn from the mixture (0: all of it)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    args = parser.parse_args()
    cfg = load_params().sft
    rows = mixture(paths.TRAJECTORY_ROLLOUTS, cfg.envs)
    if not rows:
        raise SystemExit("no AgentTraj episodes: run `dvc repro init_model` first")
    random.Random(args.seed).shuffle(rows)
    rows = rows[: args.rows or None]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        every = prepared(rows, cfg, Path(tmp) / "every")
        every_s = time.perf_counter() - start

        start = time.perf_counter()
        keys = [config_hash(row) for row in rows]
        place = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        distinct = list({key: row for key, row in zip(keys, rows, strict=True)}.values())
        once = prepared(distinct, cfg, Path(tmp) / "once").select([place[key] for key in keys])
        once_s = time.perf_counter() - start
    if once["input_ids"] != every["input_ids"] or once["labels"] != every["labels"]:
        raise SystemExit("the two preparations differ: the distinct rows do not stand for the mixture")
    table = Table("preparation", "rows tokenized", "seconds", "x every row")
    table.add_row("every row of the mixture", f"{len(rows):,}", f"{every_s:.1f}", "1.00x")
    table.add_row("each distinct row once", f"{len(distinct):,}", f"{once_s:.1f}", f"{every_s / once_s:.2f}x")
    Console().print(table)
    print(
        f"{torch.get_num_threads()} threads on {platform.processor() or platform.machine()}; same rows: yes"
    )


if __name__ == "__main__":
    main()
