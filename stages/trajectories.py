"""Stage `trajectories` (AgentTraj): the expert solvers play the first train tasks of each environment.

    dvc repro trajectories        # or: python -m stages.trajectories
Writes data/rollouts/trajectories/<env>.{episodes,turns}.parquet (successes only),
data/agenttraj/<env>.json (AgentGym's conversation format) and data/metrics/trajectories.json.
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.rollout.agenttraj import gather_trajectories, trajectory_metrics
from gymflow.rollout.records import RunInfo, config_hash
from gymflow.stage import run_stage, write_metrics


def main() -> None:
    params = load_params()
    n = params.trajectories.tasks
    tasks = {env: load_tasks(paths.DATA, env, "train")[: n[env]] for env in params.envs}
    digest = config_hash([params.instructions.model_dump(), params.trajectories.model_dump()])
    info = RunInfo(run="agenttraj", stage="trajectories", iteration=0, policy="expert", config_hash=digest)
    gather_trajectories(
        tasks, paths.TRAJECTORY_ROLLOUTS, paths.AGENTTRAJ, info, params.trajectories.demonstrators
    )
    write_metrics("trajectories", trajectory_metrics(paths.TRAJECTORY_ROLLOUTS, params.envs))


if __name__ == "__main__":
    run_stage(main, resume_note="finished environments are kept; run the stage again to play the others")
