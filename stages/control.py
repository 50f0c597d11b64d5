"""Stage `control`: AgentEvol's steps-matched control. From the same start as the last iteration's learner, it
trains as many rows (so the same optimizer steps, at the same learning rate) on the SFT data alone: what the
extra training does without exploration's episodes. `compare` pairs the two on held-out tasks.

    dvc repro control             # or: python -m stages.control
Writes data/models/control, data/plots/control.csv and data/metrics/control.json.
"""

import json

from gymflow import paths
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import main_process, run_stage, write_metrics
from gymflow.train.evol import learner, matched_set, sft_rows
from gymflow.train.sft import train_sft


def main() -> None:
    params = load_params()
    if params.evol is None or params.sft is None:
        raise UserError(
            "params.yaml needs `sft:` and `evol:` sections for AgentEvol's control (see the README)"
        )
    last = list(params.evol.iterations)[-1]
    settings, explorer = params.evol.at(last), params.evol.iterations[last].explorer
    learned = paths.metrics(f"learn/{last}")
    if not learned.exists():
        raise UserError(f"{learned} does not exist: run `dvc repro learn@{last}` first")
    rows = int(json.loads(learned.read_text())["episodes"])
    tokenizer = load_tokenizer(resolve(paths.model("init")))
    sft = sft_rows(paths.TRAJECTORY_ROLLOUTS, list(params.sft.envs), tokenizer)
    data = matched_set(sft, params.sft.envs, rows, settings.seed)
    start, cfg = learner(settings, explorer, params.sft)
    metrics = train_sft(
        resolve(paths.model(start)),
        paths.model("control"),
        data,
        cfg,
        paths.plot("control"),
    )
    metrics |= {"start": start, "matches": last}
    if main_process():
        write_metrics("control", metrics)
        print(f"control: trained from {start} on {metrics['episodes']} SFT rows, as many as {last}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint (data/models/control.checkpoints) is kept; run the stage again to resume from it",
    )
