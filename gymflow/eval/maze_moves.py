"""Which moves a maze policy executed: along a shortest path to the goal, another open way, or invalid (no move,
or into a wall). Tells a chooser that picks worse moves (Best-of-N's critics) from one that picks better ones,
and a critic's preference pairs (SWEET-RL's actor learns from) whose chosen replies are no better than their
rejected ones.

    python -m gymflow.eval.maze_moves data/rollouts/best_of_n          # per table (e.g. hidden.n08), JSON
    python -m gymflow.eval.maze_moves data/rollouts/evaluate/sft --tasks data
    python -m gymflow.eval.maze_moves data/rollouts/offline --pairs data/sweet/pairs.parquet

Each episode is replayed on its task (read from the instruction tables under `--tasks`), move by move; a pair's
two replies are judged where its offline episode stood before that turn.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

from gymflow import paths
from gymflow.agent.react import parse_action
from gymflow.envs.base import Task
from gymflow.envs.instructions import load_tasks
from gymflow.envs.maze import MOVES, Maze, shortest_path
from gymflow.errors import UserError, run_command
from gymflow.store.db import read_only


def kind(env: Maze, action: str | None) -> str:
    """What `action` is where the agent in `env` stands: "shortest" (the first move of a shortest path to the
    goal), "other" (another open way) or "invalid" (no move, or a wall)."""
    words = (action or "").lower().split()
    move = words[-1] if words else None
    if move not in MOVES or move not in env.open[env.pos[0]][env.pos[1]]:
        return "invalid"
    return "shortest" if move == shortest_path(env.open, env.pos, env.goal)[0] else "other"


def classify(task: Task, actions: Iterable[str | None]) -> dict[str, int]:
    """Counts of each `kind` of `actions` (an episode's parsed actions, in order) played on `task`."""
    env = Maze()
    env.reset(task)
    counts = {"shortest": 0, "other": 0, "invalid": 0}
    for action in actions:
        counts[kind(env, action)] += 1
        if env.step(action or "").done:
            break
    return counts


def pair_shares(
    pairs: str | Path, offline: str | Path, tasks_dir: str | Path = paths.DATA
) -> dict[str, dict[str, float]]:
    """Of a turn-pair table's maze pairs, the share of each `kind` among the chosen replies and among the
    rejected ones, each judged where its offline episode (under `offline`) stood before the pair's turn."""
    if not Path(pairs).is_file():
        raise UserError(f"{pairs} is not a pairs table: name one, e.g. data/sweet/pairs.parquet")
    rows = [r for r in pq.read_table(pairs).to_pylist() if r["env"] == "maze"]
    if not rows:
        raise UserError(f"no maze pairs in {pairs}")
    by_id = {t.task_id: t for t in load_tasks(tasks_dir, "maze")}
    played = read_only(offline).execute(
        """select e.episode_id, any_value(e.task_id), list(t.turn order by t.turn), list(t.action order by t.turn)
           from episodes e join turns t using (episode_id)
           where e.env = 'maze' and t.role = 'assistant' group by all"""
    )
    episodes = {eid: (task_id, turns, actions) for eid, task_id, turns, actions in played.fetchall()}
    totals = {side: {"shortest": 0, "other": 0, "invalid": 0} for side in ("chosen", "rejected")}
    for pair in rows:
        if pair["episode_id"] not in episodes:
            raise UserError(
                f"episode {pair['episode_id']} is not under {offline}: name the pairs' offline data"
            )
        task_id, turns, actions = episodes[pair["episode_id"]]
        if task_id not in by_id:
            raise UserError(
                f"task {task_id} is not in the instruction tables given: pass the run's with --tasks"
            )
        env = Maze()
        env.reset(by_id[task_id])
        for turn, action in zip(turns, actions, strict=True):
            if turn >= pair["turn"]:
                break
            env.step(action or "")
        for side in totals:
            totals[side][kind(env, parse_action(pair[f"{side}_text"]))] += 1
    return {
        side: {k: round(n / len(rows), 4) for k, n in counts.items()} | {"pairs": len(rows)}
        for side, counts in totals.items()
    }


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
    p.add_argument(
        "--pairs",
        help="a turn-pair table (e.g. data/sweet/pairs.parquet) whose episodes are the rollouts: judge its "
        "chosen and rejected replies instead",
    )
    args = p.parse_args(argv)
    if args.pairs:
        print(json.dumps(pair_shares(args.pairs, args.rollouts, args.tasks), indent=2))
    else:
        print(json.dumps(move_shares(args.rollouts, args.tasks), indent=2))


if __name__ == "__main__":
    run_command(main)
