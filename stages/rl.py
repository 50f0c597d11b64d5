"""Stage `rl`: multi-turn RL from `rl.start` (the SFT agent by default) with `rl.algorithm`.

    dvc repro rl                           # or: python -m stages.rl
    accelerate launch --multi_gpu --num_processes 4 -m stages.rl   # a data-parallel update, same result
    dvc exp run -S rl.algorithm=grpo       # another preset; `python -m flows.rl_compare` runs them all
Writes data/models/rl, data/rollouts/rl/it<iteration>.{episodes,turns}.parquet (every training episode, each
reply with its advantage), data/plots/rl.csv (per iteration: reward, success, clip fraction, KL, entropy,
gradient norm, fraction filtered) and data/metrics/rl.json (with the timings: tokens per second, seconds of
rollouts and updates). Held-out success is `evaluate@rl`'s.
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.base import Task
from gymflow.envs.instructions import load_tasks
from gymflow.errors import UserError
from gymflow.models.build import resolve
from gymflow.stage import main_process, run_stage, write_metrics
from gymflow.train.rl import train_rl


def train_tasks(env: str, levels: list[str] | None) -> list[Task]:
    """`env`'s train split, only `levels` if given (LOOP trains on AppWorld's difficulties 1 and 2)."""
    tasks = load_tasks(paths.DATA, env, "train")
    kept = [t for t in tasks if levels is None or t.difficulty in levels]
    if not kept:
        have = ", ".join(sorted({t.difficulty for t in tasks}))
        raise UserError(f"rl.difficulties.{env} keeps no train task: its difficulties are {have}")
    return kept


def main() -> None:
    params = load_params()
    rl, rollout = params.rl, params.rollout
    if rl is None:
        raise UserError("params.yaml has no `rl:` section; add one (see the README) to run this stage")
    start = paths.model(rl.start)
    if not start.is_dir():
        raise UserError(
            f"rl.start is {rl.start!r} but {start} does not exist: use sft or a built evol iteration"
        )
    tasks = {env: train_tasks(env, rl.difficulties.get(env)) for env in rl.tasks}
    metrics = train_rl(
        resolve(start),
        paths.model("rl"),
        tasks,
        rl,
        rollout,
        paths.RL_ROLLOUTS,
        paths.plot("rl"),
    )
    if main_process():
        write_metrics("rl", metrics)
        print(
            f"rl ({rl.algorithm}): training success {metrics['success_first']:.3f} -> {metrics['success_last']:.3f} "
            f"in {metrics['iterations']} iterations, {metrics['wall_seconds'] / 60:.1f} min"
        )


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished iterations are kept (data/models/rl.checkpoints); run the stage again to resume after the last",
    )
