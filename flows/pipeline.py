"""The pipeline as a Prefect flow: the DVC stages in order, then AgentEvol's iterations (`flows.evol`), then
multi-turn RL and its evaluation, heavy ones held to one GPU slot.

Each task runs one stage through `dvc repro -s STAGE`, so `dvc.lock` stays the record of what was built and a
stage whose inputs did not change is skipped by DVC. Heavy stages carry the tag `gpu`; a tag concurrency
limit (`prefect concurrency-limit create gpu 1`) holds them to one at a time across all runs. The evaluation
table is posted as an artifact.

With `pools`, every stage is a flow run on a work pool instead, the `gpu`-tagged ones on gymflow-gpu, the rest
on gymflow-cpu, each on whichever machine's worker takes it (flows/dvc_tasks.py; set up by flows/deploy.py).

    python -m flows.pipeline               # run once, every stage in this process
    python -m flows.pipeline --pools       # run once, every stage on a worker of its pool
    python -m flows.pipeline --serve       # a deployment on a nightly schedule (see the README)
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.command_line import parse
from flows.dvc_tasks import pull_outputs, repro
from flows.evol import evol
from gymflow import paths

STAGES = ["params", "instructions", "trajectories", "init_model", "sft", "evaluate@init", "evaluate@sft"]
RL = ["rl", "evaluate@rl"]  # after AgentEvol: `rl.start` may be one of its agents
HEAVY = {
    "sft",
    "evaluate@init",
    "evaluate@sft",
    *RL,
}  # training and generation: a GPU each, when there is one


def evaluation_rows(repo: str) -> list[dict[str, object]]:
    """One row per policy and environment from data/metrics/evaluate/<policy>.json."""
    rows = []
    for path in sorted((Path(repo) / paths.METRICS / "evaluate").glob("*.json")):
        for env, per_env in json.loads(path.read_text()).items():
            rows.append({"policy": path.stem, "env": env, **per_env["all"]})
    return rows


@flow(name="gymflow-pipeline", log_prints=True)
def pipeline(
    repo: str = ".", stages: list[str] = STAGES, rl: list[str] = RL, pools: bool = False
) -> list[dict[str, object]]:
    for stage in stages:
        tags = ["gpu"] if stage in HEAVY else []
        repro.with_options(name=f"repro-{stage}", tags=tags)(stage, repo, pools)
    evol(repo, pools)
    for stage in rl:
        repro.with_options(name=f"repro-{stage}", tags=["gpu"])(stage, repo, pools)
    if pools:  # the evaluations ran elsewhere: their metrics came with the lock (cached ones: the remote)
        pull_outputs(repo, str(paths.METRICS / "evaluate"))
    rows = evaluation_rows(repo)
    if rows:
        create_table_artifact(
            key="agenteval", table=rows, description="AgentEval: held-out results per policy"
        )
    return rows


if __name__ == "__main__":
    args = parse(
        "flows.pipeline",
        __doc__,
        {
            "--pools": "every stage a flow run on a worker of its pool (flows/deploy.py sets them up)",
            "--serve": "serve a deployment on a nightly schedule (03:00) instead of running once",
        },
    )
    if args.serve:
        pipeline.serve(name="nightly", cron="0 3 * * *", parameters={"repo": str(Path.cwd())})
    else:
        pipeline(repo=str(Path.cwd()), pools=args.pools)
