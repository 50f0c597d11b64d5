"""SWEET-RL's offline data (paper 003, section 5.1): the agent plays a seeded draw of train tasks several times
each at a temperature, every episode kept in the rollout tables (stage "offline"). The critic, SWEET-RL's
actor, rejection fine-tuning and multi-turn DPO all learn from exactly these episodes."""

from __future__ import annotations

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

# Per task: were its samples' rewards different? Pairs (critic, multi-turn DPO) need two rewards to rank.
OFFLINE_SQL = """
with per_task as (
    select task_id, count(*) as n, avg(success) as success, avg(reward) as reward,
           count(distinct reward) > 1 as ranked
    from episodes group by task_id
)
select sum(n), sum(success * n) / sum(n), sum(reward * n) / sum(n), count(*), sum(ranked::integer)
from per_task
"""


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
    episodes, success, reward, n_tasks, ranked = connect(out_dir).execute(OFFLINE_SQL).fetchone()
    return {
        "episodes": episodes,
        "success": round(success, 4),
        "reward": round(reward, 4),
        "tasks": n_tasks,
        "tasks_with_pairs": ranked,  # tasks whose samples' rewards differ: the ones pairs come from
    }
