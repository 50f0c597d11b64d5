"""Stage `explore@<iteration>` (AgentEvol): the iteration's explorer plays a draw of train tasks, K samples each.

    dvc repro explore@evol1       # or: python -m stages.explore evol1
Writes data/rollouts/explore/<iteration>/<env>.{episodes,turns}.parquet (stage "explore", the iteration's
number) and data/metrics/explore/<iteration>.json (episodes, success and tasks solved per environment).
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.stage import ITERATION, iteration_arg, run_stage, write_metrics
from gymflow.train.evol import explore


def main() -> None:
    params = load_params()
    name = iteration_arg(params, "explore")
    settings, explorer = params.evol.at(name), params.evol.iterations[name].explorer
    tasks = {env: load_tasks(paths.DATA, env, "train") for env in settings.tasks}
    out = paths.explored(name)
    metrics = explore(
        explorer,
        paths.model(explorer),
        tasks,
        settings,
        params.rollout,
        params.evol.index(name),
        out,
    )
    write_metrics(f"explore/{name}", metrics)
    print(f"{name}: {explorer} explored", ", ".join(f"{e} {m['success']:.2f}" for e, m in metrics.items()))


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished environments are kept; run the stage again to play the others",
        arguments=ITERATION,
    )
