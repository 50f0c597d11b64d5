"""Stage `mtdpo` (SWEET-RL's multi-turn DPO baseline): DPO of the agent on pairs of whole offline episodes of
one task, the higher reward chosen, every reply counted; no critic.

    dvc repro sweet/dvc.yaml:mtdpo         # or: python -m stages.mtdpo
Writes data/models/mtdpo, data/plots/mtdpo.csv and data/metrics/mtdpo.json.
"""

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import required, run_stage, write_metrics
from gymflow.train.critic import critic_episodes
from gymflow.train.dpo import train_dpo
from gymflow.train.sweet import episode_pair, episode_pairs


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    start = resolve(paths.model(sweet.start))
    episodes = critic_episodes(paths.OFFLINE_ROLLOUTS, paths.INSTRUCTIONS, ChatFormat(load_tokenizer(start)))
    cfg = sweet.seeded(sweet.mtdpo)
    pairs = [episode_pair(c, r) for c, r in episode_pairs(episodes, cfg.max_pairs_per_task, cfg.seed)]
    metrics = train_dpo(start, paths.model("mtdpo"), pairs, cfg, paths.plot("mtdpo"))
    write_metrics("mtdpo", metrics)
    print(f"mtdpo: DPO on {len(pairs)} episode pairs: {metrics}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint is kept (data/models/mtdpo.checkpoints); run the stage again to resume",
    )
