"""Episode records: one conversation per episode, turned into `episodes` and `turns` rows."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gymflow.envs.base import Task


@dataclass
class Message:
    role: str  # system | user | assistant
    text: str
    action: str | None = None  # parsed action (assistant turns)
    reward: float | None = None  # episode reward after the environment answered (user turns)
    token_ids: list[int] = field(default_factory=list)  # exactly as sampled (assistant turns)
    logprobs: list[float] = field(default_factory=list)
    advantage: float | None = None  # what the learner weighted this reply with (RL; mean over its tokens)
    critic_score: float | None = None  # the critic's score of this reply when one chose it (Best-of-N)


@dataclass
class Episode:
    task: Task
    messages: list[Message]
    reward: float
    success: bool
    turns: int
    horizon: int
    end_reason: str  # done | turn_limit | length_limit | error
    sample: int = 0
    tokens: int | None = None


@dataclass(frozen=True)
class RunInfo:
    """Who produced a batch of episodes, stored on every row."""

    run: str
    stage: str
    iteration: int
    policy: str
    policy_hash: str = ""
    config_hash: str = ""


def config_hash(config: Any) -> str:
    """A short stable hash of JSON-able parameters."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def episode_rows(ep: Episode, info: RunInfo) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    t = ep.task
    episode_id = f"{info.run}/{info.stage}/{info.iteration}/{info.policy}/{t.env}/{t.task_id}/{ep.sample}"
    episode = {
        "episode_id": episode_id,
        "run": info.run,
        "stage": info.stage,
        "iteration": info.iteration,
        "policy": info.policy,
        "policy_hash": info.policy_hash,
        "config_hash": info.config_hash,
        "env": t.env,
        "task_id": t.task_id,
        "split": t.split,
        "difficulty": t.difficulty,
        "group": f"{t.task_id}@{info.iteration}",
        "sample": ep.sample,
        "seed": t.seed,
        "reward": ep.reward,
        "success": ep.success,
        "turns": ep.turns,
        "horizon": ep.horizon,
        "end_reason": ep.end_reason,
        "tokens": ep.tokens,
    }
    turns = [
        {
            "episode_id": episode_id,
            "turn": i,
            "role": m.role,
            "text": m.text,
            "action": m.action,
            "reward": m.reward,
            "token_ids": m.token_ids,
            "logprobs": m.logprobs,
            "critic_score": m.critic_score,
            "advantage": m.advantage,
        }
        for i, m in enumerate(ep.messages)
    ]
    return episode, turns
