"""Stage `instructions`: per environment, a train split and a held-out eval split (AgentEval).

    dvc repro instructions        # or: python -m stages.instructions
Writes data/instructions/<env>.tasks.parquet and data/metrics/instructions.json; environments are built in
parallel, one process per core.
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import build_all
from gymflow.stage import run_stage, write_metrics


def main() -> None:
    params = load_params()
    cfg = params.instructions
    sizes = {env: (cfg.train[env], cfg.eval[env]) for env in params.envs}
    counts = {}
    for env, count in build_all(paths.DATA, sizes, cfg.seed, cfg.views):
        counts[env] = count
        print(f"{env}: {count['train']} train, {count['eval']} eval tasks", flush=True)
    write_metrics("instructions", {env: counts[env] for env in params.envs})


if __name__ == "__main__":
    run_stage(main, resume_note="nothing is kept; run the stage again to draw every environment's tasks")
