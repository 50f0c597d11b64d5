"""AgentEvol against rejection fine-tuning and expert iteration, over seeds: DVC experiments behind one command.

    python -m flows.evol_compare            # every variant x seed below as `dvc exp run --temp`, then the table
    python -m flows.evol_compare --table    # only the table of the experiments already run

Every experiment starts from the same SFT agent (DVC restores the unchanged stages from its cache) and plays
the same number of exploration episodes: M iterations of `evol.tasks` with 1 sample, or (RFT) one iteration
with M samples. The control is AgentEvol with nothing kept. Each learns `evol.epochs` per iteration (times M
for RFT's one round). The table (held-out greedy success per environment of every iteration's agent, mean and
range over seeds) is printed, written to data/compare/evol.md and posted as a Prefect artifact.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import cell, experiment, finished, publish
from gymflow.config import EvolParams, load_params

SEEDS = (0, 1)
HEAD = "evol-agentevol-s0"  # params.yaml as committed
VARIANTS = ("agentevol", "rft", "ei", "control")


def variants(evol: EvolParams) -> dict[str, list[str]]:
    """`dvc exp run -S` overrides per variant, over the params.yaml default (AgentEvol's M iterations)."""
    first, *rest = evol.iterations
    m = len(evol.iterations)
    rft = [f"~evol.iterations.{name}" for name in rest]
    rft += [
        f"+evol.iterations.{first}.samples={m}",
        f"evol.epochs={m * evol.epochs:.6g}",
        "evol.merge_sft=false",
    ]
    return {
        "agentevol": [],
        "rft": rft + ["evol.learn_from=sft"],  # LOOP C.2: one round from the base agent, successes only
        "ei": ["evol.learn_from=last", "evol.merge_sft=false"],  # LOOP C.3: continue from the last agent
        # AgentEvol with nothing kept (no reward reaches 2): the same training on the SFT data alone, which
        # separates what exploration adds from what the extra passes add
        "control": ["evol.threshold=2"],
    }


def table(repo: str, envs: list[str]) -> str:
    """Markdown: per variant, success per environment of each iteration's agent, mean (and range) over seeds."""
    runs = finished(repo, HEAD)
    lines = ["| variant | agent | seeds | " + " | ".join(envs) + " |", "|---" * (len(envs) + 3) + "|"]
    for variant in VARIANTS:
        by_seed = [runs[f"evol-{variant}-s{s}"] for s in SEEDS if f"evol-{variant}-s{s}" in runs]
        if not by_seed:
            continue
        policies = [p for p in by_seed[0] if all(p in run for run in by_seed)]
        for policy in sorted(policies, key=lambda p: (p != "init", p != "sft", p)):
            cells = [cell([run[policy][env]["all"]["success"] for run in by_seed]) for env in envs]
            lines.append(f"| {variant} | {policy} | {len(by_seed)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@flow(name="gymflow-evol-compare", log_prints=True)
def compare(repo: str = ".", run: bool = True) -> str:
    params = load_params(Path(repo) / "params.yaml")
    if run:
        done = finished(repo, HEAD)  # a rerun resumes: experiments already there are not run again
        overrides = variants(params.evol)
        plan = [(v, s) for s in SEEDS for v in overrides if v != "control"] + [("control", s) for s in SEEDS]
        for variant, seed in plan:  # the variants of one seed before the next seed; the control last
            name = f"evol-{variant}-s{seed}"
            if name not in done:
                experiment.with_options(name=name)(name, [*overrides[variant], f"evol.seed={seed}"], repo)
    return publish(repo, "evol", table(repo, params.evaluate.envs), "AgentEvol vs RFT vs EI")


if __name__ == "__main__":
    args = parse("flows.evol_compare", __doc__, {"--table": "only the tables of the experiments already run"})
    compare(repo=str(Path.cwd()), run=not args.table)
