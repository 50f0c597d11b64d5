"""SFT with each batch's system prompt run once, against every row run whole: what the stage's sharing saves.

Every AgentTraj episode of an environment begins with the same system prompt, which the loss never reads (30% of
the default mixture's tokens: `benchmarks/sft_profile.py`). The stage's sampler keeps a batch to one system
prompt and its loss runs the ids the rows share once, their KV cache under every row's rest
(`gymflow.train.shared_prompt`). This runs one SFT step (forward, the loss on the assistant tokens, backward,
AdamW) of the stage's `assistant_loss` both ways, `share` on and off, on the same batches of one environment
(similar lengths together), checks both give the same loss and gradients, then prints tokens per second per
environment, the ratio, whether the stage shares that environment's batches (`shared_prefix`: apps' long rows
share too small a part), and the ratio over the default's mixture (each environment weighed by its tokens x
passes).

    python benchmarks/sft_shared_prefix.py [--batches 6] [--batch 4] [--seed 0]
    OMP_NUM_THREADS=1 python benchmarks/sft_shared_prefix.py     # as each of the stage's two processes trains
Reads data/rollouts/trajectories and data/models/init (`dvc repro init_model`).
"""

from __future__ import annotations

import argparse
import copy
import platform
import random
import time

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer
from gymflow.train.sft import assistant_loss, conversations
from gymflow.train.shared_prompt import shared_prefix


def rows(convs: list[dict], tokenizer, count: int, seed: int, max_length: int) -> list[tuple[list, list]]:
    """A seeded draw of `count` conversations as (ids, labels), shortest first (similar lengths share a batch)."""
    out = []
    for conv in random.Random(seed).sample(convs, min(count, len(convs))):
        enc = tokenizer.apply_chat_template(
            conv["messages"], return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = enc["input_ids"][:max_length], enc["assistant_masks"][:max_length]
        if any(mask):
            out.append((ids, [i if m else -100 for i, m in zip(ids, mask, strict=True)]))
    return sorted(out, key=lambda r: len(r[0]))


def batch_of(rows: list[tuple[list, list]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded as the stage's collator pads: input_ids, attention_mask, labels."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, target) in enumerate(rows):
        ids[i, : len(row)], labels[i, : len(row)], mask[i, : len(row)] = (
            torch.tensor(row),
            torch.tensor(target),
            1,
        )
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def check(model, batch) -> tuple[float, float]:
    """Both ways' losses on one batch: their difference, and the largest gradient difference relative to the
    largest gradient."""
    grads = []
    for share in (False, True):
        model.zero_grad()
        loss, _ = assistant_loss(model, model, batch, share=share)
        loss.backward()
        grads.append((loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    (a, ga), (b, gb) = grads
    model.zero_grad()
    return abs(a - b), float((ga - gb).abs().max() / ga.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=6, help="timed batches per environment (default 6)")
    parser.add_argument(
        "--batch",
        type=int,
        default=4,
        help="episodes per batch (default 4: each of the stage's 2 processes' rows)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    args = parser.parse_args()
    sft = load_params().sft
    tokenizer = load_tokenizer(paths.model("init"))
    base = AutoModelForCausalLM.from_pretrained(paths.model("init"))
    models = {share: copy.deepcopy(base) for share in (False, True)}
    optimizers = {share: torch.optim.AdamW(m.parameters(), lr=sft.lr) for share, m in models.items()}
    table = Table(
        "env", "tokens / episode", "shared ids", "whole tok/s", "shared tok/s", "shared / whole", "loss diff"
    )
    seconds = {share: 0.0 for share in models}
    for env, passes in sft.envs.items():
        convs = conversations(paths.TRAJECTORY_ROLLOUTS, [env])
        if not convs:
            raise SystemExit(f"no AgentTraj episodes of {env}: run `dvc repro trajectories` first")
        drawn = rows(convs, tokenizer, args.batches * args.batch, args.seed, sft.max_length)
        batches = [
            batch_of(drawn[i : i + args.batch], tokenizer.pad_token_id)
            for i in range(0, len(drawn), args.batch)
        ]
        loss_diff, grad_diff = check(base, batches[0])
        if grad_diff > 1e-3:
            raise SystemExit(f"{env}: the two ways' gradients differ by {grad_diff:.1e} of the largest")
        for share, model in models.items():  # warm-up of both at this environment's shapes, not trained on
            assistant_loss(model, model, batches[0], share=share)[0].backward()
            model.zero_grad()
        timed = {share: 0.0 for share in models}
        for batch in batches:  # both ways on each batch in turn: a slow spell of the machine hits both
            for share, model in models.items():
                start = time.perf_counter()
                assistant_loss(model, model, batch, share=share)[0].backward()
                optimizers[share].step()
                optimizers[share].zero_grad()
                timed[share] += time.perf_counter() - start
        tokens = sum(len(ids) for ids, _ in drawn)
        whole, shared = (tokens / timed[share] for share in models)
        mixture_tokens = tokens / len(drawn) * len(convs) * passes  # the environment's share of the mixture
        for share in models:
            seconds[share] += mixture_tokens * timed[share] / tokens
        prefix = sum(shared_prefix(b["input_ids"], b["labels"]) for b in batches) / len(batches)
        table.add_row(
            env,
            f"{tokens / len(drawn):.0f}",
            f"{prefix:.0f}",
            f"{whole:.0f}",
            f"{shared:.0f}",
            f"{shared / whole:.2f}x",
            f"{loss_diff:.1e}",
        )
    Console(width=160).print(table)
    print(
        f"over the default's mixture (sft.envs' passes): sharing {seconds[False] / seconds[True]:.2f}x; "
        f"{args.batches} batches of {args.batch} per environment, {torch.get_num_threads()} threads on "
        f"{platform.processor() or platform.machine()}"
    )


if __name__ == "__main__":
    main()
