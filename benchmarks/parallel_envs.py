"""Instructions and AgentTraj built one environment at a time against one process per core (what the
`instructions` and `trajectories` stages do), with the sizes in params.yaml.

Each path runs in a fresh process (no warm in-memory caches carried over), starts from an empty game cache
(TextWorld compiles count) and writes into a temporary folder; prints the wall time of both stages for each
path and the ratio.

    python benchmarks/parallel_envs.py
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gymflow.config import load_params
from gymflow.envs.instructions import build_all, build_env, load_tasks
from gymflow.rollout.agenttraj import _gather_env, gather_trajectories
from gymflow.rollout.records import RunInfo

INFO = RunInfo(run="bench", stage="trajectories", iteration=0, policy="expert")


def run(parallel: bool, root: Path) -> tuple[float, float]:
    params = load_params()
    os.environ["GYMFLOW_CACHE"] = str(root / "cache")
    cfg = params.instructions
    sizes = {env: (cfg.train[env], cfg.eval[env]) for env in params.envs}
    start = time.perf_counter()
    if parallel:
        list(build_all(root, sizes, cfg.seed))
    else:
        for env, n in sizes.items():
            build_env(root, env, *n, cfg.seed)
    built = time.perf_counter()
    n = params.trajectories.tasks
    tasks = {env: load_tasks(root, env, "train")[: n[env]] for env in params.envs}
    if parallel:
        gather_trajectories(tasks, root / "rollouts", root / "json", INFO)
    else:
        for env, env_tasks in tasks.items():
            _gather_env(env, env_tasks, root / "rollouts", root / "json", INFO, "x", queue.Queue())
    return built - start, time.perf_counter() - built


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--path",
        choices=["sequential", "parallel"],
        help="run only this path, in this process, and print its times as JSON (how the benchmark runs each)",
    )
    path = parser.parse_args().path
    if path:  # one path, in this fresh process
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run(path == "parallel", Path(tmp))))
        return
    times = {}
    for name, path in [("one env at a time", "sequential"), (f"{os.cpu_count()} processes", "parallel")]:
        out = subprocess.run(
            [sys.executable, __file__, "--path", path], check=True, capture_output=True, text=True
        ).stdout
        times[name] = json.loads(out.strip().splitlines()[-1])
    table = Table(title="instructions + trajectories on the params.yaml sizes, empty game cache")
    for col in ["path", "instructions s", "trajectories s", "total s", "x sequential"]:
        table.add_column(col, justify="right")
    base = sum(next(iter(times.values())))
    for name, (a, b) in times.items():
        table.add_row(name, f"{a:.0f}", f"{b:.0f}", f"{a + b:.0f}", f"{base / (a + b):.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
