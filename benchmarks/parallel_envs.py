"""Instructions and AgentTraj built one environment at a time against one process per core (what the
`instructions` and `trajectories` stages do), with the sizes in params.yaml.

Each path starts from an empty game cache (TextWorld compiles count) and writes into a temporary folder;
prints the wall time of both stages for each path and the ratio.

    python benchmarks/parallel_envs.py
"""

from __future__ import annotations

import os
import queue
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gymflow.config import load_params
from gymflow.envs.instructions import build_all, build_env, load_tasks
from gymflow.rollout.agenttraj import _collect_env, collect
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
        collect(tasks, root / "rollouts", root / "json", INFO)
    else:
        for env, env_tasks in tasks.items():
            _collect_env(env, env_tasks, root / "rollouts", root / "json", INFO, "x", queue.Queue())
    return built - start, time.perf_counter() - built


def main() -> None:
    times = {}
    for name, parallel in [("one env at a time", False), (f"{os.cpu_count()} processes", True)]:
        with tempfile.TemporaryDirectory() as tmp:
            times[name] = run(parallel, Path(tmp))
    table = Table(title="instructions + trajectories on the params.yaml sizes, empty game cache")
    for col in ["path", "instructions s", "trajectories s", "total s", "x sequential"]:
        table.add_column(col, justify="right")
    base = sum(next(iter(times.values())))
    for name, (a, b) in times.items():
        table.add_row(name, f"{a:.0f}", f"{b:.0f}", f"{a + b:.0f}", f"{base / (a + b):.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
