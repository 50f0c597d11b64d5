"""Stage `rft` (SWEET-RL's rejection fine-tuning baseline): SFT of the agent (sft's settings, `sweet.rft.lr`) on
the offline episodes that succeeded (or reached `sweet.rft.min_reward`), token for token as they were sampled.

    dvc repro sweet/dvc.yaml:rft           # or: python -m stages.rft
Writes data/models/rft, data/plots/rft.csv and data/metrics/rft.json.
"""

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import main_process, required, run_stage, write_metrics
from gymflow.train.critic import critic_episodes
from gymflow.train.sft import train_sft
from gymflow.train.sweet import rft_rows


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    if params.sft is None:
        raise UserError("params.yaml has no `sft:` section: rejection fine-tuning trains with its settings")
    start = resolve(paths.model(sweet.start))
    episodes = critic_episodes(paths.OFFLINE_ROLLOUTS, paths.INSTRUCTIONS, ChatFormat(load_tokenizer(start)))
    rows = rft_rows(episodes, sweet.rft.epochs, sweet.seed, sweet.rft.min_reward)
    cfg = params.sft.model_copy(update={"lr": sweet.rft.lr, "seed": sweet.seed})
    metrics = train_sft(str(start), paths.model("rft"), rows, cfg, paths.plot("rft"))
    kept = sum(
        e.success if sweet.rft.min_reward is None else e.reward >= sweet.rft.min_reward for e in episodes
    )
    if main_process():  # under `accelerate launch`, the first process reports
        write_metrics("rft", {"episodes_kept": kept, **metrics})
        print(f"rft: {kept} kept episodes of {len(episodes)}, {len(rows)} rows: {metrics}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished checkpoints are kept (data/models/rft.checkpoints); run the stage again to resume",
    )
