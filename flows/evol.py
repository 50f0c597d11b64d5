"""AgentEvol as a Prefect flow: each iteration of `evol.iterations` is a subflow run (explore, learn, evaluate),
every step one DVC stage (`dvc repro -s`), the heavy ones tagged `gpu` like the pipeline's. The success per
environment against iteration is posted as a table artifact.

    python -m flows.evol                   # the loop alone (its inputs, the SFT agent, must be built)
"""

from __future__ import annotations

import csv
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.command_line import parse
from flows.dvc_tasks import pull_outputs, repro
from gymflow import paths
from gymflow.config import load_params

STEPS = ["explore", "learn", "evaluate_evol"]  # all heavy: generation or training


@flow(name="gymflow-evol-iteration", flow_run_name="iteration {name}")
def iteration(name: str, repo: str, pools: bool = False) -> None:
    for step in STEPS:
        repro.with_options(name=f"repro-{step}@{name}", tags=["gpu"])(f"{step}@{name}", repo, pools)


@flow(name="gymflow-evol", log_prints=True)
def evol(repo: str = ".", pools: bool = False) -> list[dict[str, str]]:
    params = load_params(Path(repo) / "params.yaml")
    if params.evol is None:
        return []
    for name in params.evol.iterations:
        iteration(name, repo, pools)
    repro.with_options(name="repro-plot_evol")("plot_evol", repo, pools)
    if pools:  # built on another machine: the table came with the lock (were it cached: the DVC remote)
        pull_outputs(repo, str(paths.plot("evol")))
    with (Path(repo) / paths.plot("evol")).open() as f:
        rows = list(csv.DictReader(f))
    create_table_artifact(
        key="agentevol", table=rows, description="AgentEvol: held-out greedy success per iteration (0: SFT)"
    )
    return rows


if __name__ == "__main__":
    parse("flows.evol", __doc__, {})
    evol(repo=str(Path.cwd()))
