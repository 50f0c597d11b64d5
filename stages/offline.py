"""Stage `offline` (SWEET-RL): the agent `sweet.start` plays a seeded draw of `sweet.env`'s train tasks, several
samples each at a temperature: the data every SWEET-RL method and baseline learns from.

    dvc repro sweet/dvc.yaml:offline       # or: python -m stages.offline
Writes data/rollouts/offline/<env>.{episodes,turns}.parquet (stage "offline") and data/metrics/offline.json
(episodes, success, mean reward, tasks whose samples' rewards differ: the ones pairs come from).
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.stage import required, run_stage, write_metrics
from gymflow.train.offline import collect_offline


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    tasks = load_tasks(paths.DATA, sweet.env, "train")
    model_dir = paths.model(sweet.start)
    metrics = collect_offline(
        sweet.start,
        model_dir,
        sweet.env,
        tasks,
        sweet.offline,
        sweet.seed,
        params.rollout,
        paths.OFFLINE_ROLLOUTS,
    )
    write_metrics("offline", metrics)
    print(
        f"offline: {metrics['episodes']} episodes of {metrics['tasks']} tasks, success {metrics['success']:.3f}, "
        f"reward {metrics['reward']:.3f}; {metrics['tasks_with_pairs']} tasks have samples to rank"
    )


if __name__ == "__main__":
    run_stage(main, resume_note="nothing is kept; run the stage again to play the draw")
