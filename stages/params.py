"""Stage `params`: check all of params.yaml before any other stage runs.

    dvc repro params              # or: python -m stages.params
DVC deletes a stage's outputs just before it runs the stage's command, so a bad value found by the stage
itself (`instructions.train.maze: -5`) would cost its outputs. Every other stage depends on this stage's
output, so `dvc repro` (and `dvc repro STAGE`, `dvc exp run -S ...`) runs this check first and stops before
anything is deleted. It also checks this machine: that a named model is here (a model directory, or a Hub id
in the local cache) and that a built one fits its memory. The output's content never changes: a params edit
reruns this check, and after it only the stages whose own params changed.
"""

from gymflow import paths
from gymflow.config import check_machine, load_params
from gymflow.stage import run_stage
from gymflow.store.io import write_text
from gymflow.train.presets import switches


def main() -> None:
    params = load_params()
    if params.rl is not None:
        switches(params.rl)  # the RL presets live beside the trainer, so that editing one reruns only `rl`
    check_machine(params)  # the named model is here, or the built one fits: else init_model or sft fails late
    write_text(
        paths.PARAMS_OK, "params.yaml passed gymflow.config.load_params\n"
    )  # constant: no stage reruns for it
    print("params.yaml: ok")


if __name__ == "__main__":
    run_stage(main)
