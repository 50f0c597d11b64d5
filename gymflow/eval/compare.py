"""Paired comparisons on held-out tasks: does a method beat the agent it is compared with, beyond noise?

Two policies evaluated greedily on the same held-out tasks give, per task, a difference of success (1, 0 or -1).
Their mean is the method's gain; its standard error is the sample standard deviation of the differences over
the square root of their number (a paired test: the task's own difficulty cancels). Summaries (n, mean, sd)
pool exactly over seeds (`pool`), so the flow over seeds reports the same statistic on all its pairs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from gymflow.errors import UserError
from gymflow.store.io import read_rows, table_path


@dataclass(frozen=True)
class Paired:
    """Per-task differences of success, method minus baseline, summarised."""

    n: int
    mean: float
    sd: float  # sample standard deviation (n - 1)
    method: float  # the method's own success on the paired tasks
    baseline: float

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n) if self.n > 1 else math.inf

    @property
    def z(self) -> float:
        """The mean in standard errors (0 when both agree on every task)."""
        if self.mean == 0:
            return 0.0
        return self.mean / self.se if self.se > 0 else math.copysign(math.inf, self.mean)

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"se": self.se, "z": self.z}


def paired(method: dict[str, float], baseline: dict[str, float]) -> Paired:
    """Compare two {task_id: success} maps on the tasks both played."""
    tasks = sorted(method.keys() & baseline.keys())
    if not tasks:
        raise UserError("no held-out task was played by both policies: evaluate them on the same tasks")
    diffs = [method[t] - baseline[t] for t in tasks]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    return Paired(n, mean, sd, sum(method[t] for t in tasks) / n, sum(baseline[t] for t in tasks) / n)


def pool(parts: list[Paired]) -> Paired:
    """The summary of all the parts' differences together (seeds with their own tasks), computed exactly from
    each part's n, mean and sd."""
    n = sum(p.n for p in parts)
    mean = sum(p.n * p.mean for p in parts) / n
    squares = sum((p.n - 1) * p.sd**2 + p.n * (p.mean - mean) ** 2 for p in parts)
    return Paired(
        n,
        mean,
        math.sqrt(squares / (n - 1)) if n > 1 else 0.0,
        sum(p.n * p.method for p in parts) / n,
        sum(p.n * p.baseline for p in parts) / n,
    )


def greedy_success(rollouts: str | Path, policy: str, env: str) -> dict[str, float]:
    """{task_id: success} of a policy's greedy evaluation episodes (sample 0) in one environment."""
    path = table_path(Path(rollouts) / policy, env, "episodes")
    if not path.exists():
        raise UserError(f"{path} does not exist: run `dvc repro evaluate@{policy}` first")
    return {r["task_id"]: float(r["success"]) for r in read_rows(path, "episodes") if r["sample"] == 0}


def describe(name: str, baseline: str, env: str, p: Paired) -> str:
    """One line: who beat whom, by how much, and how sure."""
    verdict = "beat" if p.z > 2 else "lost to" if p.z < -2 else "did not separate from"
    return (
        f"{name} {verdict} {baseline} on {env}: {p.method:.3f} vs {p.baseline:.3f}, paired difference "
        f"{p.mean:+.3f} +- {p.se:.3f} over {p.n} held-out tasks ({p.z:+.1f} SE)"
    )
