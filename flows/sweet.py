"""SWEET-RL as a Prefect flow: the stages of sweet/dvc.yaml in order, each one `dvc repro -s`, the heavy ones
tagged `gpu` like the pipeline's; held-out success of each agent and the Best-of-N curve posted as artifacts.

    python -m flows.sweet                  # its inputs (the agent sweet.start) must be built: `dvc repro`
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.command_line import parse
from flows.dvc_tasks import repro
from gymflow import paths
from gymflow.config import load_params

PIPELINE = "sweet/dvc.yaml"
STEPS = ["offline", "critic", "actor_pairs", "actor", "rft", "mtdpo", "evaluate_sweet", "best_of_n"]
AGENTS = {"sweet": "SWEET-RL", "rft": "rejection fine-tuning", "mtdpo": "multi-turn DPO"}


def agent_rows(repo: str, env: str) -> list[dict[str, object]]:
    """One row per agent: held-out success and mean reward (colbench: fraction of tests passed) on `env`,
    the starting agent first, from data/metrics/evaluate/<agent>.json."""
    rows = []
    for agent in ("sft", *AGENTS):
        path = Path(repo) / paths.metrics(f"evaluate/{agent}")
        if path.exists():
            score = json.loads(path.read_text())[env]["all"]
            rows.append(
                {"agent": AGENTS.get(agent, agent), "success": score["success"], "reward": score["reward"]}
            )
    return rows


@flow(name="gymflow-sweet", log_prints=True)
def sweet(repo: str = ".") -> list[dict[str, object]]:
    params = load_params(Path(repo) / "params.yaml")
    if params.sweet is None:
        raise SystemExit(
            "error: params.yaml has no `sweet:` section; add one (see the README) to run SWEET-RL"
        )
    for step in STEPS:  # a foreach stage (critic, evaluate_sweet) runs all of its items
        repro.with_options(name=f"repro-{step}", tags=["gpu"])(f"{PIPELINE}:{step}", repo)
    rows = agent_rows(repo, params.sweet.env)
    create_table_artifact(key="sweet-agents", table=rows, description="SWEET-RL and baselines, held-out")
    curve = Path(repo) / paths.plot("best_of_n")
    if curve.exists():
        lines = curve.read_text().splitlines()
        table = [dict(zip(lines[0].split(","), line.split(","), strict=True)) for line in lines[1:]]
        create_table_artifact(
            key="sweet-best-of-n", table=table, description="Best-of-N against N per chooser"
        )
    return rows


if __name__ == "__main__":
    args = parse("flows.sweet", __doc__, {"REPO": "the checkout to run in (default: this directory)"})
    sweet(repo=args.repo or str(Path.cwd()))
