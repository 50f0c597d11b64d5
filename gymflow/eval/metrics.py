"""Evaluation metrics over episodes: success, reward, turns, and unbiased pass@k."""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k samples drawn without replacement from n, c of them correct, is correct
    (the unbiased estimator of Chen et al., 2021)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n, got k={k}, n={n}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def scenario_goal_completion(rows: list[dict[str, Any]], variants: int) -> tuple[float, int]:
    """AppWorld's SGC over greedy episodes whose task ids are "<scenario>_<variant>": the fraction of scenarios
    all of whose `variants` tasks succeeded, and how many scenarios had all of them played (the others are left
    out: a scenario cut short by the task draw is not a failure)."""
    scenarios: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        scenarios[row["task_id"].rsplit("_", 1)[0]].append(bool(row["success"]))
    complete = [all(ok) for ok in scenarios.values() if len(ok) == variants]
    return (round(sum(complete) / len(complete), 4) if complete else 0.0), len(complete)


def success_metrics(rows: list[dict[str, Any]], k: int, variants: int = 0) -> dict[str, dict[str, float]]:
    """Per difficulty (and "all"): greedy success (TGC), mean reward and mean turns over the sample-0 (greedy)
    episodes; pass@k over the sampled ones (sample >= 1); with `variants` (tasks per scenario, the
    environment's `EnvSpec.variants`) also SGC and how many scenarios it counts. Rows are `episodes` rows."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    per_task: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        if row["sample"] == 0:
            groups["all"].append(row)
            groups[row["difficulty"]].append(row)
        else:
            per_task[row["task_id"]].append(bool(row["success"]))
    out = {}
    for name, eps in sorted(groups.items()):
        summary = {
            "n": len(eps),
            "success": round(sum(bool(e["success"]) for e in eps) / len(eps), 4),
            "reward": round(sum(e["reward"] for e in eps) / len(eps), 4),
            "turns": round(sum(e["turns"] for e in eps) / len(eps), 2),
        }
        if variants:
            summary["sgc"], summary["scenarios"] = scenario_goal_completion(eps, variants)
        if k and per_task:
            scores = [pass_at_k(len(per_task[e["task_id"]]), sum(per_task[e["task_id"]]), k) for e in eps]
            summary[f"pass@{k}"] = round(sum(scores) / len(scores), 4)
        out[name] = summary
    return out
