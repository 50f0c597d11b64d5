"""Stage `actor_pairs` (SWEET-RL, section 4.3): for turns of the offline episodes, `sweet.actor.candidates`
replies from the agent, scored by the critic `sweet.actor.critic` (which reads the hidden information the agent
never sees); chosen from the top half, rejected from the bottom half.

    dvc repro sweet/dvc.yaml:actor_pairs   # or: python -m stages.actor_pairs
Writes data/sweet/pairs.parquet (ids as sampled, every candidate's score) and data/metrics/actor_pairs.json.
"""

from transformers import AutoModelForCausalLM

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer, resolve
from gymflow.rollout.engine import SamplingConfig
from gymflow.stage import required, run_stage, write_metrics
from gymflow.train.critic import critic_episodes, critic_hash, load_critic
from gymflow.train.sweet import build_turn_pairs


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    start = resolve(paths.model(sweet.start))
    policy = AutoModelForCausalLM.from_pretrained(start)
    fmt = ChatFormat(load_tokenizer(start))
    critic = load_critic(paths.critic(sweet.actor.critic))
    episodes = critic_episodes(paths.OFFLINE_ROLLOUTS, paths.INSTRUCTIONS, fmt)
    candidates = sweet.seeded(sweet.actor)
    sampling = SamplingConfig.from_rollout(params.rollout, temperature=candidates.temperature)
    metrics = build_turn_pairs(
        policy,
        fmt,
        critic,
        episodes,
        candidates,
        sampling,
        paths.PAIRS,
        critic_hash(critic),
    )
    write_metrics("actor_pairs", metrics)
    print(f"actor_pairs: {metrics}")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="finished parts are kept (beside data/sweet/pairs.parquet); run the stage again to resume",
    )
