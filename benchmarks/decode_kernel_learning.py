"""Does the decode kernel change what RL learns? The `rl` stage with and without it, over seeds, paired.

The kernel (`gymflow.models.decode_attention`) computes a decoding step's attention in another order than
PyTorch's sdpa, so log-probabilities differ in about the seventh digit and every sampled episode is a new draw.
This runs the default's `rl` stage (params.yaml's `rl` and `rollout`, from `rl.start`) once per seed with the
kernel and once with PyTorch's attention in every step (the same seed: the same task draws), then evaluates each
trained agent, and the starting agent, greedily on the held-out split of `rl.tasks`' environments, all with the
same decoder (greedy ids are the same under both; tests/test_decode_kernel.py). Per environment it prints and
writes, per seed and pooled over seeds:

- kernel minus PyTorch's attention: paired per task, and the mean of the per-seed differences with its standard
  error over seeds (what seed-to-seed variation of RL itself allows);
- each arm against the starting agent (RL's gain, as `compare` reports it).

A kernel that made RL worse shows as a negative kernel-minus-PyTorch beyond both standard errors. Each arm counts
the decoding steps the kernel ran: the PyTorch arm must run none, the kernel arm some.

    python benchmarks/decode_kernel_learning.py [--seeds 0 1 2] [--work data/decode_kernel]

Trained agents and rollouts go under --work (a rerun resumes: finished arms are read back); the table to
data/compare/decode_kernel.md and the numbers to data/compare/decode_kernel.json. About 4 minutes an arm and
seed on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from rich.table import Table
from rollout_throughput import pytorch_attention  # this folder is on the path

from gymflow import paths
from gymflow.config import Params, load_params
from gymflow.envs.instructions import load_tasks
from gymflow.errors import UserError, run_command
from gymflow.eval.agenteval import evaluate_policy
from gymflow.eval.compare import Paired, greedy_success, paired, pool
from gymflow.models import decode_attention
from gymflow.models.build import resolve
from gymflow.store.io import write_text
from gymflow.train.rl import train_rl

# the repository root, for the `rl` stage's own train tasks
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stages.rl import train_tasks  # noqa: E402

ARMS = ("kernel", "pytorch")  # the decode kernel in every decoding step; PyTorch's sdpa in every step
START = "start"  # the starting agent's evaluation under --work
COMPARISONS = (  # label, method, baseline
    ("kernel - PyTorch's attention", "kernel", "pytorch"),
    ("kernel - start", "kernel", START),
    ("PyTorch's attention - start", "pytorch", START),
)


@contextmanager
def decoding(arm: str, counts: dict[str, int]) -> Iterator[None]:
    """Decode as `arm` says, counting in `counts["kernel_steps"]` the attention calls the kernel ran."""
    build = decode_attention.kernel

    def counted():
        compiled = build()
        if compiled is None:
            return None

        def attend(*args):
            counts["kernel_steps"] += 1
            return compiled.attend(*args)

        return SimpleNamespace(attend=attend)

    decode_attention.kernel = counted
    try:
        if arm == "pytorch":
            with pytorch_attention():
                yield
        else:
            yield
    finally:
        decode_attention.kernel = build


def evaluate(name: str, model_dir: Path, params: Params, work: Path) -> dict[str, dict[str, float]]:
    """{env: {task_id: success}} of the agent's greedy episodes on the held-out split of `rl.tasks`' envs,
    evaluated once (a rerun reads them back), with the default decoder."""
    envs = list(params.rl.tasks)
    rollouts = work / "evaluate"
    done = work / name / "evaluated"
    if not done.exists():
        cfg = params.evaluate.model_copy(update={"envs": envs, "k": 0})
        tasks = {env: load_tasks(paths.DATA, env, "eval") for env in envs}
        evaluate_policy(name, model_dir, tasks, cfg, params.rollout, rollouts)
        done.parent.mkdir(parents=True, exist_ok=True)
        done.touch()
    return {env: greedy_success(rollouts, name, env) for env in envs}


def train(arm: str, seed: int, params: Params, work: Path) -> tuple[Path, dict]:
    """The `rl` stage's agent for this arm and seed under `work` (trained once; a rerun resumes or reads it)."""
    out = work / f"{arm}-s{seed}"
    model_dir, summary = out / "model", out / "rl.json"
    if summary.exists():
        return model_dir, json.loads(summary.read_text())
    rl = params.rl.model_copy(update={"seed": seed})
    tasks = {env: train_tasks(env, rl.difficulties.get(env)) for env in rl.tasks}
    counts = {"kernel_steps": 0}
    with decoding(arm, counts):
        metrics = train_rl(
            resolve(paths.model(rl.start)),
            model_dir,
            tasks,
            rl,
            params.rollout,
            out / "rollouts",
            out / "rl.csv",
        )
    if (arm == "pytorch") != (counts["kernel_steps"] == 0):
        raise RuntimeError(f"the {arm} arm ran the kernel in {counts['kernel_steps']} attention calls")
    metrics |= counts
    write_text(summary, json.dumps(metrics, indent=2))
    return model_dir, metrics


def over_seeds(diffs: list[float]) -> tuple[float, float]:
    """Mean of per-seed differences and its standard error over seeds."""
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.inf
    return mean, se


def report(results: dict[str, dict[int, dict[str, Paired]]], seeds: list[int], envs: list[str]) -> str:
    """The table as markdown (also printed); `results[env][seed][label]` pairs a comparison's method with its
    baseline."""
    lines = [
        "| env | comparison | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | pooled (paired SE) | over seeds |",
        "|---|---|" + "---|" * len(seeds) + "---|---|",
    ]
    table = Table("env", "comparison", *(f"seed {s}" for s in seeds), "pooled (paired SE)", "over seeds")
    for env in envs:
        for label, _, _ in COMPARISONS:
            parts = [results[env][s][label] for s in seeds]
            pooled = pool(parts)
            mean, se = over_seeds([p.mean for p in parts])
            cells = [f"{p.mean:+.3f} ({p.method:.3f} vs {p.baseline:.3f})" for p in parts]
            cells += [f"{pooled.mean:+.3f} +- {pooled.se:.3f}", f"{mean:+.3f} +- {se:.3f}"]
            table.add_row(env, label, *cells)
            lines.append(f"| {env} | {label} | " + " | ".join(cells) + " |")
    Console().print(table)
    return "\n".join(lines) + "\n"


def stored(results: dict[str, dict[int, dict[str, Paired]]]) -> dict:
    """`results` as the JSON file keeps them: per env, seed and method-baseline, n, mean, sd and both successes."""
    keys = {label: f"{m}-{b}" for label, m, b in COMPARISONS}
    return {
        env: {seed: {keys[label]: asdict(p) for label, p in cells.items()} for seed, cells in row.items()}
        for env, row in results.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="rl.seed of each pair of runs"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("data/decode_kernel"),
        help="trained agents and rollouts (resumable)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("data/compare/decode_kernel"), help="<out>.md, <out>.json"
    )
    args = parser.parse_args()
    params = load_params()
    if params.rl is None or params.evaluate is None:
        raise UserError("params.yaml needs `rl:` and `evaluate:` sections: this study runs the `rl` stage")
    if decode_attention.kernel() is None:
        raise UserError("the decode kernel cannot be built here (see the warning): nothing to compare")
    start = paths.model(params.rl.start)
    if not start.is_dir():
        raise UserError(f"{start} does not exist: run `dvc repro {params.rl.start}` first")
    envs = list(params.rl.tasks)
    baseline = evaluate(START, start, params, args.work)
    results: dict = {env: {} for env in envs}
    runs: dict = {}
    for seed in args.seeds:
        success = {START: baseline}
        for arm in ARMS:
            model_dir, runs[f"{arm}-s{seed}"] = train(arm, seed, params, args.work)
            success[arm] = evaluate(f"{arm}-s{seed}", model_dir, params, args.work)
        for env in envs:
            results[env][seed] = {
                label: paired(success[m][env], success[b][env]) for label, m, b in COMPARISONS
            }
    table = report(results, args.seeds, envs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out.with_suffix(".md"), table)
    write_text(
        args.out.with_suffix(".json"), json.dumps({"results": stored(results), "runs": runs}, indent=2)
    )


if __name__ == "__main__":
    run_command(main)
