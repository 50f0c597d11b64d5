"""A GPU check for a lent machine (15 minutes, no internet): the rollout engine and one LOOP update at the default
and a 15M-parameter size, then a short RL run (`gymflow.train.rl.train_rl`) and a short SFT run
(`gymflow.train.sft.train_sft`), every number to one JSON file.

    python benchmarks/gpu_check.py --out gpu.json [--device cuda] [--quick]

Each part does a fixed amount of work, meant to take well under 8 minutes in all on an H100, and the file is
rewritten after every part, so a run stopped at its time limit still returns what it measured. A part that
fails records its error and the others still run (the exit status is then 1). It imports only what such a
machine has (torch, transformers, peft, accelerate, pyarrow) and pydantic, carried as wheels: docs/results/gpu.md
says how; the SFT part also needs TRL, datasets and DuckDB, and is skipped (recorded, not failed) without them.
`--device cpu --quick` runs the same code on tiny sizes in seconds (tests/test_gpu_check.py).

- rollout: maze episodes from the eval split through `gymflow.rollout.engine.rollout`, after a short warm-up;
  each size again at wide batches (`rollout_default_b256`, ...), as many episodes as the batch;
- update: `PolicyGradient.prepare` + `step` of the LOOP preset on a synthetic batch, as benchmarks/rl_update.py's
  "loop" row (prompts x samples random ids, each group's rewards mixed), median of a few after a warm-up;
- rl: `train_rl` from the default-size model for a few iterations (maze, no |A| filter, so every step trains);
- sft: `train_sft` from the default-size model on maze expert episodes, one pass at the default's batch, as
  stage `sft` trains (TRL's SFTTrainer, on the GPU when there is one; bf16 where the card has it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import torch
    import transformers

    from gymflow.agent.chat import ChatFormat
    from gymflow.config import ModelConfig, RLParams, RolloutParams, SFTParams
    from gymflow.envs import make_env
    from gymflow.envs.instructions import build_splits
    from gymflow.envs.maze import Maze
    from gymflow.models.build import build_model
    from gymflow.models.tokenizer import SPECIAL_TOKENS, train_tokenizer
    from gymflow.rollout.engine import SamplingConfig, rollout
    from gymflow.rollout.expert import run_expert
    from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
    from gymflow.train.presets import PRESETS, PGSwitches
    from gymflow.train.rl import train_rl
except ModuleNotFoundError as missing:  # a lent machine lacks it: one line, not a traceback
    sys.exit(f"gpu_check: no Python module {missing.name!r} here: carry it as a wheel (docs/results/gpu.md)")


@dataclass(frozen=True)
class Sizes:
    """The fixed amount of work of every part: the full check, or `--quick`'s seconds-long version."""

    models: dict[str, ModelConfig]  # name -> decoder; "default" is params.yaml's model.*
    vocab: int
    expert_tasks: int  # maze tasks whose expert episodes train the tokenizer
    episodes: int  # timed rollout episodes per size
    batch: int  # episodes sharing one KV cache
    wide_batches: tuple[
        int, ...
    ]  # each size again at these batches (as many episodes): how the engine scales
    max_new_tokens: int
    prompts: int  # update: G groups of K samples, each prompt + completion ids
    samples: int
    prompt_len: int
    completion_len: int
    repeats: int  # timed updates (median) after one warm-up
    rl_tasks: int  # rl: maze tasks per iteration, samples each, iterations
    rl_samples: int
    rl_iterations: int
    sft_tasks: int  # sft: maze expert episodes, one pass, sft_batch of them a step
    sft_batch: int


FULL = Sizes(
    models={
        "default": ModelConfig(),
        # benchmarks/rl_update.py's 15M row (docs/results/speed.md): intermediate size 4x hidden
        "15M": ModelConfig(hidden_size=384, intermediate_size=1536, layers=6),
    },
    vocab=ModelConfig().vocab_size,
    expert_tasks=50,
    episodes=64,
    batch=32,
    wide_batches=(256, 1024),
    max_new_tokens=48,
    prompts=8,
    samples=8,
    prompt_len=256,
    completion_len=64,
    repeats=5,
    rl_tasks=64,
    rl_samples=4,
    rl_iterations=3,
    sft_tasks=800,
    sft_batch=8,
)
TINY = {"heads": 2, "kv_heads": 2, "max_length": 1024}
QUICK = Sizes(
    models={
        "default": ModelConfig(hidden_size=32, intermediate_size=64, layers=1, **TINY),
        "15M": ModelConfig(hidden_size=64, intermediate_size=128, layers=2, **TINY),
    },
    vocab=400,
    expert_tasks=6,
    episodes=4,
    batch=4,
    wide_batches=(8,),
    max_new_tokens=8,
    prompts=2,
    samples=2,
    prompt_len=16,
    completion_len=8,
    repeats=1,
    rl_tasks=2,
    rl_samples=2,
    rl_iterations=1,
    sft_tasks=8,
    sft_batch=4,
)


def fail(message: str) -> None:
    """Exit with one line on stderr: what a session reading the device tool's output needs, no traceback."""
    sys.exit(f"gpu_check: {message}")


def check_device(device: str) -> None:
    """Refuse `--device cuda` where torch sees no GPU, before any work."""
    if device == "cuda" and not torch.cuda.is_available():
        fail(
            f"--device cuda, but torch {torch.__version__} sees no CUDA device (built for CUDA "
            f"{torch.version.cuda}): run it on a GPU machine, or pass --device cpu"
        )


def sync(device: str) -> None:
    """Wait for queued GPU work, so a timer read after it counts that work."""
    if device == "cuda":
        torch.cuda.synchronize()


def machine(device: str) -> dict[str, Any]:
    """What ran the check: a number means little without the card and the versions."""
    info = {
        "device": device,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
    }
    if device == "cuda":
        info["name"] = torch.cuda.get_device_name()
        info["memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def chat_format(sizes: Sizes) -> ChatFormat:
    """A tokenizer trained on maze expert episodes, as `init_model` and benchmarks/rollout_throughput.py build."""
    tasks = build_splits(Maze, sizes.expert_tasks, 0, seed=0)["train"]
    env = make_env("maze")
    texts = [m.text for t in tasks for m in run_expert(env, t).messages]
    return ChatFormat(train_tokenizer(texts * 3, sizes.vocab))


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def time_rollout(
    cfg: ModelConfig, fmt: ChatFormat, sizes: Sizes, device: str, batch: int | None = None
) -> dict[str, Any]:
    """Episodes, environment steps and generated tokens per second of the engine on `device`: `sizes.episodes`
    at `sizes.batch`, or as many episodes as `batch` in one KV cache."""
    model = build_model(cfg, fmt.tokenizer).to(device).eval()
    batch = batch or sizes.batch
    tasks = build_splits(Maze, 0, max(sizes.episodes, batch), seed=0)["eval"]
    sampling = SamplingConfig(max_new_tokens=sizes.max_new_tokens, batch_size=batch)
    generator = torch.Generator().manual_seed(0)
    rollout(model, fmt, [(t, 0) for t in tasks[:2]], sampling, horizon=2, generator=generator)  # warm-up
    sync(device)
    start = time.perf_counter()
    episodes = rollout(model, fmt, [(t, 0) for t in tasks], sampling, generator=generator)
    sync(device)
    seconds = time.perf_counter() - start
    steps = sum(ep.turns for ep in episodes)
    tokens = sum(len(m.token_ids) for ep in episodes for m in ep.messages)
    return {
        "params": params(model),
        "episodes": len(episodes),
        "batch": batch,
        "max_new_tokens": sizes.max_new_tokens,
        "seconds": round(seconds, 3),
        "episodes_per_s": len(episodes) / seconds,
        "env_steps_per_s": steps / seconds,
        "tokens_per_s": tokens / seconds,
    }


def token_batch(sizes: Sizes, vocab: int) -> list[TokenEpisode]:
    """Random prompt + completion ids, K per prompt, with both rewards 0 and 1 in every group (LOOP's |A|
    filter keeps all): the batch of benchmarks/rl_update.py, which cannot be imported here (it needs TRL)."""
    gen = torch.Generator().manual_seed(0)
    low = len(SPECIAL_TOKENS)  # content ids are never pad or eos
    episodes = []
    for g in range(sizes.prompts):
        prompt = torch.randint(low, vocab, (sizes.prompt_len,), generator=gen).tolist()
        for k in range(sizes.samples):
            completion = torch.randint(low, vocab, (sizes.completion_len,), generator=gen).tolist()
            episodes.append(
                TokenEpisode(
                    ids=prompt + completion,
                    turns=[0] * sizes.prompt_len + [1] * sizes.completion_len,
                    reward=float(k % 2),
                    group=g,
                )
            )
    return episodes


def time_update(cfg: ModelConfig, fmt: ChatFormat, sizes: Sizes, device: str) -> dict[str, Any]:
    """Seconds and tokens per second of one LOOP update (prepare + step) on `device`; peak GPU memory."""
    model = build_model(cfg, fmt.tokenizer).to(device)
    switches = PGSwitches.model_validate(PRESETS["loop"])
    episodes = token_batch(sizes, len(fmt.tokenizer))
    seq = sizes.prompt_len + sizes.completion_len
    per_minibatch = -(-len(episodes) // switches.minibatches)
    config = LearnerConfig(
        switches=switches, lr=1e-4, max_tokens=per_minibatch * seq, pad_id=fmt.tokenizer.pad_token_id
    )
    learner = PolicyGradient(model, config)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for i in range(sizes.repeats + 1):  # the first warms up (kernels, allocator, Adam's state)
        sync(device)
        start = time.perf_counter()
        prepared = learner.prepare(episodes)
        stats = learner.step(prepared)
        sync(device)
        if i:
            seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    tokens = seq * len(episodes) * switches.epochs
    out = {
        "params": params(model),
        "sequences": len(episodes),
        "ids_per_sequence": seq,
        "optimizer_steps": int(stats["steps"]),
        "seconds": round(median, 4),
        "tokens_per_s": tokens / median,
    }
    if device == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def short_rl(cfg: ModelConfig, fmt: ChatFormat, sizes: Sizes) -> dict[str, Any]:
    """A few RL iterations as the `rl` stage runs them (`train_rl` picks the GPU itself when there is one)."""
    tasks = {"maze": build_splits(Maze, sizes.rl_tasks, 0, seed=0)["train"]}
    rl = RLParams(
        tasks={"maze": sizes.rl_tasks},
        samples=sizes.rl_samples,
        iterations=sizes.rl_iterations,
        switches={
            "min_abs_advantage": 0
        },  # a random agent's groups are mostly all 0: keep them, so steps run
    )
    play = RolloutParams(
        max_new_tokens=sizes.max_new_tokens, max_length=1024, batch_size=sizes.wide_batches[0]
    )  # an iteration's episodes in one KV cache
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        folder = Path(tmp)
        build_model(cfg, fmt.tokenizer).save_pretrained(folder / "start")
        fmt.tokenizer.save_pretrained(folder / "start")
        start = time.perf_counter()
        summary = train_rl(
            str(folder / "start"), folder / "model", tasks, rl, play, folder / "rollouts", folder / "rl.csv"
        )
        seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 3), **summary}


SFT_NEEDS = "trl, datasets and duckdb (with pandas, multiprocess, dill, xxhash)"


def short_sft(cfg: ModelConfig, fmt: ChatFormat, sizes: Sizes, device: str) -> dict[str, Any]:
    """One pass over maze expert episodes as stage `sft` trains (`train_sft`); skipped where TRL, datasets or
    DuckDB are missing, since a lent machine has them only if carried."""
    try:
        from gymflow.train.sft import conversation, train_sft
    except ModuleNotFoundError as missing:
        return {
            "skipped": f"no Python module {missing.name!r}: carry {SFT_NEEDS} as wheels (docs/results/gpu.md)"
        }
    env = make_env("maze")
    data = [
        conversation([{"role": m.role, "content": m.text} for m in run_expert(env, task).messages])
        for task in build_splits(Maze, sizes.sft_tasks, 0, seed=1)["train"]
    ]
    sft = SFTParams(envs={"maze": 1}, batch_size=sizes.sft_batch, max_length=1024, log_every=1000)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        folder = Path(tmp)
        build_model(cfg, fmt.tokenizer).save_pretrained(folder / "start")
        fmt.tokenizer.save_pretrained(folder / "start")
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        summary = train_sft(str(folder / "start"), folder / "model", data, sft, folder / "sft.csv")
        seconds = time.perf_counter() - start
    out = {"seconds": round(seconds, 3), "batch": sizes.sft_batch, **summary}
    if device == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def run_part(results: dict[str, Any], name: str, part: Callable[[], dict[str, Any]], out: Path) -> bool:
    """Run one part into `results[name]` and rewrite the file; a failure is recorded there, the run goes on."""
    start = time.perf_counter()
    try:
        results[name] = part()
        ok = True
    except Exception as e:  # noqa: BLE001  (any failure on the lent machine is a finding; the next part runs)
        traceback.print_exc()
        results[name] = {"error": f"{type(e).__name__}: {e}"}
        ok = False
    print(
        f"gpu_check: {name} {'done' if ok else 'FAILED'} in {time.perf_counter() - start:.1f} s", flush=True
    )
    write(out, results)
    return ok


def write(out: Path, results: dict[str, Any]) -> None:
    """Replace `out` whole, so a run killed mid-write leaves the previous part's file."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(out)


def third_party_modules() -> list[str]:
    """The top-level modules loaded besides the standard library's and gymflow's: what a lent machine needs."""
    names = {name.split(".")[0] for name, module in sys.modules.items() if module is not None}
    return sorted(
        n for n in names if n not in sys.stdlib_module_names and not n.startswith("_") and n != "gymflow"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="the JSON file the numbers go to")
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="cuda: the check; cpu: the same code here"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny models and a few episodes: seconds, to test the script"
    )
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # train_rl takes a GPU whenever it sees one
    check_device(args.device)
    if not args.out.parent.is_dir():
        fail(f"--out {args.out}: no folder {args.out.parent}")
    sizes = QUICK if args.quick else FULL
    if args.quick:
        torch.set_num_threads(1)  # a test of the script, not a measurement: leave the other cores alone
    torch.manual_seed(0)
    began = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(args.device), "quick": args.quick}
    fmt = chat_format(sizes)  # every part needs it: a failure here ends the run with its traceback
    results["vocab"] = len(fmt.tokenizer)
    ok = True
    for part, measure in (("rollout", time_rollout), ("update", time_update)):
        for size, cfg in sizes.models.items():
            run = lambda m=measure, c=cfg: m(c, fmt, sizes, args.device)  # noqa: E731
            ok &= run_part(results, f"{part}_{size}", run, args.out)
    for size, cfg in sizes.models.items():
        for batch in sizes.wide_batches:
            wide = lambda c=cfg, b=batch: time_rollout(c, fmt, sizes, args.device, b)  # noqa: E731
            ok &= run_part(results, f"rollout_{size}_b{batch}", wide, args.out)
    ok &= run_part(results, "rl", lambda: short_rl(sizes.models["default"], fmt, sizes), args.out)
    sft = lambda: short_sft(sizes.models["default"], fmt, sizes, args.device)  # noqa: E731
    ok &= run_part(results, "sft", sft, args.out)
    results["seconds"] = round(time.perf_counter() - began, 1)
    results["modules"] = third_party_modules()
    write(args.out, results)
    print(f"gpu_check: wrote {args.out} after {results['seconds']} s", flush=True)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
