"""Which moves a maze policy executed: along a shortest path to the goal, another open way, or invalid (no move,
or into a wall). Tells a chooser that picks worse moves (Best-of-N's critics) from one that picks better ones.

    python -m gymflow.eval.maze_moves data/rollouts/best_of_n          # per table (e.g. hidden.n08), JSON
    python -m gymflow.eval.maze_moves data/rollouts/evaluate/sft --tasks data

Each episode is replayed on its task (read from the instruction tables under `--tasks`), move by move.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

from gymflow import paths
from gymflow.envs.base import Task
from gymflow.envs.instructions import load_tasks
from gymflow.envs.maze import MOVES, Maze, shortest_path
from gymflow.errors import UserError, run_command
from gymflow.store.db import read_only


def classify(task: Task, actions: Iterable[str | None]) -> dict[str, int]:
    """Counts of `actions` (an episode's parsed actions, in order) played on `task`: "shortest" (the first move
    of a shortest path from where the agent stood), "other" (another open way), "invalid" (no move, or a wall)."""
    env = Maze()
    env.reset(task)
    counts = {"shortest": 0, "other": 0, "invalid": 0}
    for action in actions:
        words = (action or "").lower().split()
        move = words[-1] if words else None
        if move not in MOVES or move not in env.open[env.pos[0]][env.pos[1]]:
            counts["invalid"] += 1
        elif move == shortest_path(env.open, env.pos, env.goal)[0]:
            counts["shortest"] += 1
        else:
            counts["other"] += 1
        if env.step(action or "").done:
            break
    return counts


def move_shares(rollouts: str | Path, tasks_dir: str | Path = paths.DATA) -> dict[str, dict[str, float]]:
    """Per table prefix (its episodes' `policy` and `iteration`), the share of each kind of move over all its
    maze episodes, and how many moves; the tasks are read from the instruction tables under `tasks_dir`."""
    if not Path(rollouts).is_dir():
        raise UserError(
            f"{rollouts} is not a folder of rollout tables: name one, e.g. data/rollouts/best_of_n"
        )
    by_id = {t.task_id: t for t in load_tasks(tasks_dir, "maze")}
    rows = (
        read_only(rollouts)
        .execute(
            """select e.policy, e.iteration, e.episode_id, e.task_id, list(t.action order by t.turn)
           from episodes e join turns t using (episode_id)
           where e.env = 'maze' and t.role = 'assistant' group by all order by all"""
        )
        .fetchall()
    )
    totals: dict[str, dict[str, int]] = {}
    for policy, iteration, _, task_id, actions in rows:
        if task_id not in by_id:
            raise UserError(
                f"task {task_id} is not in the instruction tables given: pass the run's with --tasks"
            )
        key = f"{policy} (iteration {iteration})"
        counts = classify(by_id[task_id], actions)
        total = totals.setdefault(key, dict.fromkeys(counts, 0))
        for kind, n in counts.items():
            total[kind] += n
    if not totals:
        raise UserError(f"no maze episodes under {rollouts}: name a folder whose tables hold some")
    return {
        key: {kind: round(n / max(1, sum(c.values())), 4) for kind, n in c.items()}
        | {"moves": sum(c.values())}
        for key, c in totals.items()
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m gymflow.eval.maze_moves", description=__doc__.splitlines()[0])
    p.add_argument("rollouts", help="a folder of rollout tables (e.g. data/rollouts/best_of_n)")
    p.add_argument(
        "--tasks", default=str(paths.DATA), help=f"where the instruction tables are (default: {paths.DATA})"
    )
    args = p.parse_args(argv)
    print(json.dumps(move_shares(args.rollouts, args.tasks), indent=2))


if __name__ == "__main__":
    run_command(main)
