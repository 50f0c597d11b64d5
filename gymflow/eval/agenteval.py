"""AgentEval: a policy plays the held-out split of each environment, greedily and with k samples.

Every episode goes to the rollout tables (stage "evaluate"; sample 0 is greedy, 1..k sampled), so results
can be re-cut in SQL; the summary per environment and difficulty is what `dvc metrics show` reads. Where ending a
task at once earns reward (apps), the summary has `noop_reward` beside `reward`: that floor, over the same tasks.
An environment whose rollouts were written with the same settings is not played again (resume).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from gymflow.config import PLACEMENT, EvalParams, RolloutParams
from gymflow.envs import ENVS
from gymflow.envs.base import Task
from gymflow.eval.behaviour import BEHAVIOUR_ENVS, behaviour_metrics
from gymflow.eval.metrics import success_metrics
from gymflow.rollout.distributed import Placement
from gymflow.rollout.engine import SamplingConfig
from gymflow.rollout.play import drop_others, load_policy, play, stored_speed
from gymflow.rollout.records import RunInfo
from gymflow.store.io import read_rows


def evaluate_policy(
    name: str,
    model_dir: str | Path,
    tasks: dict[str, list[Task]],
    cfg: EvalParams,
    rollout_cfg: RolloutParams,
    rollout_dir: Path,
) -> dict[str, dict[str, Any]]:
    """Play every task of every environment with the policy in `model_dir` (how: `rollout_cfg`); metrics per
    environment."""
    server = rollout_cfg.server_for(name)
    policy = load_policy(name, model_dir, server)
    info = RunInfo(run="main", stage="evaluate", iteration=0, policy=name, policy_hash=policy.weights_hash)
    # what else runs does not change this one; the keys of the single section this was before `rollout:` had
    # its own, so rollouts stored by then stay current
    how = [cfg.model_dump(exclude={"envs", "limit"}) | rollout_cfg.model_dump(exclude=PLACEMENT), server]
    where = Placement.of(rollout_cfg, name)
    greedy = SamplingConfig.from_rollout(rollout_cfg, temperature=0.0)
    sampled = SamplingConfig.from_rollout(rollout_cfg, temperature=cfg.temperature, top_p=cfg.top_p)
    results = {}
    drop_others(rollout_dir / name, list(tasks))
    for env, env_tasks in tasks.items():
        runs = [([(t, 0) for t in env_tasks], greedy)]
        if cfg.k:
            runs.append(([(t, i) for t in env_tasks for i in range(1, cfg.k + 1)], sampled))
        path = play(policy, runs, cfg.seed, rollout_dir / name, env, info, how, where)
        results[env] = summarize_file(path, cfg.k, ENVS[env].spec.variants)
        for level, floor in noop_rewards(env, env_tasks).items():
            if level in results[env]:
                results[env][level]["noop_reward"] = floor
        if env in BEHAVIOUR_ENVS:  # LOOP's Figure 3a, over every episode of this evaluation
            results[env]["behaviour"] = behaviour_metrics(path.parent, f"env = '{env}'")
    return results


def noop_rewards(env: str, tasks: list[Task]) -> dict[str, float]:
    """Per difficulty and "all", the mean reward of ending each task at once (`Env.noop_reward`), rounded as
    the metrics are; empty where the environment pays nothing for it."""
    floors = [(task.difficulty, ENVS[env].noop_reward(task)) for task in tasks]
    groups: dict[str, list[float]] = defaultdict(list)
    for level, floor in floors:
        if floor is None:
            return {}
        groups["all"].append(floor)
        groups[level].append(floor)
    return {name: round(sum(values) / len(values), 4) for name, values in groups.items()}


def summarize_file(path: Path, k: int, variants: int = 0) -> dict[str, Any]:
    """The metrics of one stored evaluation, read back from its episodes table; "all" carries the speed of
    the rollouts that wrote it."""
    summary = success_metrics(read_rows(path), k, variants)
    summary["all"].update(stored_speed(path))
    return summary
