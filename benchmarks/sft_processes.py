"""SFT on a CPU: one process using every core's thread against one process per core, in the same run.

The default model is small (0.8M parameters): its matrix products are too small for a second thread to halve,
so a process per core (data-parallel under `accelerate launch`, gloo on 127.0.0.1, one thread each; the
result is one process's, tests/test_distributed_train.py) may train faster than one process with all the
threads. Both variants train `gymflow.train.sft.train_sft` (the stage's own path) on the same seeded draw of the
mixture stage `sft` trains on, from data/models/init, each in its own subprocess, one after the other
(the second as the stage runs it: `gymflow.train.cores.over_cores`).
Prints each variant's training tokens per second, wall seconds and mean loss, and the ratio.

    python benchmarks/sft_processes.py [--rows 800] [--processes 2] [--repeats 1]
Reads data/rollouts/trajectories and data/models/init (`dvc repro init_model`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table


def worker(out: Path, rows: int, seed: int, processes: int) -> None:
    """One training run as the stage trains: `train_sft` on the draw, over `processes` processes (`over_cores`)."""
    from gymflow import paths
    from gymflow.config import load_params
    from gymflow.train.cores import over_cores
    from gymflow.train.sft import mixture, train_sft

    sft = load_params().sft.model_copy(update={"log_every": 10**6})
    data = random.Random(seed).sample(mixture(paths.TRAJECTORY_ROLLOUTS, sft.envs), rows)
    with over_cores(processes, [sys.executable, *sys.argv]):
        metrics = train_sft(paths.model("init"), out / "model", data, sft, out / "curve.csv")
    if os.environ.get("RANK", "0") == "0":
        (out / "metrics.json").write_text(json.dumps(metrics))


def run(processes: int, threads: int, rows: int, seed: int) -> dict:
    """One variant in its own process (and the copies it starts): its train_sft metrics."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, __file__, "--worker", out, "--rows", str(rows), "--seed", str(seed)]
        command += ["--processes", str(processes)]
        env = os.environ | {"OMP_NUM_THREADS": str(threads)}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{processes} process(es) failed:\n{done.stderr[-3000:]}")
        return json.loads((Path(out) / "metrics.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=800, help="rows drawn from the mixture (default 800)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    parser.add_argument("--processes", type=int, default=os.cpu_count(), help="cores to use (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the variants (default 1)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a training process of a variant
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.rows, args.seed, args.processes)
    n = args.processes
    variants = {f"1 process x {n} threads": (1, n), f"{n} processes x 1 thread (sft.processes)": (n, 1)}
    results: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeats):  # round-robin: a slow spell of a shared machine hits both alike
        for variant, (processes, threads) in variants.items():
            results[variant].append(run(processes, threads, args.rows, args.seed))
    table = Table("variant", "tokens/s", "wall s", "mean loss", "speed / the first's")
    first = next(iter(results.values()))
    for variant in variants:
        pairs = zip(results[variant], first, strict=True)
        ratios = [r["train_tokens_per_s"] / o["train_tokens_per_s"] for r, o in pairs]
        table.add_row(
            variant,
            " ".join(str(r["train_tokens_per_s"]) for r in results[variant]),
            " ".join(str(r["wall_seconds"]) for r in results[variant]),
            " ".join(str(r["train_loss"]) for r in results[variant]),
            " ".join(f"{x:.2f}x" for x in ratios),
        )
    Console().print(table)
    cpu = platform.processor() or platform.machine()
    print(f"{args.rows} rows of the sft mixture on {cpu}, {'bf16' if first[0]['bf16'] else 'fp32'}")


if __name__ == "__main__":
    main()
