"""SWEET-RL's offline data (paper 003, section 5.1): the agent plays a seeded draw of train tasks several times
each at a temperature, every episode kept in the rollout tables (stage "offline"). The critic, SWEET-RL's
actor, rejection fine-tuning and multi-turn DPO all learn from exactly these episodes."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gymflow.config import OfflineParams, RolloutParams
from gymflow.envs.base import Task
from gymflow.rollout.distributed import Placement
from gymflow.rollout.engine import SamplingConfig
from gymflow.rollout.play import load_policy, play
from gymflow.rollout.records import RunInfo
from gymflow.store.db import connect
from gymflow.train.draws import draw_tasks

EPISODES_SQL = "select task_id, success, reward from episodes"


def offline_numbers(rows: Sequence[tuple[str, bool, float]]) -> dict[str, Any]:
    """The data's numbers from its (task, success, reward) rows, the same whatever their order: DuckDB's
    parallel sums add in the order its threads finish, which moved the mean reward's fourth digit between runs
    of the same episodes (0.1738 and 0.1739); `math.fsum` rounds the exact sum."""
    rewards: dict[str, set[float]] = defaultdict(set)
    for task_id, _, reward in rows:
        rewards[task_id].add(reward)
    return {
        "episodes": len(rows),
        "success": round(math.fsum(success for _, success, _ in rows) / len(rows), 4),
        "reward": round(math.fsum(reward for *_, reward in rows) / len(rows), 4),
        "tasks": len(rewards),
        # tasks whose samples' rewards differ: the ones pairs come from
        "tasks_with_pairs": sum(len(seen) > 1 for seen in rewards.values()),
    }


def collect_offline(
    agent: str,
    model_dir: Path,
    env: str,
    tasks: list[Task],
    offline: OfflineParams,
    seed: int,
    rollout_cfg: RolloutParams,
    out_dir: Path,
) -> dict[str, Any]:
    """Play `offline.tasks` drawn train tasks `offline.samples` times each; the data's numbers."""
    policy = load_policy(agent, model_dir, rollout_cfg.server_for(agent))
    info = RunInfo("main", "offline", 0, agent, policy.weights_hash)
    sampling = SamplingConfig.from_rollout(rollout_cfg, temperature=offline.temperature)
    drawn = draw_tasks(tasks, offline.tasks, seed, 0)
    jobs = [(t, i) for t in drawn for i in range(offline.samples)]
    play(
        policy,
        [(jobs, sampling)],
        seed,
        out_dir,
        env,
        info,
        [sampling.__dict__, offline.model_dump(), seed],
        Placement.of(rollout_cfg, agent),
    )
    return offline_numbers(connect(out_dir).execute(EPISODES_SQL).fetchall())
