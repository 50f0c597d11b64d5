"""One RL update on a fixed batch: our learner's LOOP preset (`gymflow.train.pg`) against TRL's GRPOTrainer,
and against our PPO preset (a value head, and a frozen reference copy since its kl_coef > 0).

Both sides train the same tiny decoder (ModelConfig defaults, tokenizer trained on random words) on the same
token sequences: `--prompts` x `--samples` completions of random ids, every prompt `--prompt-len` ids and every
completion `--completion-len` ids, random 0/1 rewards (each group mixed, so LOOP's |A| filter keeps all) and the
same leave-one-out advantages. An update is what happens once an iteration's rollouts exist, generation left out:
- ours: `PolicyGradient.prepare` (a no-grad pass for the old log-probs, advantages) then `step` (2 epochs of 4
  clipped mini-batch steps). Its passes run the prompt a group's rows share once (`gymflow.train.prefix`): in
  `prepare` a pass holds whole groups, in `step` a mini-batch (random episodes) shares a prompt among the samples
  of a group it happens to hold; "whole rows" is the same update with every row run over its whole sequence;
- TRL: the old log-probs as `_generate_and_score_completions` computes them (`_get_per_token_logps_and_entropies`,
  no grad, in passes of `per_device_train_batch_size`), then the batch shuffled and split as `_prepare_inputs`
  does and `num_iterations` passes over its `steps_per_generation` slices, each slice what `Trainer` does in one
  optimizer step: `compute_loss`, `accelerator.backward`, gradient clipping, optimizer step. GRPOConfig matches
  ours: beta 0, loss_type grpo (per-sequence token mean), epsilon 0.2, lr, max_grad_norm 1, fp32, no gradient
  checkpointing (TRL's default is on: a row of its own).
Tokens per second counts every id of the batch once per epoch, the same for both. Each configuration lives in a
fresh process of its own, on `--threads` torch threads (1 by default); the processes take turns: a warm-up round,
then `--repeats` rounds of one update each (the median is reported), so a load that comes and goes falls on every
row alike. Besides wall time, each update's CPU time (`time.process_time`; on one thread, the update's own work)
gives a second ratio, the steadier on a machine other jobs share: wall time includes waiting for them. Peak memory is a process's peak RSS from just before the learner or trainer is built to its end,
minus the RSS at that point.

    python benchmarks/rl_update.py [--prompts 8] [--samples 8] [--prompt-len 256] [--completion-len 64]
        [--repeats 5] [--threads 1] [--hidden-size 128] [--layers 2]

At the default's 0.8M parameters the weights are a rounding error next to the activations, so LOOP against
`ppo` (a second model copy, a value head) only shows its memory gap on a larger decoder: docs/results/speed.md's
15M rows (intermediate size 4x hidden) use `--hidden-size 384 --layers 6 --repeats 2`, and the same with
`--prompts 4 --samples 4 --prompt-len 128 --completion-len 32 --repeats 3`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import IO

import torch
from datasets import Dataset
from rich.console import Console
from rich.table import Table
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from gymflow.config import ModelConfig
from gymflow.models.build import build_model
from gymflow.models.tokenizer import SPECIAL_TOKENS, train_tokenizer
from gymflow.train import prefix
from gymflow.train.advantages import leave_one_out
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.presets import PRESETS, PGSwitches

# name -> what the row is; the timed region of each is in the module docstring
CONFIGS = {
    "loop": "LOOP, max_tokens",  # one forward pass per mini-batch (and TRL's scoring passes)
    "loop_whole": "LOOP whole rows, max_tokens",  # the same, every row over its whole sequence
    "loop_default": "LOOP, max_tokens 16384",  # rl.max_tokens' default
    "ppo": "ppo preset",  # value head, frozen reference
    "trl": "TRL GRPOTrainer",
    "trl_ckpt": "TRL, checkpointing",
}
DEFAULT_MAX_TOKENS = 16384  # RLParams.max_tokens


def synthetic_text(seed: int, lines: int = 3000) -> list[str]:
    """Random lowercase words: enough distinct pairs for the BPE to fill a 2048-token vocabulary."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    word = lambda: "".join(rng.choices(letters, k=rng.randint(2, 8)))  # noqa: E731
    return [" ".join(word() for _ in range(20)) for _ in range(lines)]


def make_batch(args: argparse.Namespace, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt ids [G, P], completion ids [G*K, C] (row i answers prompt i // K), rewards [G*K] with both 0 and 1
    in every group (an all-equal group has no advantage and LOOP would drop it, doing less work than TRL)."""
    gen = torch.Generator().manual_seed(args.seed)
    low = len(SPECIAL_TOKENS)  # content ids are never pad or eos
    prompts = torch.randint(low, vocab, (args.prompts, args.prompt_len), generator=gen)
    n = args.prompts * args.samples
    completions = torch.randint(low, vocab, (n, args.completion_len), generator=gen)
    rewards = torch.randint(0, 2, (args.prompts, args.samples), generator=gen).double()
    for g in range(args.prompts):
        if rewards[g].min() == rewards[g].max():
            rewards[g, int(torch.randint(args.samples, (1,), generator=gen))] = 1 - rewards[g, 0]
    return prompts, completions, rewards.flatten()


def rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def reset_peak() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0), so setup that peaked higher
    earlier (tokenizer training, imports) cannot hide the update's own peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def ours(args, model, tokenizer, prompts, completions, rewards, groups, out):
    """A learner for `args.config` and a function running one update with it (`out` unused)."""
    name = args.config
    preset = "ppo" if name == "ppo" else "loop"
    switches = PGSwitches.model_validate(PRESETS[preset])
    per_minibatch = -(-len(completions) // switches.minibatches)
    seq = args.prompt_len + args.completion_len
    max_tokens = DEFAULT_MAX_TOKENS if name == "loop_default" else per_minibatch * seq
    if name == "loop_whole":
        prefix.MIN_SHARED = sys.maxsize  # no group shares that many ids: every row runs whole
    episodes = [
        TokenEpisode(
            ids=prompts[g].tolist() + c.tolist(),
            turns=[0] * args.prompt_len + [1] * args.completion_len,
            reward=float(r),
            group=int(g),
        )
        for c, r, g in zip(completions, rewards, groups, strict=True)
    ]
    config = LearnerConfig(
        switches=switches, lr=args.lr, max_tokens=max_tokens, pad_id=tokenizer.pad_token_id, seed=args.seed
    )
    learner = PolicyGradient(model, config)

    def update() -> dict[str, float]:
        prepared = learner.prepare(episodes)
        assert not prepared.stats["filtered"], "every group has mixed rewards: nothing should be filtered"
        return learner.step(prepared)

    info = {"max_tokens": max_tokens, "optimizer": type(learner.optimizer).__name__}
    return update, info, switches.epochs


def reward_unused(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)  # GRPOTrainer wants a reward function; no completion is generated here


def trl(args, model, tokenizer, prompts, completions, rewards, groups, out):
    """A GRPOTrainer for `args.config` writing under `out`, and a function running one update with it."""
    name = args.config
    loop = PGSwitches.model_validate(PRESETS["loop"])
    n = len(completions)
    cfg = GRPOConfig(
        output_dir=out,
        per_device_train_batch_size=n // loop.minibatches,  # one slice = one of our mini-batches
        gradient_accumulation_steps=1,
        steps_per_generation=loop.minibatches,  # the generation batch is the whole batch
        num_iterations=loop.epochs,  # passes over it; != 1 makes TRL compute old log-probs, as we do
        num_generations=args.samples,
        max_completion_length=args.completion_len,
        beta=0.0,  # no reference model (LOOP has none)
        loss_type="grpo",  # per-sequence token mean, then mean over sequences: LOOP's token-level objective
        epsilon=loop.clip,
        max_grad_norm=loop.max_grad_norm,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        bf16=False,
        use_cpu=True,
        activation_checkpointing=name == "trl_ckpt",  # TRL's default: True (`gradient_checkpointing`)
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=args.seed,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_unused,
        args=cfg,
        train_dataset=Dataset.from_list([{"prompt": "unused"}] * args.prompts),
        processing_class=tokenizer,
    )
    optimizer = trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop, read by _compute_loss
    model = trainer.model
    if cfg.activation_checkpointing:  # as Trainer.train does
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs=cfg.activation_checkpointing_kwargs
        )
    batch = {
        "prompt_ids": prompts[groups],
        "prompt_mask": torch.ones(n, args.prompt_len, dtype=torch.long),
        "completion_ids": completions,
        "completion_mask": torch.ones(n, args.completion_len, dtype=torch.long),
        "advantages": leave_one_out(rewards, groups).float(),  # the same advantages as ours
        "num_items_in_batch": torch.tensor(n * args.completion_len),
    }

    def update() -> dict[str, float]:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        model.train()  # TRL scores in train mode (dropout is disabled at init)
        with torch.no_grad():
            old, _, _ = trainer._get_per_token_logps_and_entropies(
                model, ids, mask, args.completion_len, batch_size=cfg.per_device_train_batch_size
            )
        slices = split_tensor_dict(
            shuffle_sequence_dict({**batch, "old_per_token_logps": old}), cfg.steps_per_generation
        )
        steps = 0
        for _ in range(trainer.num_iterations):
            for part in slices:
                model.train()
                with trainer.compute_loss_context_manager():
                    loss = trainer.compute_loss(model, part, num_items_in_batch=part["num_items_in_batch"])
                trainer.accelerator.backward(loss)
                trainer.accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                model.zero_grad()
                steps += 1
        return {"steps": steps}

    info = {"optimizer": type(optimizer).__name__}
    return update, info, trainer.num_iterations


def worker(args: argparse.Namespace) -> None:
    """One configuration in this fresh process: build it, then run one update per `update` line on stdin and
    answer each with its seconds; on `done`, answer with the peak memory and exit."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = ModelConfig(
        seed=args.seed,
        hidden_size=args.hidden_size,
        intermediate_size=4 * args.hidden_size,
        layers=args.layers,
    )
    tokenizer = train_tokenizer(synthetic_text(args.seed), cfg.vocab_size)
    model = build_model(cfg, tokenizer)
    prompts, completions, rewards = make_batch(args, len(tokenizer))
    groups = torch.arange(args.prompts).repeat_interleave(args.samples)
    gc.collect()
    base = rss_kb()
    reset_peak()
    setup = trl if args.config.startswith("trl") else ours
    with tempfile.TemporaryDirectory(prefix="rl_update_") as out:
        update, info, epochs = setup(args, model, tokenizer, prompts, completions, rewards, groups, out)
        tokens = (args.prompt_len + args.completion_len) * len(completions) * epochs
        built = rss_kb() - base  # the learner or trainer itself: optimizer (lazy), reference copy, value head
        _reply(
            {
                "tokens": tokens,
                "built_mb": built / 1024,
                "threads": torch.get_num_threads(),
                "vocab": len(tokenizer),
                "params": sum(p.numel() for p in model.parameters()),
                **info,
            }
        )
        for line in sys.stdin:
            if line.strip() == "done":
                break
            start, cpu = time.perf_counter(), time.process_time()
            stats = update()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            _reply(
                {
                    "seconds": seconds,
                    "cpu": cpu,
                    "steps": int(stats["steps"]),
                    "learner": stats.get("train_tokens_per_s"),
                }
            )
    _reply({"base_mb": base / 1024, "peak_mb": rss_kb("VmHWM") / 1024})


def _reply(message: dict) -> None:
    print("RESULT " + json.dumps(message), flush=True)  # prefixed: libraries may print to stdout too


class Worker:
    """A configuration's process, kept alive so its updates can be interleaved with the others'."""

    def __init__(self, name: str, log: IO[str]) -> None:
        self.name, self.log = name, log  # its stderr: warnings, or why it failed
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *sys.argv[1:], "--config", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def ask(self, line: str | None = None) -> dict:
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        for out in self.proc.stdout:
            if out.startswith("RESULT "):
                return json.loads(out.removeprefix("RESULT "))
        self.log.seek(0)
        sys.exit(f"{self.name} failed:\n{self.log.read()}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=8, help="G: prompts (groups)")
    parser.add_argument("--samples", type=int, default=8, help="K: completions per prompt")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--completion-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4, help="rl.lr's default")
    parser.add_argument("--repeats", type=int, default=5, help="timed updates per configuration (median)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per process; 0: torch's default. On a CPU another job shares, a second thread makes "
        "every op wait for whichever thread was preempted (an Adam step of this model: 3 ms -> 400 ms)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden-size", type=int, default=ModelConfig().hidden_size, help="decoder width")
    parser.add_argument("--layers", type=int, default=ModelConfig().layers, help="decoder layers")
    parser.add_argument("--config", choices=list(CONFIGS), help=argparse.SUPPRESS)  # the worker of one row
    args = parser.parse_args()
    if args.config:
        worker(args)
        return
    # One process per configuration (its peak memory is its own), all alive at once and idle but one, so the
    # timed updates go round-robin: a load that comes and goes on a shared machine falls on every row alike.
    names = list(CONFIGS)
    with ExitStack() as stack:
        workers = {name: Worker(name, stack.enter_context(tempfile.TemporaryFile("w+"))) for name in names}
        info = {name: w.ask() for name, w in workers.items()}
        runs: dict[str, list[dict]] = {name: [] for name in names}
        for round_ in range(args.repeats + 1):  # round 0 warms up (and, for ppo, pre-trains the value head)
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                result = workers[name].ask("update")
                if round_:
                    runs[name].append(result)
        memory = {name: w.ask("done") for name, w in workers.items()}
        for w in workers.values():
            w.proc.wait()

    n, seq = args.prompts * args.samples, args.prompt_len + args.completion_len
    first = info["loop"]
    table = Table(
        title=f"one update of a {first['params'] / 1e6:.1f}M-parameter decoder: "
        f"{n} sequences of {args.prompt_len}+{args.completion_len} ids, "
        f"{runs['loop'][0]['steps']} optimizer steps, {first['threads']} threads"
    )
    columns = [
        "config",
        "s/update",
        "min-max s",
        "CPU s",
        "tokens/s",
        "peak RSS MB",
        "peak-start MB",
        "built MB",
    ]
    for col in columns:
        table.add_column(col, justify="left" if col == "config" else "right")
    speed, cpu, delta = {}, {}, {}
    for name, rows in runs.items():
        seconds = [r["seconds"] for r in rows]
        median, cpu_median = statistics.median(seconds), statistics.median(r["cpu"] for r in rows)
        speed[name] = info[name]["tokens"] / median
        cpu[name] = info[name]["tokens"] / cpu_median
        delta[name] = memory[name]["peak_mb"] - memory[name]["base_mb"]
        label = CONFIGS[name] + (f" {info[name]['max_tokens']}" if name in ("loop", "loop_whole") else "")
        table.add_row(
            label,
            f"{median:.2f}",
            f"{min(seconds):.1f}-{max(seconds):.1f}",
            f"{cpu_median:.2f}",
            f"{speed[name]:.0f}",
            f"{memory[name]['peak_mb']:.0f}",
            f"{delta[name]:.0f}",
            f"{info[name]['built_mb']:.0f}",
        )
    Console(width=120).print(table)

    def faster(a: str, b: str) -> str:
        return f"{speed[a] / speed[b]:.2f}x (CPU time: {cpu[a] / cpu[b]:.2f}x)"

    print(
        f"tokens/s: {n} sequences x {seq} ids x {first['tokens'] // (n * seq)} epochs / seconds of one update"
    )
    print(
        "timed, ours: PolicyGradient.prepare (no-grad old log-probs, advantages) + step (epochs x mini-batches)"
    )
    print(
        "timed, TRL: no-grad old log-probs (_get_per_token_logps_and_entropies), shuffle + split, then "
        "num_iterations x steps_per_generation x (compute_loss + backward + clip + optimizer step)"
    )
    print(
        "peak-start: peak RSS minus RSS before the learner or trainer is built; built: RSS right after building"
    )
    print("CPU s: the process's CPU seconds per update (median), what the ratios' CPU time divides")
    optimizers = sorted({f"{name}: {i['optimizer']}" for name, i in info.items()})
    print(f"optimizers: {', '.join(optimizers)}; median of {args.repeats} interleaved rounds after a warm-up")
    learner = statistics.median(r["learner"] for r in runs["loop"])
    print(f"LOOP learner's own train_tokens_per_s (step only, context ids included): {learner:.0f}")
    print(f"LOOP / TRL GRPOTrainer tokens/s: {faster('loop', 'trl')}")
    print(
        f"LOOP / LOOP whole rows tokens/s: {faster('loop', 'loop_whole')}, "
        f"peak memory {delta['loop'] / delta['loop_whole']:.2f}x"
    )
    print(f"LOOP whole rows / TRL tokens/s: {faster('loop_whole', 'trl')}")
    print(f"LOOP (max_tokens {DEFAULT_MAX_TOKENS}) / TRL tokens/s: {faster('loop_default', 'trl')}")
    print(f"peak memory LOOP / TRL: {delta['loop'] / delta['trl']:.2f}x (peak - start)")
    print(f"peak memory LOOP / ppo preset: {delta['loop'] / delta['ppo']:.2f}x (peak - start)")
    print(f"LOOP / TRL with checkpointing (TRL's default) tokens/s: {faster('loop', 'trl_ckpt')}")
    print(f"peak memory LOOP / TRL with checkpointing: {delta['loop'] / delta['trl_ckpt']:.2f}x")


if __name__ == "__main__":
    main()
