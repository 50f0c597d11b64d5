"""SWEET-RL's Table 2 and Figure 3a over seeds: one DVC experiment of sweet/dvc.yaml per seed, then tables.

    python -m flows.sweet_compare              # every seed as `dvc exp run --temp sweet/dvc.yaml`, then tables
    python -m flows.sweet_compare --table      # only the tables of the experiments already run

Each seed draws its own offline data (tasks and samples), trains its own critics and agents and draws its own
Best-of-N tasks; the agent they start from (`sweet.start`, built by the default pipeline) is the same, so the
single-turn and zero-shot collaborative rows are one greedy evaluation of it. Table 2: held-out success and
mean fraction of tests passed per method, mean (range) over seeds. Figure 3a: Best-of-N success (and fraction
passed) against N for each critic and a random pick, mean over seeds. Printed, written to data/compare/sweet.md
and posted as a Prefect artifact.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import cell, experiment, finished, publish
from gymflow import paths
from gymflow.config import load_params

SEEDS = (0, 1)
PIPELINE = "sweet/dvc.yaml"
HEAD = "sweet-head"  # the checked-out commit; its sweet/dvc.lock may hold a partial run, so no seed takes it
METHODS = {"sweet": "SWEET-RL", "rft": "Rejection fine-tuning", "mtdpo": "Multi-turn DPO"}


def name(seed: int) -> str:
    return f"sweet-s{seed}"


def table2(runs: dict[str, dict[str, dict]], env: str) -> str:
    """Held-out success and fraction of tests passed per method, mean (range) over the seeds run."""
    seeded = [runs[name(s)] for s in SEEDS if name(s) in runs]
    lines = [f"| method ({env}, held-out) | seeds | success | tests passed |", "|---|---|---|---|"]

    def row(label: str, scores: list[dict]) -> None:
        if scores:
            cells = [cell([s[k] for s in scores]) for k in ("success", "reward")]
            lines.append(f"| {label} | {len(scores)} | " + " | ".join(cells) + " |")

    start = [r["evaluate/sft"] for r in seeded if "evaluate/sft" in r][:1]  # one agent, evaluated greedily
    row(
        "Single-turn (the SFT agent, submit at once)",
        [s[f"{env}_single"]["all"] for s in start if f"{env}_single" in s],
    )
    row("Zero-shot collaborative (the SFT agent)", [s[env]["all"] for s in start])
    for agent, label in METHODS.items():
        row(label, [r[f"evaluate/{agent}"][env]["all"] for r in seeded if f"evaluate/{agent}" in r])
    return "\n".join(lines)


def figure3a(runs: dict[str, dict[str, dict]], key: str) -> str:
    """Best-of-N `key` (success or reward) against N per chooser, mean over the seeds run."""
    curves = [runs[name(s)]["best_of_n"] for s in SEEDS if "best_of_n" in runs.get(name(s), {})]
    if not curves:
        return ""
    choosers = list(curves[0])
    ns = sorted(curves[0][choosers[0]], key=int)  # JSON keys: "1", "16", "2", ... in N's order
    lines = ["| chooser | " + " | ".join(f"N={n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|"]
    for chooser in choosers:
        means = [statistics.mean(c[chooser][n][key] for c in curves) for n in ns]
        lines.append(f"| {chooser} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    return f"Best-of-N, {key} ({len(curves)} seeds):\n\n" + "\n".join(lines)


def tables(repo: str, env: str) -> str:
    runs = finished(repo, HEAD, prefix=f"{paths.METRICS}/")
    return "\n\n".join(
        t for t in (table2(runs, env), figure3a(runs, "success"), figure3a(runs, "reward")) if t
    )


@flow(name="gymflow-sweet-compare", log_prints=True)
def compare(repo: str = ".", run: bool = True) -> str:
    params = load_params(Path(repo) / "params.yaml")
    if params.sweet is None:
        raise SystemExit("error: params.yaml has no `sweet:` section to compare SWEET-RL with its baselines")
    if run:
        done = finished(repo, HEAD, prefix=f"{paths.METRICS}/")  # a rerun resumes
        for seed in SEEDS:
            if name(seed) not in done:
                experiment.with_options(name=name(seed))(
                    name(seed), [f"sweet.seed={seed}"], repo, (PIPELINE,)
                )
    return publish(repo, "sweet", tables(repo, params.sweet.env), "SWEET-RL Table 2 and Figure 3a")


if __name__ == "__main__":
    args = parse(
        "flows.sweet_compare", __doc__, {"--table": "only the tables of the experiments already run"}
    )
    compare(repo=str(Path.cwd()), run=not args.table)
