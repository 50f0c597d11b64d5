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
from transformers import AutoModelForCausalLM
from trl import SFTTrainer

from gymflow import paths
from gymflow.config import SFTParams
from gymflow.models.build import load_tokenizer
from gymflow.train.sft import AssistantLossTrainer, conversations, sft_args


def agenttraj_episodes(env: str, episodes: int) -> list:
    """The first `episodes` AgentTraj conversations of `env`, as the pipeline wrote them."""
    data = conversations(paths.TRAJECTORY_ROLLOUTS, [env])[:episodes]
    if not data:
        raise SystemExit("no AgentTraj episodes: run `dvc repro init_model` first")
    return data


def timed_training(
    trainer_cls: type[SFTTrainer], cfg: SFTParams, data: list, **changes
) -> tuple[float, float, float]:
    """One pass of `trainer_cls` from the initial model over `data` under `sft_args(cfg)` with `changes` to its
    arguments: real (unpadded) training tokens per second, padded ids per real one, final loss."""
    with tempfile.TemporaryDirectory() as out:
        tokenized = "input_ids" in data[0]  # as train_sft decides
        args = replace(sft_args(cfg, Path(out), tokenized), save_strategy="no", disable_tqdm=True, **changes)
        trainer = trainer_cls(
            model=AutoModelForCausalLM.from_pretrained(paths.model("init")),
            args=args,
            train_dataset=Dataset.from_list(data),
            processing_class=load_tokenizer(paths.model("init")),
        )
        padded = sum(batch["input_ids"].numel() for batch in trainer.get_train_dataloader())
        real = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
        start = time.perf_counter()
        loss = trainer.train().training_loss
        return real / (time.perf_counter() - start), padded / real, loss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="maze")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    data = agenttraj_episodes(args.env, args.episodes)
    cfg = SFTParams(envs={args.env: 1}, batch_size=args.batch, log_every=10**6)
    table = Table("trainer", "tokens/s", "final loss")
    speed = {}
    for name, cls in [("TRL SFTTrainer", SFTTrainer), ("gymflow (model's own loss)", AssistantLossTrainer)]:
        speed[name], _, loss = timed_training(cls, cfg, data)
        table.add_row(name, f"{speed[name]:.0f}", f"{loss:.4f}")
    Console().print(table)
    base, ours = speed.values()
    print(f"gymflow / TRL: {ours / base:.2f}x ({args.episodes} {args.env} episodes, batch {args.batch})")


if __name__ == "__main__":
    main()
