"""SFT with each batch's system prompt run once, against the stage's whole-sequence pass: what it would save.

Every AgentTraj episode of an environment begins with the same system prompt, which the loss never reads (30% of
the default mixture's tokens: `benchmarks/sft_profile.py`). The RL learner already runs a prefix its rows share
once, its KV cache copied to the rows (`gymflow.train.prefix.reply_states`; autograd sums the copies' gradients).
This runs one SFT step (forward, the loss on the assistant tokens, backward, AdamW) both ways on the same batches:
- the stage's pass: the model over the right-padded rows without a mask, the LM head on the labelled positions
  (as `AssistantLossTrainer`);
- the shared pass: `reply_states` with every row of a batch in one group, then the same head and loss.
Batches are `--batch` episodes of one environment, similar lengths together (the stage's `group_by_length` mixes
environments within a batch: the shared pass would need a sampler that keeps a batch to one environment). It
checks both passes give the same loss and gradients, then prints tokens per second per environment, the ratio,
and the ratio over the default's mixture (each environment weighed by its tokens x passes).

    python benchmarks/sft_shared_prefix.py [--batches 6] [--batch 8] [--seed 0]
    OMP_NUM_THREADS=1 python benchmarks/sft_shared_prefix.py     # as each of the stage's processes trains
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
from torch import nn
from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer
from gymflow.train.pg import TokenEpisode
from gymflow.train.prefix import reply_states
from gymflow.train.sft import conversations


def episodes(convs: list[dict], tokenizer, count: int, seed: int, max_length: int) -> list[TokenEpisode]:
    """A seeded draw of `count` conversations as token rows: ids, assistant ids marked 1, one group."""
    rows = []
    for conv in random.Random(seed).sample(convs, min(count, len(convs))):
        enc = tokenizer.apply_chat_template(
            conv["messages"], return_dict=True, return_assistant_tokens_mask=True
        )
        ids, turns = enc["input_ids"][:max_length], enc["assistant_masks"][:max_length]
        if any(turns):
            rows.append(TokenEpisode(ids=ids, turns=turns, reward=0.0, group=0))
    return sorted(rows, key=lambda r: len(r.ids))  # similar lengths share a batch


def whole_states(model: nn.Module, rows: list[TokenEpisode], pad_id: int):
    """The stage's pass: every row whole, right-padded, no mask; the states before each assistant id."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    reply = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r.ids)] = torch.tensor(r.ids)
        reply[i, : len(r.ids)] = torch.tensor(r.turns) > 0
    row, pos = reply.nonzero(as_tuple=True)
    states = model.model(input_ids=ids).last_hidden_state
    return ids, (row, pos), states[row, pos - 1]


def shared_states(model: nn.Module, rows: list[TokenEpisode], pad_id: int):
    ids, _, where, states = reply_states(model.model, rows, pad_id, torch.device("cpu"))
    return ids, where, states


def loss_of(model: nn.Module, rows: list[TokenEpisode], pad_id: int, states_fn) -> torch.Tensor:
    ids, (row, pos), states = states_fn(model, rows, pad_id)
    logits = model.get_output_embeddings()(states)
    return nn.functional.cross_entropy(logits.float(), ids[row, pos])


def check(model: nn.Module, rows: list[TokenEpisode], pad_id: int) -> tuple[float, float]:
    """Both passes' losses on one batch and the largest gradient difference relative to the largest gradient."""
    grads = []
    for fn in (whole_states, shared_states):
        model.zero_grad()
        loss = loss_of(model, rows, pad_id, fn)
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
    parser.add_argument("--batch", type=int, default=8, help="episodes per batch (default 8, sft.batch_size)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    args = parser.parse_args()
    sft = load_params().sft
    tokenizer = load_tokenizer(paths.model("init"))
    base = AutoModelForCausalLM.from_pretrained(paths.model("init"))
    models = {fn: copy.deepcopy(base) for fn in (whole_states, shared_states)}
    optimizers = {fn: torch.optim.AdamW(m.parameters(), lr=sft.lr) for fn, m in models.items()}
    table = Table("env", "tokens / episode", "stage tok/s", "shared tok/s", "shared / stage", "loss diff")
    seconds = {fn: 0.0 for fn in models}
    for env, passes in sft.envs.items():
        convs = conversations(paths.TRAJECTORY_ROLLOUTS, [env])
        if not convs:
            raise SystemExit(f"no AgentTraj episodes of {env}: run `dvc repro trajectories` first")
        rows = episodes(convs, tokenizer, args.batches * args.batch, args.seed, sft.max_length)
        batches = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
        loss_diff, grad_diff = check(base, batches[0], tokenizer.pad_token_id)
        if grad_diff > 1e-3:
            raise SystemExit(f"{env}: the passes' gradients differ by {grad_diff:.1e} of the largest")
        timed = {fn: 0.0 for fn in models}
        for (
            fn,
            model,
        ) in models.items():  # warm-up of both passes at this environment's shapes, not trained on
            loss_of(model, batches[0], tokenizer.pad_token_id, fn).backward()
            model.zero_grad()
        for batch in batches:  # both passes on each batch in turn: a slow spell of the machine hits both
            for fn, model in models.items():
                start = time.perf_counter()
                loss_of(model, batch, tokenizer.pad_token_id, fn).backward()
                optimizers[fn].step()
                optimizers[fn].zero_grad()
                timed[fn] += time.perf_counter() - start
        tokens = sum(len(r.ids) for r in rows)
        stage, shared = (tokens / timed[fn] for fn in models)
        mixture_tokens = tokens / len(rows) * len(convs) * passes  # the environment's share of the mixture
        for fn in models:
            seconds[fn] += mixture_tokens * timed[fn] / tokens
        table.add_row(
            env,
            f"{tokens / len(rows):.0f}",
            f"{stage:.0f}",
            f"{shared:.0f}",
            f"{shared / stage:.2f}x",
            f"{loss_diff:.1e}",
        )
    Console(width=160).print(table)
    print(
        f"over the default's mixture (sft.envs' passes): the shared pass "
        f"{seconds[whole_states] / seconds[shared_states]:.2f}x the stage's; {args.batches} batches of {args.batch} per environment, {torch.get_num_threads()} threads on "
        f"{platform.processor() or platform.machine()}"
    )


if __name__ == "__main__":
    main()
