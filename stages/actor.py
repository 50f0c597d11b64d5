"""Stage `actor` (SWEET-RL, Eq. 4): DPO of the agent on the per-turn pairs of `actor_pairs`, with the NLL term,
pi_ref the agent itself, frozen.

    dvc repro sweet/dvc.yaml:actor         # or: python -m stages.actor
Writes data/models/sweet (the SWEET-RL agent, evaluated by evaluate_sweet@sweet), data/plots/sweet_dpo.csv and
data/metrics/actor.json.
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.models.build import resolve
from gymflow.stage import required, run_stage, write_metrics
from gymflow.train.dpo import train_dpo
from gymflow.train.sweet import read_turn_pairs


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    pairs = read_turn_pairs(paths.PAIRS)
    start = resolve(paths.model(sweet.start))
    metrics = train_dpo(start, paths.model("sweet"), pairs, sweet.seeded(sweet.dpo), paths.plot("sweet_dpo"))
    write_metrics("actor", metrics)
    print(f"actor: DPO on {len(pairs)} per-turn pairs: {metrics}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint is kept (data/models/sweet.checkpoints); run the stage again to resume",
    )
