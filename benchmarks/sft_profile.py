"""Where SFT's time goes, per environment of the default's mixture: tokens, system prompts, attention.

For each environment of `sft.envs`: its AgentTraj episodes' mean tokens, the tokens it brings to the mixture (its
passes included) and their share, the share of those tokens that are the system prompt (the same first message
in every episode of the environment, context the loss never reads), and a seeded draw of `--rows` of its episodes
trained for one pass as stage `sft` trains (`sft_args`, `AssistantLossTrainer`) from the initial model: training
tokens per second, and under torch.profiler the split of the operators' CPU time between attention (SDPA's
kernels, forward and backward), matrix products (the projections, the MLP and the LM head) and everything else
(norms, activations, rotary embeddings, the optimizer, the loss). Its last lines weigh each environment by its
mixture tokens over its measured rate: the estimated share of SFT's training time each environment takes, and
attention's share of the whole.

    python benchmarks/sft_profile.py [--rows 48] [--seed 0]
    OMP_NUM_THREADS=1 python benchmarks/sft_profile.py      # as each of the stage's processes trains on a CPU
Reads data/rollouts/trajectories and data/models/init (`dvc repro init_model`).
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
from datasets import Dataset
from rich.console import Console
from rich.table import Table
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer
from gymflow.train.sft import AssistantLossTrainer, conversations, sft_args

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def kind(op: str) -> str:
    """An operator's share of the step: attention, a matrix product, or other."""
    if "scaled_dot_product" in op:
        return "attention"
    return "matmul" if op in MATMULS else "other"


def train_once(rows: list, cfg, profiled: bool) -> tuple[float, Counter]:
    """One pass over `rows` as the stage trains: real tokens per second, and (profiled) CPU seconds per kind."""
    with tempfile.TemporaryDirectory() as out:
        args = replace(sft_args(cfg, Path(out)), save_strategy="no", disable_tqdm=True)
        trainer = AssistantLossTrainer(
            model=AutoModelForCausalLM.from_pretrained(paths.model("init")),
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=load_tokenizer(paths.model("init")),
        )
        tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
        split: Counter = Counter()
        if not profiled:
            start = time.perf_counter()
            trainer.train()
            return tokens / (time.perf_counter() - start), split
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train()
        for event in prof.key_averages():
            split[kind(event.key)] += event.self_cpu_time_total / 1e6
        return 0.0, split


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=48, help="episodes drawn per environment (default 48)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    args = parser.parse_args()
    sft = load_params().sft
    cfg = sft.model_copy(update={"log_every": 10**6})
    tokenizer = load_tokenizer(paths.model("init"))
    table = Table(
        "env", "passes", "tokens / episode", "mixture tokens", "share", "system prompt",
        "train tok/s", "attention", "matmul", "other", "est. share of time",
    )  # fmt: skip
    found: dict[str, dict] = {}
    first = conversations(paths.TRAJECTORY_ROLLOUTS, [next(iter(sft.envs))])
    train_once(
        first[: 2 * cfg.batch_size], cfg, profiled=False
    )  # warm-up: the first steps of a process are slow
    for env, passes in sft.envs.items():
        convs = conversations(paths.TRAJECTORY_ROLLOUTS, [env])
        if not convs:
            raise SystemExit(f"no AgentTraj episodes of {env}: run `dvc repro trajectories` first")
        lengths = [_tokens(tokenizer, c["messages"]) for c in convs]
        prompts = [_tokens(tokenizer, c["messages"][:1]) for c in convs]
        drawn = random.Random(args.seed).sample(convs, min(args.rows, len(convs)))
        rate, _ = train_once(drawn, cfg, profiled=False)
        _, split = train_once(drawn, cfg, profiled=True)
        found[env] = {
            "passes": passes,
            "per_episode": sum(lengths) / len(lengths),
            "tokens": sum(min(n, cfg.max_length) for n in lengths) * passes,
            "prompt": sum(prompts) / sum(lengths),
            "rate": rate,
            "split": {k: v / sum(split.values()) for k, v in split.items()},
        }
    total = sum(f["tokens"] for f in found.values())
    seconds = {env: f["tokens"] / f["rate"] for env, f in found.items()}
    for env, f in found.items():
        table.add_row(
            env,
            str(f["passes"]),
            f"{f['per_episode']:.0f}",
            f"{f['tokens'] / 1e6:.2f}M",
            f"{f['tokens'] / total:.2f}",
            f"{f['prompt']:.2f}",
            f"{f['rate']:.0f}",
            *(f"{f['split'].get(k, 0.0):.2f}" for k in ("attention", "matmul", "other")),
            f"{seconds[env] / sum(seconds.values()):.2f}",
        )
    Console(width=200).print(table)
    weight = {env: s / sum(seconds.values()) for env, s in seconds.items()}
    share = {
        k: sum(weight[e] * found[e]["split"].get(k, 0.0) for e in found) for k in ("attention", "matmul")
    }
    prompt = sum(found[e]["prompt"] * found[e]["tokens"] for e in found) / total
    print(
        f"the mixture: {total / 1e6:.2f}M tokens, {prompt:.2f} of them system prompts; of the estimated training "
        f"time, attention {share['attention']:.2f}, matrix products {share['matmul']:.2f}, the rest "
        f"{1 - sum(share.values()):.2f}"
    )
    print(
        f"{args.rows} episodes per environment, batch {cfg.batch_size}, {torch.get_num_threads()} threads on "
        f"{platform.processor() or platform.machine()}"
    )


def _tokens(tokenizer, messages: list[dict]) -> int:
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


if __name__ == "__main__":
    main()
