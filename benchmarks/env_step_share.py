"""How much of an evaluation the environments take: the bound on moving their steps off the decoder's path.

The engine steps every episode's environment between two turns of decoding, in the same process; a pipeline
that stepped them elsewhere while the model decodes could gain at most 1 / (1 - share), where share is the
fraction of the wall time spent in those steps and resets. Per environment, the policy plays `--tasks` held-out
tasks greedily as `rollout` in params.yaml says (batch, lengths), and the table gives the wall time, the seconds
in `Env.reset` and `Env.step` (with the reply's parsing and the next prompt's tokens, which the engine does
beside each step), that share, and the bound.

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
    engine._advance = timed(engine._advance)  # the step and what the engine does beside it
    engine.start_batch = timed(engine.start_batch)  # the resets
    table = Table(
        "env", "episodes", "wall s", "env s", "share", "bound 1/(1-share)",
        title=f"{args.policy}: environment time in an evaluation ({torch.get_num_threads()} threads)",
    )  # fmt: skip
    for env in envs:
        jobs = [(task, 0) for task in load_tasks(paths.DATA, env, "eval")[: args.tasks]]
        spent["env"] = 0.0
        start = time.perf_counter()
        episodes = engine.rollout(policy.sampler, policy.fmt, jobs, cfg, desc=env)
        wall = time.perf_counter() - start
        share = spent["env"] / wall
        table.add_row(
            env,
            str(len(episodes)),
            f"{wall:.1f}",
            f"{spent['env']:.1f}",
            f"{share:.2f}",
            f"{1 / (1 - share):.2f}x",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
