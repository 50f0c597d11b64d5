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


def success_metrics(rows: list[dict[str, Any]], k: int) -> dict[str, dict[str, float]]:
    """Per difficulty (and "all"): greedy success, mean reward and mean turns over the sample-0 (greedy)
    episodes; pass@k over the sampled ones (sample >= 1). Rows are `episodes` table rows."""
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
        if k and per_task:
            scores = [pass_at_k(len(per_task[e["task_id"]]), sum(per_task[e["task_id"]]), k) for e in eps]
            summary[f"pass@{k}"] = round(sum(scores) / len(scores), 4)
        out[name] = summary
    return out
