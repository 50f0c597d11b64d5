"""Stage `sft`: behaviour cloning of the initial model on AgentTraj (`sft.envs`: passes per environment),
loss on assistant tokens.

    dvc repro sft                 # or: python -m stages.sft (on a CPU, one process per core: sft.processes)
    accelerate launch --multi_gpu --num_processes 4 -m stages.sft   # data-parallel on GPUs, same result
Writes data/models/sft (a Hugging Face model directory), data/plots/sft.csv (loss per step, `dvc plots show`)
and data/metrics/sft.json (final loss, episodes, training tokens per second, wall time).
"""

import sys

from gymflow import paths
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.models.build import resolve
from gymflow.stage import main_process, run_stage, write_metrics
from gymflow.train.cores import over_cores, training_processes
from gymflow.train.sft import mixture, train_sft


def main() -> None:
    params = load_params()
    if params.sft is None:
        raise UserError("params.yaml has no `sft:` section; add one (see the README) to run this stage")
    data = mixture(paths.TRAJECTORY_ROLLOUTS, params.sft.envs)  # its declared input only
    if not data:
        raise UserError(
            f"no AgentTraj episodes for {list(params.sft.envs)}: run `dvc repro trajectories` first"
        )
    with over_cores(training_processes(params.sft.processes), [sys.executable, "-m", "stages.sft"]):
        metrics = train_sft(
            resolve(paths.model("init")), paths.model("sft"), data, params.sft, paths.plot("sft")
        )
    if main_process():
        write_metrics("sft", metrics)
        print(", ".join(f"{k} {v}" for k, v in metrics.items()))


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint (data/models/sft.checkpoints) is kept; run the stage again to resume from it",
    )
