"""SFT training throughput: our trainer (TRL's SFTTrainer with the model's own loss) against stock SFTTrainer.

Same model, data, batches and TRL configuration (`sft_args`) in one run; prints training tokens per second
for each, the ratio, and both final losses (they should agree: same loss, same batches). Reads the AgentTraj
episodes and the initial model the pipeline built (`dvc repro init_model`).

    python benchmarks/sft_throughput.py [--env maze] [--episodes 400] [--batch 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from datasets import Dataset
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTTrainer

from gymflow.config import SFTParams
from gymflow.train.sft import AssistantLossTrainer, conversations, sft_args


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="maze")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    data = conversations("data/rollouts/trajectories", [args.env])[: args.episodes]
    if not data:
        raise SystemExit("no AgentTraj episodes: run `dvc repro init_model` first")
    cfg = SFTParams(envs={args.env: 1}, batch_size=args.batch, log_every=10**6)
    tokenizer = AutoTokenizer.from_pretrained("data/models/init")
    table = Table("trainer", "tokens/s", "final loss")
    speed = {}
    for name, cls in [("TRL SFTTrainer", SFTTrainer), ("gymflow (model's own loss)", AssistantLossTrainer)]:
        with tempfile.TemporaryDirectory() as out:
            trainer = cls(
                model=AutoModelForCausalLM.from_pretrained("data/models/init"),
                args=replace(sft_args(cfg, Path(out)), save_strategy="no", disable_tqdm=True),
                train_dataset=Dataset.from_list(data),
                processing_class=tokenizer,
            )
            tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
            start = time.perf_counter()
            result = trainer.train()
            speed[name] = tokens / (time.perf_counter() - start)
            table.add_row(name, f"{speed[name]:.0f}", f"{result.training_loss:.4f}")
    Console().print(table)
    base, ours = speed.values()
    print(f"gymflow / TRL: {ours / base:.2f}x ({args.episodes} {args.env} episodes, batch {args.batch})")


if __name__ == "__main__":
    main()
