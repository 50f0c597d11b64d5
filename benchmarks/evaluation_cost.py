"""Where the default's evaluation time goes, and what `evaluate.derived` saves: per policy and environment, the
seconds its held-out episodes took to play (each environment's task count over its episodes per second, as
data/metrics/evaluate/<policy>.json records them), summed over every environment of evaluate.envs (`derived:
all`) and over those each agent is played on by params.yaml (`derived: trained`: an agent trained from the SFT
agent where it trained).

    python benchmarks/evaluation_cost.py [--metrics data/metrics/evaluate]
Reads the evaluation metrics of a finished run (the committed run's on a fresh clone).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.config import load_params

POLICIES = ("init", "sft", "rl", "control")  # then AgentEvol's iterations, in order


def play_seconds(metrics: dict) -> dict[str, float]:
    """Per environment, its episodes' playing time in seconds: tasks over episodes per second."""
    return {
        env: m["all"]["n"] / m["all"]["episodes_per_s"]
        for env, m in metrics.items()
        if isinstance(m, dict) and m.get("all", {}).get("episodes_per_s")
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--metrics", default=str(paths.METRICS / "evaluate"), help="the evaluations' metrics folder"
    )
    args = parser.parse_args()
    params = load_params()
    policies = [*POLICIES, *(params.evol.iterations if params.evol else [])]
    table = Table(
        "policy", "seconds, every environment", "seconds, where it is played now", "environments now"
    )
    total_all = total_now = 0.0
    for policy in policies:
        path = Path(args.metrics) / f"{policy}.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run `dvc repro` (or read a clone's committed run)")
        seconds = play_seconds(json.loads(path.read_text()))
        played = params.evaluated_envs(policy)
        now = sum(s for env, s in seconds.items() if env in played)
        total_all, total_now = total_all + sum(seconds.values()), total_now + now
        table.add_row(policy, f"{sum(seconds.values()):.0f}", f"{now:.0f}", ", ".join(played))
    table.add_row("all", f"{total_all:.0f}", f"{total_now:.0f}", f"{total_now / total_all:.2f}x the time")
    Console().print(table)
    print(f"evaluate.derived is {params.evaluate.derived!r} in params.yaml")


if __name__ == "__main__":
    main()
