"""Stage `critic@<name>` (SWEET-RL, section 4.2): one of `sweet.critics`, trained from the agent on the offline
episodes (Bradley-Terry on pairs of one task's episodes ranked by reward, or a value head), then every offline
turn scored, so SQL can show which turns it blamed.

    dvc repro sweet/dvc.yaml:critic@hidden  # or: python -m stages.critic hidden
Writes data/critics/<name>/ (the critic: `gymflow.train.critic.load_critic`), data/critics/<name>.critic_scores.parquet
(per offline assistant turn: critic_score and advantage; `gymflow sql` joins it to `turns`) and
data/metrics/critic/<name>.json (per epoch: loss, pair accuracy, examples per second).
"""

import sys

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import required, run_stage, write_metrics
from gymflow.store.io import write_rows
from gymflow.train.critic import critic_episodes, load_critic, train_critic, turn_scores


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    if len(sys.argv) != 2 or sys.argv[1] not in sweet.critics:
        raise UserError(
            f"usage: python -m stages.critic NAME, with NAME one of sweet.critics {list(sweet.critics)}"
        )
    name = sys.argv[1]
    start = resolve(paths.model(sweet.start))
    episodes = critic_episodes(paths.OFFLINE_ROLLOUTS, paths.INSTRUCTIONS, ChatFormat(load_tokenizer(start)))
    metrics = train_critic(start, episodes, sweet.critic_config(name), paths.critic(name))
    critic = load_critic(paths.critic(name))
    write_rows(paths.critic_scores(name), "critic_scores", turn_scores(critic, name, episodes))
    write_metrics(f"critic/{name}", metrics)
    print(
        f"critic {name}: loss {metrics['loss']:.4f}, accuracy {metrics['accuracy']:.3f} on {len(episodes)} episodes"
    )


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished epochs are kept (beside data/critics/<name>); run the stage again to resume",
        arguments={"NAME": "the critic, one of sweet.critics in params.yaml"},
    )
