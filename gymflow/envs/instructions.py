"""Instruction sets: a train split and a held-out eval split (AgentEval) per environment.

The splits share no `task_id` and are balanced over the environment's difficulties or categories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from gymflow.envs.base import Env, Task
from gymflow.errors import UserError
from gymflow.store.io import read_rows, table_path, write_rows


def draw_balanced(
    stream: Iterable[Task], n: int, difficulties: list[str], exclude: set[str], split: str
) -> list[Task]:
    """Take `n` distinct tasks from `stream`, as evenly over `difficulties` as the stream allows.

    Tasks whose id is in `exclude` are skipped. A difficulty the stream cannot fill is topped up
    from the others, so the result is short of `n` only when the stream runs dry.
    """
    levels = difficulties or ["any"]
    quota = {d: n // len(levels) + (i < n % len(levels)) for i, d in enumerate(levels)}
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
    tasks = [t for d in levels for t in chosen[d]]
    tasks += spare[: n - len(tasks)]
    return [dataclasses.replace(t, split=split) for t in tasks]


def build_splits(env_cls: type[Env], n_train: int, n_eval: int, seed: int) -> dict[str, list[Task]]:
    """Draw the eval split first (so it is full and balanced), then train from the rest."""
    levels = env_cls.difficulties()
    eval_tasks = draw_balanced(env_cls.generate("eval", seed), n_eval, levels, set(), "eval")
    eval_ids = {t.task_id for t in eval_tasks}
    train_tasks = draw_balanced(env_cls.generate("train", seed + 1), n_train, levels, eval_ids, "train")
    return {"train": train_tasks, "eval": eval_tasks}


def tasks_file(data_dir: str | Path, env: str) -> Path:
    return table_path(Path(data_dir) / "instructions", env, "tasks")


def save_tasks(data_dir: str | Path, env: str, splits: dict[str, list[Task]]) -> Path:
    rows = [t.to_row() for split in splits.values() for t in split]
    return write_rows(tasks_file(data_dir, env), "tasks", rows)


def load_tasks(data_dir: str | Path, env: str, split: str | None = None) -> list[Task]:
    path = tasks_file(data_dir, env)
    if not path.exists():
        raise UserError(f"no instructions for {env!r} in {path.parent}: run `dvc repro instructions` first")
    tasks = [Task.from_row(r) for r in read_rows(path)]
    return [t for t in tasks if split is None or t.split == split]
