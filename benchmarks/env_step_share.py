"""How much of an evaluation the environments take, and what stepping them at once saves.

The engine resets and steps every episode's environment between two turns of decoding. Where an environment
waits on another process (`Env.waits_on_process`: colbench's tests in the sandbox, apps' cells, a served
environment), it resets and steps a batch's episodes on one thread per core (`engine.each`), so the waits overlap.
Per environment, the policy plays `--tasks` held-out tasks greedily as `rollout` in params.yaml says (batch,
lengths), twice: with every reset and step one after another, then as the engine does. The table gives each
run's wall time, its seconds in resets and steps, their share of the wall time, the ratio of the two wall times,
and whether the two runs played the same episodes (they must: each episode has its own environment).

    python benchmarks/env_step_share.py [--policy sft] [--tasks 64] [--envs maze babyai textcraft apps ...]
Needs a finished run's instructions and data/models/<policy> (the committed run's after `dvc checkout`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import wraps

import torch
from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.rollout import engine
from gymflow.rollout.play import load_policy

spent = {"env": 0.0}


def timed(fn: Callable) -> Callable:
    """`fn`, adding its seconds to `spent["env"]`."""

    @wraps(fn)
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent["env"] += time.perf_counter() - start

    return run


def one_at_a_time(fn, items):
    """`engine.each` as it was: every reset or step after the one before."""
    return [fn(item) for item in items]


def play(policy, jobs, cfg, env: str, each: Callable) -> tuple[list, float, float]:
    """The episodes, wall seconds and seconds in resets and steps of one evaluation with `each`."""
    engine.each = timed(each)
    spent["env"] = 0.0
    start = time.perf_counter()
    episodes = engine.rollout(policy.sampler, policy.fmt, jobs, cfg, desc=env)
    return episodes, time.perf_counter() - start, spent["env"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default="sft", help="a directory under data/models")
    parser.add_argument("--tasks", type=int, default=64, help="held-out tasks per environment (a prefix)")
    parser.add_argument("--envs", nargs="+", help="environments (default: evaluate.envs)")
    args = parser.parse_args()
    params = load_params()
    envs = args.envs or params.evaluate.envs
    policy = load_policy(args.policy, paths.model(args.policy))
    cfg = engine.SamplingConfig.from_rollout(params.rollout, temperature=0.0)
    at_once = engine.each
    table = Table(
        "env", "episodes", "one at a time: wall s", "env s", "share", "at once: wall s", "env s",
        "x one at a time", "same episodes",
        title=f"{args.policy}: environment time in an evaluation ({torch.get_num_threads()} threads)",
    )  # fmt: skip
    for env in envs:
        jobs = [(task, 0) for task in load_tasks(paths.DATA, env, "eval")[: args.tasks]]
        serial, serial_wall, serial_env = play(policy, jobs, cfg, env, one_at_a_time)
        ours, wall, env_s = play(policy, jobs, cfg, env, at_once)
        same = [e.messages for e in serial] == [e.messages for e in ours]
        table.add_row(
            env,
            str(len(ours)),
            f"{serial_wall:.1f}",
            f"{serial_env:.1f}",
            f"{serial_env / serial_wall:.2f}",
            f"{wall:.1f}",
            f"{env_s:.1f}",
            f"{serial_wall / wall:.2f}",
            "yes" if same else "NO",
        )
    engine.each = at_once
    Console().print(table)


if __name__ == "__main__":
    main()
