"""Stage `evaluate` (AgentEval): every policy in `evaluate.policies` plays the eval split of `evaluate.envs`.

    dvc repro evaluate            # or: python -m stages.evaluate
Writes data/rollouts/evaluate/<policy>/<env>.{episodes,turns}.parquet (every episode, token ids included)
and data/metrics/evaluate.json (per policy, environment and difficulty: success, reward, turns, pass@k).
"""

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
    cfg = load_params().evaluate
    if cfg is None:
        raise UserError("params.yaml has no `evaluate:` section; add one (see the README) to run this stage")
    tasks = {env: load_tasks("data", env, "eval") for env in cfg.envs}
    metrics = {p: evaluate_policy(p, Path("data/models") / p, tasks, cfg, ROLLOUTS) for p in cfg.policies}
    write_metrics("evaluate", metrics)
    table = Table("policy", *cfg.envs, title="AgentEval: greedy success on the held-out split")
    for policy, per_env in metrics.items():
        table.add_row(policy, *(f"{per_env[e]['all']['success']:.2f}" for e in cfg.envs))
    Console().print(table)


if __name__ == "__main__":
    run_stage(main)
