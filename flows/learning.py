"""Learning, shown: AgentEvol, rejection fine-tuning and expert iteration against their steps-matched controls,
RL (LOOP, RLOO, GRPO) against SFT, and Best-of-N with a critic that reads the hidden layout against one that
does not and a random pick (SWEET-RL's advantage critics, `bon`, and value-head critics, `bonvalue`), on held-out
maze tasks over seeds, as DVC experiments (one
`dvc exp run --temp` per variant and seed), then one table and one plot.

    python -m flows.learning              # every variant x seed below, then the table and the plot
    python -m flows.learning bon          # one variant's seeds (here Best-of-N), then the table and the plot
    python -m flows.learning --table      # only the table and plot of the experiments already run

The regime is `REGIME` below over params.yaml: maze alone, in its verbal view, from an imperfect (greedy)
demonstrator's AgentTraj, so the SFT agent has room above it (the lookup table over the same features that
imitates the shortest-path expert reaches 0.74; `python -m gymflow.eval.ceiling maze`). Each seed draws its
own tasks, weights, SFT order and exploration (`SEEDED`); each variant (`VARIANTS`) changes only what its method
needs. Every experiment runs the pipeline's `compare` stage, which pairs each method with its baseline on the
same held-out tasks; the flow pools those pairs over seeds exactly (`gymflow.eval.compare.pool`) and writes
data/compare/learning.md (per seed and pooled: method and baseline success, the paired difference and its
standard error), data/compare/learning.csv (held-out success against training rows or RL episodes, one line
per seed and method: the plot's data) and data/compare/learning.html; each finished experiment's metrics go to
data/compare/learning/<experiment>.json (in git), so the table and a resumed flow need no DVC refs of another clone.
"""

from __future__ import annotations

import json
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
RUNS = Path("data/compare/learning")  # <experiment>.json: each finished experiment's metrics, kept in git
HEAD = "learning-head"  # the checked-out commit runs the default pipeline, not this regime
# What an experiment runs (and everything it needs): by default `compare` (sft, both AgentEvol iterations, the
# control, rl, evaluations); Best-of-N the SWEET-RL pipeline's offline data, critics and `best_of_n`
TARGETS = {
    "bon": ("sweet/dvc.yaml:best_of_n",),
    "bonvalue": ("sweet/dvc.yaml:best_of_n",),
    "sweet": ("sweet/dvc.yaml:compare_sweet",),
}
DEFAULT_TARGETS = ("compare",)
BON_N = 8  # the table reports Best-of-N's paired differences at this N (the stage plays each of BON_NS)
BON_NS = [1, BON_N]

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
    "sweet.env": "maze",  # Best-of-N's (the `bon` variant); sweet.env must be in envs
}
SEEDED = ("instructions.seed", "model.seed", "sft.seed", "evol.seed", "rl.seed", "sweet.seed")

# Variant -> its settings over REGIME. Each is one experiment per seed; the stages it does not change (tasks,
# AgentTraj, SFT, ...) come from DVC's cache, so every variant starts from the same SFT agent of its seed.
VARIANTS: dict[str, dict[str, object]] = {
    "agentevol": {},  # REGIME itself: AgentEvol M = 2, its control, and LOOP over 384 episodes
    # Rejection fine-tuning (LOOP C.2): one round from the SFT agent with AgentEvol's exploration budget
    # (300 tasks x 8 = two iterations' episodes), every success kept. The round is named evol2, the last
    # iteration's name, which `control` and `compare` pair with
    "rft": {"evol.iterations": {"evol2": {"explorer": "sft", "samples": 8}}, "evol.keep": "all"},
    # Expert iteration (LOOP C.3): each iteration continues from the agent that explored; its control continues
    # from evol1 too, on the SFT data
    "ei": {"evol.learn_from": "last"},
    # AgentEvol as `agentevol`, from an SFT agent trained to its plateau: 18 passes, where 36 gain nothing more
    # (docs/results/learning.md); the 6-pass agent is still climbing, which the control's own gain shows
    "plateau": {"sft.envs": {"maze": 18}},
    # RL from the SFT agent over 768 episodes (16 iterations of 8 tasks x 6: twice agentevol's LOOP), three presets
    "loop": {"rl.iterations": 16},
    "rloo": {"rl.algorithm": "rloo", "rl.iterations": 16},
    "grpo": {"rl.algorithm": "grpo", "rl.iterations": 16},
    # GRPO (AgentGym-RL's algorithm) over 4x those episodes: 3,072, where a lookup-table leave-one-out policy
    # gradient gained about 0.05 here (docs/results/learning.md); its training curve is in the run's rl.csv
    "grpo_long": {"rl.algorithm": "grpo", "rl.iterations": 64},
    # `agentevol` with one key/value head shared by the four query heads: a KV cache a quarter the size, decoded
    # 1.2-2.0x faster at batch 256 (docs/results/speed.md); does AgentEvol keep its margin with it?
    "kv1": {"model.kv_heads": 1},
    # Best-of-N (SWEET-RL Figure 3a) from the SFT agent: per turn N sampled candidates, the one a turn-wise critic
    # ranks highest is played; the critic reads the maze's layout and shortest path (`hidden`) or not
    # (`nohidden`), against a random pick, on 200 held-out tasks. Both critics learn from the SFT agent's 2,000
    # offline episodes (500 tasks x 4), one pass over at most 2 pairs a task: about 3 minutes each here
    "bon": {
        "sweet.offline.tasks": 500,
        "sweet.critic.epochs": 1,
        "sweet.critic.max_pairs_per_task": 2,
        "sweet.critics": {"hidden": {}, "nohidden": {"hidden": False}},
        "sweet.best_of_n": {"ns": BON_NS, "tasks": 200, "temperature": 1.0},
    },
}
# The same Best-of-N with critics whose score is not a ratio to pi_ref: a value head on the critic's last hidden
# state after each reply, trained by BCE to predict the episode's success from every turn of all 2,000 offline
# episodes (not only the tasks with both outcomes). Tests bon's explanation: the log-ratio favours replies pi_ref
# finds unlikely (the malformed ones at T=1), which a success classifier has no reason to
VARIANTS["bonvalue"] = {
    **VARIANTS["bon"],
    "sweet.critic.kind": "value",
    "sweet.critic.value_target": "success",
}
# SWEET-RL's actor (Eq. 4) from the SFT agent: per turn of 768 drawn offline turns, 16 candidates ranked by
# `bon`'s critic that reads the layout (its offline data and training), the best and worst a DPO pair; against
# a control that trains as many steps from the SFT agent on the SFT data alone (`control_sweet`)
VARIANTS["sweet"] = {
    **{k: v for k, v in VARIANTS["bon"].items() if k != "sweet.best_of_n"},
    "sweet.critics": {"hidden": {}},
}
# Variant -> the pairs of its `compare` metrics that the table reports (method_vs_baseline)
REPORTED: dict[str, tuple[str, ...]] = {
    "agentevol": ("evol2_vs_control", "evol2_vs_sft", "control_vs_sft", "rl_vs_sft"),
    "rft": ("evol2_vs_control", "evol2_vs_sft"),
    "ei": ("evol2_vs_control", "evol2_vs_sft"),
    "plateau": ("evol2_vs_control", "evol2_vs_sft", "control_vs_sft"),
    "loop": ("rl_vs_sft",),
    "rloo": ("rl_vs_sft",),
    "grpo": ("rl_vs_sft",),
    "grpo_long": ("rl_vs_sft",),
    "bon": ("hidden_vs_random", "nohidden_vs_random", "hidden_vs_nohidden"),
    "bonvalue": ("hidden_vs_random", "nohidden_vs_random", "hidden_vs_nohidden"),
    "sweet": ("sweet_vs_sweet_control", "sweet_vs_sft", "sweet_control_vs_sft"),
}
REPORTED["kv1"] = REPORTED["agentevol"]


def name(variant: str, seed: int) -> str:
    """The experiment's name; AgentEvol's keeps the name its first runs had."""
    return f"learning-s{seed}" if variant == "agentevol" else f"learning-{variant}-s{seed}"


def overrides(params: dict, variant: str, seed: int) -> list[str]:
    """`dvc exp run -S` arguments for one experiment: `REGIME`, the variant's settings and the seed of every
    draw, over params.yaml."""
    return experiment_overrides(params, {**REGIME, **VARIANTS[variant], **dict.fromkeys(SEEDED, seed)})


def summaries(run: dict[str, dict], pair: str) -> Paired | None:
    """The maze summary of one pair in one experiment's `compare` metrics, or of two Best-of-N choosers at
    `BON_N`."""
    found = run.get("compare", {}).get(pair, {}).get("maze")
    found = found or run.get("compare_sweet", {}).get(pair, {}).get("maze")
    found = found or run.get("best_of_n_paired", {}).get(pair, {}).get(str(BON_N))
    if not found:
        return None
    return Paired(found["n"], found["mean"], found["sd"], found["method"], found["baseline"])


def table(runs: dict[str, dict[str, dict]]) -> str:
    """Markdown: per variant and pair, each seed's paired difference and the pooled one over the seeds that
    finished."""
    lines = [
        "| variant | method vs baseline | seed | method | baseline | paired difference | SE | z | tasks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, pairs in REPORTED.items():
        for pair in pairs:
            label = f"{variant} | {pair.replace('_vs_', ' vs ')}"
            label += f" (N={BON_N})" if variant in ("bon", "bonvalue") else ""
            parts = []
            for seed in SEEDS:
                p = summaries(runs.get(name(variant, seed), {}), pair)
                if p is None:
                    continue
                parts.append(p)
                lines.append(_row(label, str(seed), p))
            if len(parts) > 1:
                lines.append(_row(label, f"pooled ({len(parts)})", pool(parts)))
                lines.append(_between_seeds(label, parts))
    return "\n".join(lines)


def _between_seeds(label: str, parts: list[Paired]) -> str:
    """The seeds' mean differences as a sample: their mean and its standard error, which carries the run-to-run
    noise of training that the pooled per-task SE leaves out."""
    means = [p.mean for p in parts]
    mean = sum(means) / len(means)
    se = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1) / len(means))
    z = mean / se if se > 0 else math.inf
    return f"| {label} | between seeds ({len(parts)}) | | | {mean:+.3f} | {se:.3f} | {z:+.1f} | {len(parts)} seeds |"


def _row(label: str, seed: str, p: Paired) -> str:
    return (
        f"| {label} | {seed} | {p.method:.3f} | {p.baseline:.3f} | {p.mean:+.3f} | "
        f"{p.se:.3f} | {p.z:+.1f} | {p.n} |"
    )


def curve(runs: dict[str, dict[str, dict]]) -> list[dict]:
    """Held-out success against what an agent trained on after the SFT agent, per seed and method: rows for
    AgentEvol, RFT, EI (each iteration retrains its start on its own rows) and the controls, episodes for RL
    (labelled by its algorithm); 0 for the SFT agent."""
    rows = []
    for seed in SEEDS:
        for variant in VARIANTS:
            run = runs.get(name(variant, seed), {})
            success = {
                p: run.get(f"evaluate/{p}", {}).get("maze", {}).get("all", {}).get("success")
                for p in ("sft", "evol1", "evol2", "control", "rl")
            }
            if success["sft"] is None:
                continue
            if variant in ("agentevol", "plateau"):  # the two SFT agents: 6 and 18 passes
                method = "sft" if variant == "agentevol" else "sft (18 passes)"
                rows.append({"seed": seed, "method": method, "rows": 0, "success": success["sft"]})
            steps = {
                p: run.get("control" if p == "control" else f"learn/{p}", {}).get("episodes")
                for p in ("evol1", "evol2", "control")
            }
            if variant in ("agentevol", "rft", "ei", "plateau"):
                for method, p in (
                    (variant, "evol1"),
                    (variant, "evol2"),
                    (f"control ({variant})", "control"),
                ):
                    if success[p] is not None and steps[p] is not None:
                        rows.append({"seed": seed, "method": method, "rows": steps[p], "success": success[p]})
            if success["rl"] is not None and "rl_vs_sft" in REPORTED[variant]:
                rl = run.get("rl", {})
                # agentevol's LOOP run joins the loop variant's line; each other variant is its own line
                method = f"rl {rl.get('algorithm', 'loop')}" if variant == "agentevol" else f"rl {variant}"
                rows.append(
                    {
                        "seed": seed,
                        "method": method,
                        "rows": rl.get("episodes") or 0,
                        "success": success["rl"],
                    }
                )
    return rows


def plot(rows: list[dict]) -> str:
    """A self-contained HTML page (plotly.js from the wheel) of `curve`'s rows: per method and seed, its points
    from the SFT agent's (at 0) in order of rows."""
    import plotly.graph_objects as go

    fig = go.Figure()
    methods = list(dict.fromkeys(r["method"] for r in rows if not r["method"].startswith("sft")))
    for seed in sorted({r["seed"] for r in rows}):
        for method in methods:
            sft = "sft (18 passes)" if "plateau" in method else "sft"  # where the method's agents started
            start = [r for r in rows if r["seed"] == seed and r["method"] == sft]
            line = start + sorted(
                (r for r in rows if r["seed"] == seed and r["method"] == method), key=lambda r: r["rows"]
            )
            fig.add_scatter(
                x=[r["rows"] for r in line],
                y=[r["success"] for r in line],
                name=f"{method}, seed {seed}",
                mode="lines+markers",
            )
    fig.update_layout(
        title="Held-out maze success against the rows trained on after SFT (RL: episodes)",
        xaxis_title="rows trained on after the SFT agent (RL: episodes played)",
        yaxis_title="greedy success, held-out",
    )
    return fig.to_html(include_plotlyjs=True, full_html=True)


def recorded(repo: str) -> dict[str, dict[str, dict]]:
    """This flow's experiments, finished here or in an earlier checkout: DVC keeps an experiment's metrics in
    refs that a clone or another machine does not have, so each is also written to `RUNS` (one file, in git),
    and the table is built from every one recorded. Keeps `RUNS` up to date with what DVC has."""
    folder = Path(repo) / RUNS
    ours = {name(v, s) for v in VARIANTS for s in SEEDS}
    for exp, metrics in finished(repo, HEAD, prefix="data/metrics/").items():
        if exp in ours:
            write_text(folder / f"{exp}.json", json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    return {f.stem: json.loads(f.read_text()) for f in sorted(folder.glob("*.json")) if f.stem in ours}


@flow(name="gymflow-learning", log_prints=True)
def learning(repo: str = ".", run: bool = True, variants: tuple[str, ...] = tuple(VARIANTS)) -> str:
    if run:
        params = load_params(Path(repo) / "params.yaml").model_dump()
        done = recorded(repo)  # a rerun resumes
        for seed in SEEDS:  # every variant of a seed before the next seed: a stopped flow has all orderings
            for variant in variants:
                if name(variant, seed) not in done:
                    experiment.with_options(name=name(variant, seed))(
                        name(variant, seed),
                        overrides(params, variant, seed),
                        repo,
                        TARGETS.get(variant, DEFAULT_TARGETS),
                    )
                    recorded(repo)  # a stop between experiments loses none
    runs = recorded(repo)
    rows = curve(runs)
    write_csv(Path(repo) / "data/compare/learning.csv", rows, ["seed", "method", "rows", "success"])
    if rows:
        write_text(Path(repo) / "data/compare/learning.html", plot(rows))
    return publish(
        repo, "learning", table(runs), "AgentEvol, RFT, EI and RL against their controls, paired, over seeds"
    )


if __name__ == "__main__":
    args = parse(
        "flows.learning",
        __doc__,
        {
            "--table": "only the table of the experiments already run",
            "VARIANT": f"run only this variant's seeds, one of {', '.join(VARIANTS)} (default: all)",
        },
    )
    if args.variant and args.variant not in VARIANTS:
        raise SystemExit(f"error: no variant {args.variant!r}; name one of {', '.join(VARIANTS)}")
    learning(
        repo=str(Path.cwd()),
        run=not args.table,
        variants=(args.variant,) if args.variant else tuple(VARIANTS),
    )
