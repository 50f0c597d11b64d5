"""What playing elsewhere costs: environment steps in process against over HTTP (`gymflow serve-env`), and
rollout episodes per second of the in-process engine against 1 and 2 Ray workers, on the same work.

1. Steps: the expert's actions for `--tasks` eval tasks of each environment, replayed in process and through
   `HttpEnv` against a local server; steps per second of each, their ratio, and the overhead per step.
2. Rollouts: the SFT agent (data/models/sft; `dvc repro sft` first) plays `--episodes` eval tasks of each of
   `--envs` greedily: the local engine (one process, with torch's threads and with one), then Ray with 1 and
   with 2 workers (one core and one thread each), the environments in process. Run it on an idle machine:
   torch's threads on cores another process uses run many times slower. Episodes per second, the ratios, and whether every episode
   came out the same.

    python benchmarks/distributed_rollout.py [--tasks 20] [--episodes 64] [--envs maze babyai]
"""

from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.envs import make_env
from gymflow.envs.instructions import load_tasks
from gymflow.remote.env_client import HttpEnv
from gymflow.remote.env_server import running
from gymflow.rollout.distributed import Placement, play_jobs
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.rollout.expert import run_expert
from gymflow.rollout.play import load_policy

STEP_ENVS = ["maze", "wordle", "textcraft", "babyai", "colbench", "apps"]


def replay(env, episodes: list[tuple[object, list[str]]]) -> tuple[float, int]:
    """Seconds to reset and play every (task, actions); how many steps."""
    start, steps = time.perf_counter(), 0
    for task, actions in episodes:
        env.reset(task)
        for action in actions:
            env.step(action)
            steps += 1
    return time.perf_counter() - start, steps


def steps_table(n_tasks: int) -> Table:
    table = Table("env", "steps", "in process steps/s", "HTTP steps/s", "ratio", "overhead ms/step")
    for name in STEP_ENVS:
        tasks = load_tasks("data", name, "eval")[:n_tasks]
        local = make_env(name)
        episodes = [
            (t, [m.action for m in run_expert(local, t).messages if m.role == "assistant"]) for t in tasks
        ]
        local_s, steps = replay(local, episodes)
        local.close()
        with running(name) as url:
            remote = HttpEnv(name, [url])
            replay(remote, episodes[:1])  # the session and the connection, made once
            http_s, _ = replay(remote, episodes)
            remote.close()
        table.add_row(
            name,
            str(steps),
            f"{steps / local_s:,.0f}",
            f"{steps / http_s:,.0f}",
            f"{local_s / http_s:.2f}x",
            f"{(http_s - local_s) / steps * 1000:.2f}",
        )
    return table


def rollout_table(n_episodes: int, envs: list[str]) -> tuple[Table, bool]:
    policy = load_policy("sft", paths.model("sft"))
    cfg = SamplingConfig(temperature=0.0, max_new_tokens=128, max_length=4096, batch_size=32)
    jobs = [(t, 0) for env in envs for t in load_tasks("data", env, "eval")[: n_episodes // len(envs)]]
    runs: dict[str, tuple[float, list]] = {}
    threads = torch.get_num_threads()
    for n in sorted({threads, 1}, reverse=True):
        torch.set_num_threads(n)
        rollout(policy.sampler, policy.fmt, jobs[:1], cfg)  # warm: the first forward pass allocates
        start = time.perf_counter()
        episodes = rollout(policy.sampler, policy.fmt, jobs, cfg)
        runs[f"in process, {n} thread{'s' * (n > 1)}"] = (time.perf_counter() - start, episodes)
    torch.set_num_threads(threads)
    for workers in (1, 2):
        where = Placement("ray", workers=workers)
        play_jobs(policy.sampler, policy.fmt, jobs[:1], cfg, where=where)  # start Ray and its workers once
        start = time.perf_counter()
        episodes = play_jobs(policy.sampler, policy.fmt, jobs, cfg, where=where)
        runs[f"ray, {workers} worker{'s' * (workers > 1)}"] = (time.perf_counter() - start, episodes)
        import ray

        ray.shutdown()  # the next count starts its own instance
    base_s, base = next(iter(runs.values()))
    table = Table("engine", "episodes", "seconds", "episodes/s", "vs in-process", "vs 1 ray worker")
    one_s = runs["ray, 1 worker"][0]
    identical = True
    for name, (seconds, episodes) in runs.items():
        identical &= [[m.token_ids for m in e.messages] for e in episodes] == [
            [m.token_ids for m in e.messages] for e in base
        ]
        table.add_row(
            name,
            str(len(episodes)),
            f"{seconds:.1f}",
            f"{len(episodes) / seconds:.2f}",
            f"{base_s / seconds:.2f}x",
            f"{one_s / seconds:.2f}x",
        )
    return table, identical


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--tasks", type=int, default=20, help="eval tasks per environment for the step timing"
    )
    parser.add_argument("--episodes", type=int, default=64, help="episodes per rollout engine")
    parser.add_argument("--envs", nargs="+", default=["maze", "babyai"])
    args = parser.parse_args()
    console = Console()
    console.print(f"torch threads in process: {torch.get_num_threads()}")
    console.print(steps_table(args.tasks))
    table, identical = rollout_table(args.episodes, args.envs)
    console.print(table)
    console.print(f"every engine's episodes have the in-process engine's token ids: {identical}")


if __name__ == "__main__":
    main()
