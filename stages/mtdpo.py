"""Stage `mtdpo` (SWEET-RL's multi-turn DPO baseline): DPO of the agent on pairs of whole offline episodes of
one task, the higher reward chosen, every reply counted; no critic.

    dvc repro sweet/dvc.yaml:mtdpo         # or: python -m stages.mtdpo
Writes data/models/mtdpo, data/plots/mtdpo.csv and data/metrics/mtdpo.json.
"""

from pathlib import Path

from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import required, run_stage, write_metrics
from gymflow.train.critic import critic_episodes
from gymflow.train.dpo import train_dpo
from gymflow.train.offline import OFFLINE_DIR
from gymflow.train.sweet import episode_pair, episode_pairs


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    start = resolve(Path("data/models") / sweet.start)
    episodes = critic_episodes(OFFLINE_DIR, "data/instructions", ChatFormat(load_tokenizer(start)))
    cfg = sweet.seeded(sweet.mtdpo)
    pairs = [episode_pair(c, r) for c, r in episode_pairs(episodes, cfg.max_pairs_per_task, cfg.seed)]
    metrics = train_dpo(start, Path("data/models/mtdpo"), pairs, cfg, Path("data/plots/mtdpo.csv"))
    write_metrics("mtdpo", metrics)
    print(f"mtdpo: DPO on {len(pairs)} episode pairs: {metrics}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint is kept (data/models/mtdpo.checkpoints); run the stage again to resume",
    )
