"""Stage `plot_evol`: held-out greedy success per environment every iteration played (`evaluate.derived`)
against AgentEvol iteration (0 is the SFT agent).

    dvc repro plot_evol && dvc plots show
Reads data/metrics/evaluate/<policy>.json for sft and every iteration of `evol.iterations`; writes
data/plots/evol.csv (iteration, policy, one column per environment).
"""

import json

from gymflow import paths
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.stage import run_stage
from gymflow.store.io import write_csv


def main() -> None:
    params = load_params()
    if params.evol is None or params.evaluate is None:
        raise UserError("params.yaml needs `evaluate:` and `evol:` sections to plot AgentEvol")
    policies = ["sft", *params.evol.iterations]
    envs = [e for e in params.evaluate.envs if all(e in params.evaluated_envs(p) for p in policies)]
    rows = []
    for x, policy in enumerate(policies):
        path = paths.metrics(f"evaluate/{policy}")
        if not path.exists():
            raise UserError(f"{path} is missing: run `dvc repro` to evaluate {policy} first")
        metrics = json.loads(path.read_text())
        rows.append({"iteration": x, "policy": policy} | {e: metrics[e]["all"]["success"] for e in envs})
    write_csv(paths.plot("evol"), rows, ["iteration", "policy", *envs])
    for row in rows:
        print(row)


if __name__ == "__main__":
    run_stage(main)
