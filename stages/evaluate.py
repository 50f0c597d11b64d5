"""Stage `evaluate@<policy>` (AgentEval): one policy under data/models plays the eval split of `evaluate.envs`
as `rollout` says; an agent trained from the SFT agent only where it trained (`evaluate.derived`).

    dvc repro evaluate            # every policy: init, sft (and evaluate_evol@<iteration> for AgentEvol)
    python -m stages.evaluate sft
    python -m stages.evaluate sweet colbench   # only these of evaluate.envs (SWEET-RL's agents: sweet/dvc.yaml)
Writes data/rollouts/evaluate/<policy>/<env>.{episodes,turns}.parquet (every episode, token ids included)
and data/metrics/evaluate/<policy>.json (per environment and difficulty: success, reward, turns, pass@k, and for
apps `noop_reward`, the reward of calling complete_task() at once, its floor).
"""

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.errors import UserError
from gymflow.eval.agenteval import evaluate_policy
from gymflow.stage import run_stage, write_metrics


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
    cfg = cfg.model_copy(update={"envs": only or params.evaluated_envs(policy)})
    model_dir = paths.model(policy)
    if not model_dir.is_dir():
        raise UserError(f"{model_dir} does not exist: run `dvc repro` for the stage that builds it")
    tasks = {env: load_tasks(paths.DATA, env, "eval")[: cfg.limit.get(policy)] for env in cfg.envs}
    metrics = evaluate_policy(policy, model_dir, tasks, cfg, params.rollout, paths.EVALUATE_ROLLOUTS)
    write_metrics(f"evaluate/{policy}", metrics)
    Console().print(summary_table(policy, metrics, cfg.envs))


ROWS = {"success": "success", "reward": "reward", "no-op reward": "noop_reward"}  # label -> metrics key


def summary_table(policy: str, metrics: dict[str, dict[str, Any]], envs: list[str]) -> Table:
    """Greedy success and mean reward per environment, and where ending at once pays (apps) the no-op's reward
    under the policy's: the floor its reward is read against."""
    table = Table("", *envs, title=f"AgentEval: {policy}, greedy, on the held-out split")
    for label, key in ROWS.items():
        cells = [metrics[env]["all"].get(key) for env in envs]
        if any(cell is not None for cell in cells):
            table.add_row(label, *("-" if cell is None else f"{cell:.2f}" for cell in cells))
    return table


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished environments are kept; run the stage again to play the others",
        arguments={
            "POLICY": "the policy, a directory under data/models (init, sft, evol1, ...)",
            "ENV ...": "play only these of evaluate.envs (default: all of them, or for an agent trained from "
            "the SFT agent those it trained on: evaluate.derived)",
        },
    )
