"""Stage `evaluate@<policy>` (AgentEval): one policy under data/models plays the eval split of `evaluate.envs`
as `rollout` says.

    dvc repro evaluate            # every policy: init, sft (and evaluate_evol@<iteration> for AgentEvol)
    python -m stages.evaluate sft
    python -m stages.evaluate sweet colbench   # only these of evaluate.envs (SWEET-RL's agents: sweet/dvc.yaml)
Writes data/rollouts/evaluate/<policy>/<env>.{episodes,turns}.parquet (every episode, token ids included)
and data/metrics/evaluate/<policy>.json (per environment and difficulty: success, reward, turns, pass@k).
"""

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.errors import UserError
from gymflow.eval.agenteval import evaluate_policy
from gymflow.stage import run_stage, write_metrics

ROLLOUTS = Path("data/rollouts/evaluate")


def main() -> None:
    if len(sys.argv) < 2:
        raise UserError(
            "usage: python -m stages.evaluate POLICY [ENV ...] (POLICY: a directory under data/models)"
        )
    policy, only = sys.argv[1], sys.argv[2:]
    params = load_params()
    cfg = params.evaluate
    if cfg is None:
        raise UserError("params.yaml has no `evaluate:` section; add one (see the README) to run this stage")
    if outside := [e for e in only if e not in cfg.envs]:
        raise UserError(f"{outside} not in evaluate.envs {cfg.envs}: add them there or name others")
    if only:
        cfg = cfg.model_copy(update={"envs": only})
    model_dir = Path("data/models") / policy
    if not model_dir.is_dir():
        raise UserError(f"{model_dir} does not exist: run `dvc repro` for the stage that builds it")
    tasks = {env: load_tasks("data", env, "eval")[: cfg.limit.get(policy)] for env in cfg.envs}
    metrics = evaluate_policy(policy, model_dir, tasks, cfg, params.rollout, ROLLOUTS)
    write_metrics(f"evaluate/{policy}", metrics)
    table = Table("policy", *cfg.envs, title="AgentEval: greedy success on the held-out split")
    table.add_row(policy, *(f"{metrics[e]['all']['success']:.2f}" for e in cfg.envs))
    Console().print(table)


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished environments are kept; run the stage again to play the others",
        arguments={
            "POLICY": "the policy, a directory under data/models (init, sft, evol1, ...)",
            "ENV ...": "play only these of evaluate.envs (default: all of them)",
        },
    )
