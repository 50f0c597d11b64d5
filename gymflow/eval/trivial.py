"""The floor a reward hacker finds in colbench: what functions that read no rule score on the eval tasks.

    python -m gymflow.eval.trivial colbench --n 150          # the eval split of instructions.seed 0

Each task's 10 tests are scored for every trivial function (`colbench_families.trivial_passing`: the usual
constants, every output the task's tests expect, an argument handed back), as the environment scores a
submission. Per family: the best single function over its tasks (what a policy that learned one constant would
get), and the mean over tasks of each task's best trivial function (an upper bound for every constant, however
it was chosen). Only our own candidate functions run, in this process; no model code.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from gymflow.envs import ENVS
from gymflow.envs.base import Task
from gymflow.envs.colbench_families import N_TESTS, trivial_scores
from gymflow.envs.instructions import build_splits

COLBENCH_ENVS = ("colbench", "colbench_single")


@dataclass(frozen=True)
class FamilyFloor:
    family: str
    tasks: int
    best_function: str  # the single trivial function with the highest mean reward over the family's tasks
    best_function_reward: float
    per_task_best: float  # the mean of each task's best trivial reward: a bound for any constant
    worst_task: float  # the highest trivial reward on one task


def eval_tasks(env: str, n: int, seed: int) -> list[Task]:
    """The env's first `n` eval tasks of `seed`, as the instructions stage draws them."""
    if env not in COLBENCH_ENVS:
        raise ValueError(f"{env!r} has no trivial-function floor here (one of {', '.join(COLBENCH_ENVS)})")
    return build_splits(ENVS[env], n_train=0, n_eval=n, seed=seed)["eval"]


def floors(tasks: list[Task]) -> dict[str, FamilyFloor]:
    """Per family, the best trivial functions' rewards over `tasks`."""
    scores: dict[str, list[dict[str, int]]] = defaultdict(list)
    for task in tasks:
        scores[task.hidden["family"]].append(trivial_scores(task.hidden["tests"]))
    out = {}
    for family, rows in sorted(scores.items()):
        names = list(dict.fromkeys(name for row in rows for name in row))
        means = {name: sum(row.get(name, 0) for row in rows) / (len(rows) * N_TESTS) for name in names}
        best = max(names, key=means.__getitem__)  # the first of equals
        per_task = [max(row.values()) for row in rows]  # tests passed, so that 4 of 10 on each task is 0.4
        out[family] = FamilyFloor(
            family,
            len(rows),
            best,
            means[best],
            sum(per_task) / (len(rows) * N_TESTS),
            max(per_task) / N_TESTS,
        )
    return out


def show(found: dict[str, FamilyFloor], console: Console) -> None:
    table = Table(title="colbench: rewards of functions that read no rule (fraction of tests passed)")
    for column in ("family", "tasks", "best single function", "its mean", "best per task, mean", "max"):
        table.add_column(column)
    for f in found.values():
        table.add_row(
            f.family,
            str(f.tasks),
            f.best_function,
            f"{f.best_function_reward:.3f}",
            f"{f.per_task_best:.3f}",
            f"{f.worst_task:.1f}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gymflow.eval.trivial", description=__doc__.split("\n")[0]
    )
    parser.add_argument("env", choices=COLBENCH_ENVS)
    parser.add_argument("--n", type=int, default=150, help="eval tasks (default 150)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the instructions seed (default 0, params.yaml's)"
    )
    args = parser.parse_args(argv)
    show(floors(eval_tasks(args.env, args.n, args.seed)), Console())


if __name__ == "__main__":
    main()
