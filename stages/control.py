"""Stage `control`: a method's steps-matched control. From the same start as the method, it trains as many
optimizer steps, at the method's learning rate, on the SFT data alone: what the extra training does without the
method's ingredient (exploration's kept episodes, or the critic's preferences). A comparison stage pairs the two
on held-out tasks.

    dvc repro control                          # AgentEvol's: python -m stages.control
    dvc repro sweet/dvc.yaml:control_sweet     # SWEET-RL's actor: python -m stages.control sweet
AgentEvol's control trains as many rows as its last iteration learned from (so the same steps); SWEET-RL's
trains `sft.batch_size` rows for each of the actor's DPO steps. Writes data/models/<name>, data/plots/<name>.csv
and data/metrics/<name>.json, <name> `control` or `sweet_control`.
"""

import json

from gymflow import paths
from gymflow.config import Params, SFTParams, load_params
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import chosen, main_process, required, run_stage, write_metrics
from gymflow.train.evol import learner, matched_set, sft_rows
from gymflow.train.sft import train_sft


def evol_plan(params: Params) -> tuple[str, str, int, int, SFTParams, dict]:
    """AgentEvol's last iteration: (output name, start, rows, seed, SFT settings, what it matches)."""
    evol = required(params.evol, "evol")
    last = list(evol.iterations)[-1]
    settings, explorer = evol.at(last), evol.iterations[last].explorer
    rows = int(_metrics(f"learn/{last}", f"learn@{last}")["episodes"])
    start, cfg = learner(settings, explorer, params.sft)
    return "control", start, rows, settings.seed, cfg, {"matches": last}


def sweet_plan(params: Params) -> tuple[str, str, int, int, SFTParams, dict]:
    """SWEET-RL's actor: its DPO steps, each a batch of `sft.batch_size` SFT rows, at the DPO learning rate."""
    sweet = required(params.sweet, "sweet")
    steps = int(_metrics("actor", "sweet/dvc.yaml:actor")["steps"])
    cfg = params.sft.model_copy(update={"seed": sweet.seed, "lr": sweet.dpo.lr})
    return (
        "sweet_control",
        sweet.start,
        steps * cfg.batch_size,
        sweet.seed,
        cfg,
        {"matches": "sweet", "steps": steps},
    )


def _metrics(name: str, stage: str) -> dict:
    path = paths.metrics(name)
    if not path.exists():
        raise UserError(f"{path} does not exist: run `dvc repro {stage}` first")
    return json.loads(path.read_text())


PLANS = {"evol": evol_plan, "sweet": sweet_plan}


def main() -> None:
    plan = PLANS[chosen(PLANS, "control")]
    params = load_params()
    required(params.sft, "sft")
    out, start, rows, seed, cfg, matches = plan(params)
    tokenizer = load_tokenizer(resolve(paths.model("init")))
    sft = sft_rows(paths.TRAJECTORY_ROLLOUTS, list(params.sft.envs), tokenizer)
    data = matched_set(sft, params.sft.envs, rows, seed)
    metrics = train_sft(resolve(paths.model(start)), paths.model(out), data, cfg, paths.plot(out))
    metrics |= {"start": start, **matches}
    if main_process():
        write_metrics(out, metrics)
        print(
            f"{out}: trained from {start} on {metrics['episodes']} SFT rows, as many steps as {matches['matches']}"
        )


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint (data/models/<name>.checkpoints) is kept; run the stage again to resume from it",
        arguments={
            "METHOD": "whose control: evol (AgentEvol's last iteration, the default) or sweet (SWEET-RL's actor)"
        },
    )
