"""Learning, shown: AgentEvol against its steps-matched control, and RL against SFT, on held-out maze tasks over
seeds, as DVC experiments (one `dvc exp run --temp` per seed), then one table and one plot.

    python -m flows.learning              # every seed below, then the table and the plot
    python -m flows.learning --table      # only the table and plot of the experiments already run

The regime is `REGIME` below over params.yaml: maze alone, in its verbal view, from an imperfect (greedy)
demonstrator's AgentTraj, so the SFT agent has room above it (the lookup table over the same features that
imitates the shortest-path expert reaches 0.74; `python -m gymflow.eval.ceiling maze`). Each seed draws its
own tasks, weights, SFT order and exploration (`SEEDED`). Every experiment runs the pipeline's `compare` stage,
which pairs each method with its baseline on the same held-out tasks; the flow pools those pairs over seeds
exactly (`gymflow.eval.compare.pool`) and writes data/compare/learning.md (per seed and pooled: method and
baseline success, the paired difference and its standard error), data/compare/learning.csv (held-out success
against training rows seen, one line per seed and method: the plot's data) and data/compare/learning.html.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import experiment, finished, publish
from flows.experiments import overrides as experiment_overrides
from gymflow.config import load_params
from gymflow.eval.compare import Paired, pool
from gymflow.store.io import write_csv, write_text

SEEDS = (0, 1, 2)
HEAD = "learning-head"  # the checked-out commit runs the default pipeline, not this regime
TARGETS = (
    "compare",
)  # and everything it needs: sft, both AgentEvol iterations, the control, rl, evaluations

# Dotted key -> value, over params.yaml. A dict replaces the one in params.yaml (see `overrides`).
REGIME: dict[str, object] = {
    "envs": ["maze"],
    "instructions.train": {"maze": 3000},  # 2,000 for AgentTraj, all 3,000 for exploration's draws
    "instructions.eval": {"maze": 1000},  # paired differences of 0.02 are 2-3 standard errors at 1,000
    "instructions.views": {"maze": "verbal"},
    "trajectories.tasks": {"maze": 2000},
    "trajectories.demonstrators": {
        "maze": "greedy"
    },  # solves about 0.46: AgentTraj covers the tasks imperfectly
    "sft.envs": {"maze": 6},
    "evaluate.envs": ["maze"],
    # AgentEvol from the SFT agent: each iteration retrains the SFT agent on its explorer's kept episodes (the
    # SFT data are in its start, not merged again; merged, the gain was +0.006 +- 0.008, docs/results/learning.md)
    "evol.tasks": {"maze": 300},  # x 4 samples: 1,200 episodes an iteration (600 took 7 minutes here)
    "evol.samples": 4,  # K: the shortest success of four per task
    "evol.temperature": 1.0,
    "evol.keep": "shortest",
    "evol.merge_sft": False,
    "evol.learn_from": "sft",
    "evol.epochs": 1.0,
    "rl.tasks": {"maze": 8},
    "rl.lr": 2e-5,  # 1/100 of sft.lr, as AgentGym-RL runs RL; at the default's 3e-4 seed 0 fell 0.509 -> 0.333
    "sweet.env": "maze",  # not run; sweet.env must be in envs
}
SEEDED = ("instructions.seed", "model.seed", "sft.seed", "evol.seed", "rl.seed")
PAIRS = ("evol2_vs_control", "evol2_vs_sft", "control_vs_sft", "rl_vs_sft")


def name(seed: int) -> str:
    return f"learning-s{seed}"


def overrides(params: dict, seed: int) -> list[str]:
    """`dvc exp run -S` arguments for one seed: `REGIME` and the seed of every draw over params.yaml."""
    return experiment_overrides(params, {**REGIME, **dict.fromkeys(SEEDED, seed)})


def summaries(run: dict[str, dict], pair: str) -> Paired | None:
    """The maze summary of one pair in one experiment's `compare` metrics."""
    found = run.get("compare", {}).get(pair, {}).get("maze")
    if not found:
        return None
    return Paired(found["n"], found["mean"], found["sd"], found["method"], found["baseline"])


def table(runs: dict[str, dict[str, dict]]) -> str:
    """Markdown: per pair, each seed's paired difference and the pooled one over the seeds that finished."""
    lines = [
        "| method vs baseline | seed | method | baseline | paired difference | SE | z | tasks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pair in PAIRS:
        parts = []
        for seed in SEEDS:
            p = summaries(runs.get(name(seed), {}), pair)
            if p is None:
                continue
            parts.append(p)
            lines.append(_row(pair, str(seed), p))
        if len(parts) > 1:
            lines.append(_row(pair, f"pooled ({len(parts)})", pool(parts)))
            lines.append(_between_seeds(pair, parts))
    return "\n".join(lines)


def _between_seeds(pair: str, parts: list[Paired]) -> str:
    """The seeds' mean differences as a sample: their mean and its standard error, which carries the run-to-run
    noise of training that the pooled per-task SE leaves out."""
    means = [p.mean for p in parts]
    mean = sum(means) / len(means)
    se = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1) / len(means))
    z = mean / se if se > 0 else math.inf
    return f"| {pair.replace('_vs_', ' vs ')} | between seeds ({len(parts)}) | | | {mean:+.3f} | {se:.3f} | {z:+.1f} | {len(parts)} seeds |"


def _row(pair: str, seed: str, p: Paired) -> str:
    return (
        f"| {pair.replace('_vs_', ' vs ')} | {seed} | {p.method:.3f} | {p.baseline:.3f} | {p.mean:+.3f} | "
        f"{p.se:.3f} | {p.z:+.1f} | {p.n} |"
    )


def curve(runs: dict[str, dict[str, dict]]) -> list[dict]:
    """Held-out success against the rows an agent trained on after the SFT agent (each AgentEvol iteration
    retrains the SFT agent on its own rows; RL: its episodes), per seed and method; 0 for the SFT agent."""
    rows = []
    for seed in SEEDS:
        run = runs.get(name(seed), {})
        success = {
            p: run.get(f"evaluate/{p}", {}).get("maze", {}).get("all", {}).get("success")
            for p in ("sft", "evol1", "evol2", "control", "rl")
        }
        if success["sft"] is None:
            continue
        steps = {
            p: run.get("control" if p == "control" else f"learn/{p}", {}).get("episodes")
            for p in ("evol1", "evol2", "control")
        }
        rows.append({"seed": seed, "method": "sft", "rows": 0, "success": success["sft"]})
        for method, points in (("agentevol", ("evol1", "evol2")), ("control", ("control",))):
            for p in points:
                if success[p] is not None and steps[p] is not None:
                    rows.append({"seed": seed, "method": method, "rows": steps[p], "success": success[p]})
        if success["rl"] is not None:
            episodes = run.get("rl", {}).get("episodes")
            rows.append({"seed": seed, "method": "rl", "rows": episodes or 0, "success": success["rl"]})
    return rows


def plot(rows: list[dict]) -> str:
    """A self-contained HTML page (plotly.js from the wheel) of `curve`'s rows."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for seed in sorted({r["seed"] for r in rows}):
        for method in ("agentevol", "control", "rl"):
            line = [r for r in rows if r["seed"] == seed and r["method"] in ("sft", method)]
            fig.add_scatter(
                x=[r["rows"] for r in line],
                y=[r["success"] for r in line],
                name=f"{method}, seed {seed}",
                mode="lines+markers",
            )
    fig.update_layout(
        title="Held-out maze success against the rows trained on after SFT (RL: episodes)",
        xaxis_title="rows trained on after the SFT agent",
        yaxis_title="greedy success, held-out",
    )
    return fig.to_html(include_plotlyjs=True, full_html=True)


@flow(name="gymflow-learning", log_prints=True)
def learning(repo: str = ".", run: bool = True) -> str:
    if run:
        params = load_params(Path(repo) / "params.yaml").model_dump()
        done = finished(repo, HEAD, prefix="data/metrics/")  # a rerun resumes
        for seed in SEEDS:
            if name(seed) not in done:
                experiment.with_options(name=name(seed))(name(seed), overrides(params, seed), repo, TARGETS)
    runs = finished(repo, HEAD, prefix="data/metrics/")
    rows = curve(runs)
    write_csv(Path(repo) / "data/compare/learning.csv", rows, ["seed", "method", "rows", "success"])
    if rows:
        write_text(Path(repo) / "data/compare/learning.html", plot(rows))
    return publish(
        repo, "learning", table(runs), "AgentEvol and RL against their controls, paired, over seeds"
    )


if __name__ == "__main__":
    args = parse("flows.learning", __doc__, {"--table": "only the table of the experiments already run"})
    learning(repo=str(Path.cwd()), run=not args.table)
