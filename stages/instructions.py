"""Stage `instructions`: per environment, a train split and a held-out eval split (AgentEval).

    dvc repro instructions        # or: python -m stages.instructions
Writes data/instructions/<env>.tasks.parquet and data/metrics/instructions.json.
"""

from gymflow.config import load_params
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits, save_tasks
from gymflow.stage import run_stage, write_metrics


def main() -> None:
    params = load_params()
    cfg = params.instructions
    counts = {}
    for env in params.envs:
        splits = build_splits(ENVS[env], n_train=cfg.train[env], n_eval=cfg.eval[env], seed=cfg.seed)
        save_tasks("data", env, splits)
        counts[env] = {split: len(tasks) for split, tasks in splits.items()}
        print(f"{env}: {counts[env]['train']} train, {counts[env]['eval']} eval tasks")
    write_metrics("instructions", counts)


if __name__ == "__main__":
    run_stage(main)
