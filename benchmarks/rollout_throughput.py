"""Rollout throughput of the engine (one reused KV cache per batch) against the simplest alternative: one
episode at a time, `model.generate` over the whole re-encoded history every turn; and against the engine
without `Decoder.keep` (finished episodes and earlier turns' padding left in the cache).

Same model, tasks, turn limit and reply length in one run; prints episodes, environment steps and generated
tokens per second for each, and the ratios. Uses `--model` (default data/models/init) when it exists,
otherwise a freshly built default model. Compaction matters where episodes end apart: a trained model
(`--model data/models/sft`); greedy (`--temperature 0`) makes both engine paths play identical episodes.

    python benchmarks/rollout_throughput.py [--env maze] [--episodes 64] [--batch 32] [--model PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM, AutoTokenizer

from gymflow.agent.chat import ChatFormat
from gymflow.agent.react import parse_action
from gymflow.config import ModelConfig
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.models.build import build_model
from gymflow.models.sampling import Decoder
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout import engine
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.rollout.expert import run_expert

NAIVE = "naive"  # generate() on the re-encoded history, one episode at a time


class KeepAll(Decoder):
    """The engine before `Decoder.keep`: finished rows and padding columns stay in the cache."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rows = list(range(self.mask.shape[0]))  # engine row -> cache row

    def keep(self, rows) -> None:
        self.rows = [self.rows[r] for r in rows]

    def extend(self, chunks):
        full = [[] for _ in range(self.mask.shape[0])]
        for row, chunk in zip(self.rows, chunks, strict=True):
            full[row] = chunk
        return super().extend(full)

    def decode(self, logits, active, *args, **kwargs):
        on = [row in self.rows for row in range(self.mask.shape[0])]
        out = super().decode(logits, on, *args, **kwargs)
        return [out[row] for row in self.rows]


def load_or_build(env_name: str, path: Path) -> tuple[torch.nn.Module, ChatFormat]:
    if (path / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(path).eval(), ChatFormat(
            AutoTokenizer.from_pretrained(path)
        )
    tasks = build_splits(ENVS[env_name], 50, 0, seed=0)["train"]
    env = make_env(env_name)
    texts = [m.text for t in tasks for m in run_expert(env, t).messages]
    tokenizer = train_tokenizer(texts, 2048)
    return build_model(ModelConfig(), tokenizer).eval(), ChatFormat(tokenizer)


@torch.no_grad()
def naive(model, fmt: ChatFormat, tasks, cfg: SamplingConfig, horizon: int) -> tuple[int, int]:
    """One episode at a time; every turn re-encodes the whole conversation and calls model.generate."""
    steps = tokens = 0
    tok = fmt.tokenizer
    for task in tasks:
        env = make_env(task.env)
        chat = [
            {"role": "system", "content": env.spec.system_prompt},
            {"role": "user", "content": env.reset(task)},
        ]
        for _ in range(horizon):
            ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            prompt = torch.tensor([fmt.encode(ids)])
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=cfg.temperature > 0,
                temperature=cfg.temperature or None,
                max_new_tokens=cfg.max_new_tokens,
                eos_token_id=fmt.eos_id,
                pad_token_id=tok.pad_token_id,
            )[0, prompt.shape[1] :]
            tokens += len(out)
            text = tok.decode(out, skip_special_tokens=True)
            step = env.step(parse_action(text) or "")
            steps += 1
            chat += [{"role": "assistant", "content": text}, {"role": "user", "content": step.observation}]
            if step.done:
                break
        env.close()
    return steps, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="maze")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--model", type=Path, default=Path("data/models/init"))
    args = parser.parse_args()
    torch.manual_seed(0)
    model, fmt = load_or_build(args.env, args.model)
    tasks = build_splits(ENVS[args.env], 0, args.episodes, seed=0)["eval"]
    horizon = ENVS[args.env].spec.max_turns
    cfg = SamplingConfig(
        temperature=args.temperature, max_new_tokens=args.max_new_tokens, batch_size=args.batch
    )

    rows = {}
    paths = [
        (f"engine b{args.batch}", args.batch, Decoder),
        (f"engine b{args.batch}, no keep", args.batch, KeepAll),
        ("engine b1", 1, Decoder),
    ]
    for name, batch, decoder in paths:
        engine.Decoder = decoder
        start = time.perf_counter()
        eps = rollout(
            model, fmt, [(t, 0) for t in tasks], SamplingConfig(**{**cfg.__dict__, "batch_size": batch})
        )
        gen = sum(len(m.token_ids) for e in eps for m in e.messages)
        rows[name] = (len(eps), sum(e.turns for e in eps), gen, time.perf_counter() - start)
    engine.Decoder = Decoder
    naive_tasks = tasks[: max(4, args.episodes // 8)]  # the slow path on fewer episodes; rates compare
    start = time.perf_counter()
    steps, gen = naive(model, fmt, naive_tasks, cfg, horizon)
    rows[NAIVE] = (
        len(naive_tasks),
        steps,
        gen,
        time.perf_counter() - start,
    )

    table = Table(
        title=f"{args.env} rollouts, {sum(p.numel() for p in model.parameters()):,}-parameter model, "
        f"turn limit {horizon}, replies up to {args.max_new_tokens} tokens"
    )
    for col in ["path", "episodes", "episodes/s", "env steps/s", "tokens/s", "x naive"]:
        table.add_column(col, justify="right")
    base = rows[NAIVE]
    base_rate = base[2] / base[3]
    for name, (n, steps, gen, secs) in rows.items():
        table.add_row(
            name,
            str(n),
            f"{n / secs:.2f}",
            f"{steps / secs:.1f}",
            f"{gen / secs:.0f}",
            f"{gen / secs / base_rate:.1f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
