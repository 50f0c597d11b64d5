"""Instruction sets: a train split and a held-out eval split (AgentEval) per environment.

The splits share no `task_id` and are balanced over the environment's difficulties or categories.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import as_completed
from pathlib import Path

from gymflow import paths
from gymflow.envs import ENVS
from gymflow.envs.base import Env, Task
from gymflow.errors import UserError
from gymflow.store.io import read_rows, rebuild_hint, table_path, write_rows
from gymflow.workers import worker_pool


def quotas(n: int, levels: list[str], capacity: dict[str, int]) -> dict[str, int]:
    """Split `n` as evenly as possible over `levels`, none above its capacity (absent = unbounded).

    Earlier levels get the remainder; what a short level cannot take goes to the others.
    """
    quota = dict.fromkeys(levels, 0)
    room = {d: capacity.get(d, n) for d in levels}
    left, open_levels = n, [d for d in levels if room[d] > 0]
    while left > 0 and open_levels:
        share, extra = divmod(left, len(open_levels))
        for i, d in enumerate(open_levels):
            add = min(share + (i < extra), room[d] - quota[d])
            quota[d] += add
            left -= add
        open_levels = [d for d in open_levels if quota[d] < room[d]]
    return quota


def draw_balanced(
    stream: Iterable[Task],
    n: int,
    difficulties: list[str],
    exclude: set[str],
    split: str,
    capacity: dict[str, int] | None = None,
) -> list[Task]:
    """Take `n` distinct tasks from `stream`, as evenly over `difficulties` as the stream allows.

    The result takes the levels in turn (a, b, c, a, b, c, ...), so any prefix of it is balanced as well.
    Tasks whose id is in `exclude` are skipped. A difficulty the stream cannot fill is topped up
    from the others, so the result is short of `n` only when the stream runs dry. `capacity` (see
    `Env.capacity`) says up front which levels are short, so a slow finite stream is not read to its end.
    """
    levels = difficulties or ["any"]
    quota = quotas(n, levels, capacity or {})
    chosen: dict[str, list[Task]] = {d: [] for d in levels}
    spare: list[Task] = []
    seen = set(exclude)
    max_draws = 200 * max(n, 1) + 10_000  # endless streams with an unreachable level stop here
    for i, task in enumerate(stream):
        if i >= max_draws or all(len(chosen[d]) >= quota[d] for d in levels):
            break
        if task.task_id in seen:
            continue
        seen.add(task.task_id)
        level = task.difficulty if difficulties else "any"
        if level in chosen and len(chosen[level]) < quota[level]:
            chosen[level].append(task)
        elif len(spare) < n:
            spare.append(task)
    # Interleaved over levels, so that every prefix (AgentTraj takes one) is balanced too.
    tasks = [t for row in itertools.zip_longest(*chosen.values()) for t in row if t is not None]
    tasks += spare[: n - len(tasks)]
    return [dataclasses.replace(t, split=split) for t in tasks]


def build_splits(env_cls: type[Env], n_train: int, n_eval: int, seed: int) -> dict[str, list[Task]]:
    """Draw the eval split first (so it is full and balanced), then train from the rest."""
    levels = env_cls.difficulties()
    eval_stream = env_cls.generate("eval", seed)
    eval_tasks = draw_balanced(eval_stream, n_eval, levels, set(), "eval", env_cls.capacity("eval"))
    eval_ids = {t.task_id for t in eval_tasks}
    train_stream = env_cls.generate("train", seed + 1)
    train_tasks = draw_balanced(train_stream, n_train, levels, eval_ids, "train", env_cls.capacity("train"))
    return {"train": train_tasks, "eval": eval_tasks}


def tasks_file(data_dir: str | Path, env: str) -> Path:
    return table_path(paths.under(data_dir, paths.INSTRUCTIONS), env, "tasks")


def save_tasks(data_dir: str | Path, env: str, splits: dict[str, list[Task]]) -> Path:
    rows = [t.to_row() for split in splits.values() for t in split]
    return write_rows(tasks_file(data_dir, env), "tasks", rows)


def load_tasks(data_dir: str | Path, env: str, split: str | None = None) -> list[Task]:
    path = tasks_file(data_dir, env)
    if not path.exists():
        raise UserError(f"no instructions for {env!r} in {path.parent}: run `dvc repro instructions` first")
    rows = read_rows(path, "tasks")  # a damaged file is a one-line error that says how to rebuild it
    try:
        tasks = [Task.from_row(r) for r in rows]
    except (ValueError, TypeError, KeyError) as e:  # the right columns, but values no Task holds
        raise UserError(f"{path} has a task that does not load ({e}): {rebuild_hint(path)}") from None
    return [t for t in tasks if split is None or t.split == split]


def build_env(
    data_dir: str | Path, env: str, n_train: int, n_eval: int, seed: int, view: str | None = None
) -> dict[str, int]:
    """Draw and save one environment's splits, shown in `view` (the game's default if None); how many tasks each
    holds. The view travels in each task's `hidden`, so whoever plays the row (a stage, a server) shows it."""
    splits = build_splits(ENVS[env], n_train=n_train, n_eval=n_eval, seed=seed)
    if view is not None:
        splits = {name: [with_view(t, view) for t in tasks] for name, tasks in splits.items()}
    save_tasks(data_dir, env, splits)
    return {split: len(tasks) for split, tasks in splits.items()}


def with_view(task: Task, view: str) -> Task:
    return dataclasses.replace(task, hidden={**task.hidden, "view": view})


def build_all(
    data_dir: str | Path, sizes: dict[str, tuple[int, int]], seed: int, views: dict[str, str] | None = None
) -> Iterator[tuple[str, dict[str, int]]]:
    """`build_env` for every env -> (train, eval) in `sizes`, one process per core, yielded as each ends:
    the slow ones (TextWorld games, ScienceWorld gold paths) overlap (`benchmarks/parallel_envs.py`)."""
    views = views or {}
    with worker_pool(max(1, min(len(sizes), os.cpu_count() or 1))) as pool:  # workers die with the stage
        jobs = {
            pool.submit(build_env, data_dir, env, *n, seed, views.get(env)): env for env, n in sizes.items()
        }
        for job in as_completed(jobs):
            yield jobs[job], job.result()
