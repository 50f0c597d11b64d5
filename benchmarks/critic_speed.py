"""What SWEET-RL's critic and Best-of-N cost on this CPU at the default tiny sizes (hidden 128, 2 layers, vocab
2048, as params.yaml's `model`): critic training in pairs (advantage) or episodes (value) and tokens per second,
and Best-of-N on colbench in seconds per episode at N = 1, 4, 16 with the critic and with a random pick.

The training data are colbench expert episodes as if sampled (each reply's ids its text's, closed by eos) and a
copy of each whose submission is wrong: one pair per task, lengths like an SFT agent's. Best-of-N plays a
randomly initialised policy, which never submits: every episode runs its 10 turns of `max_new_tokens` ids, the
most a colbench episode can cost.

    python benchmarks/critic_speed.py                       # about 10 minutes on 2 cores
    python benchmarks/critic_speed.py --tasks 16 --bon-tasks 2 --ns 1 4
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_splits
from gymflow.eval.best_of_n import CriticChooser, RandomChooser, best_of_n
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.engine import SamplingConfig, episode_turns
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Episode
from gymflow.train.critic import CriticConfig, CriticEpisode, TurnCritic, fit


def as_sampled(ep: Episode, fmt: ChatFormat, reward: float | None = None) -> CriticEpisode:
    messages = [dataclasses.replace(m) for m in ep.messages]
    replies = [m for m in messages if m.role == "assistant"]
    if reward is not None:  # the spoiled copy: a wrong last submission
        replies[-1].text = "Thought: I guess.\nAction: submit\ndef f():\n    return 0"
    for m in replies:
        m.token_ids = fmt.encode(m.text) + [fmt.eos_id]
    ids, turns = episode_turns(messages, fmt)
    index = [i for i, m in enumerate(messages) if m.role == "assistant"]
    r = ep.reward if reward is None else reward
    t = ep.task
    return CriticEpisode(
        f"{t.task_id}/{r}", t.env, t.task_id, r, r == 1.0, ColBench.hidden_text(t), ids, turns, index
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=64, help="train tasks: one pair each")
    parser.add_argument("--bon-tasks", type=int, default=4, help="episodes per Best-of-N measurement")
    parser.add_argument("--ns", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-new-tokens", type=int, default=80, help="params.yaml rollout.max_new_tokens")
    args = parser.parse_args()
    splits = build_splits(ColBench, args.tasks, args.bon_tasks, seed=0)
    env = make_env("colbench")
    experts = [run_expert(env, t) for t in splits["train"]]
    texts = [m.text for ep in experts for m in ep.messages] + [
        ColBench.hidden_text(t) for t in splits["train"]
    ]
    fmt = ChatFormat(train_tokenizer(texts, 2048))
    policy = build_model(ModelConfig(), fmt.tokenizer).eval()
    episodes = [e for ep in experts for e in (as_sampled(ep, fmt), as_sampled(ep, fmt, 0.0))]
    tokens = [len(e.ids) for e in episodes]
    print(
        f"{len(episodes)} episodes, {sum(tokens) / len(tokens):.0f} ids each on average (max {max(tokens)}), "
        f"{sum(e.replies for e in episodes) / len(episodes):.1f} replies; torch threads {torch.get_num_threads()}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("advantage", "value"):
            critic = TurnCritic.initial(policy, fmt, CriticConfig(kind=kind, epochs=1, lr=1e-4))
            start = time.perf_counter()
            rows = fit(critic, episodes, Path(tmp) / f"{kind}.pt")
            seconds = time.perf_counter() - start
            unit, note = ("pairs", " (pi_ref's pass included)") if kind == "advantage" else ("episodes", "")
            print(
                f"critic {kind}: {rows[0]['examples']} {unit} in {seconds:.1f} s{note}: "
                f"{rows[0]['examples'] / seconds:.2f} {unit}/s, {rows[0]['tokens'] / seconds:.0f} tokens/s trained"
            )
        start = time.perf_counter()
        critic = TurnCritic.initial(policy, fmt, CriticConfig())
        critic.score_episodes(episodes)
        seconds = time.perf_counter() - start
        print(
            f"scoring every turn of {len(episodes)} episodes: {seconds:.1f} s, {sum(tokens) / seconds:.0f} tokens/s"
        )

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, batch_size=64)
    jobs = [(t, 0) for t in splits["eval"]]
    best_of_n(policy, fmt, jobs[:1], sampling, 1, RandomChooser(0), horizon=1)  # warm-up, not timed
    for n in args.ns:
        for name, chooser in (("random", RandomChooser(0)), ("critic", CriticChooser(critic))):
            if n == 1 and name == "critic":
                continue  # N = 1 scores nothing: the same cost as random
            start = time.perf_counter()
            played = best_of_n(policy, fmt, jobs, sampling, n, chooser, torch.Generator().manual_seed(0))
            seconds = time.perf_counter() - start
            turns = sum(ep.turns for ep in played)
            print(
                f"best-of-{n} {name}: {seconds / len(played):.1f} s per episode "
                f"({turns / len(played):.1f} turns, {max(ep.tokens for ep in played)} ids at most)"
            )


if __name__ == "__main__":
    main()
