"""Advantage estimators of the policy-gradient family, as the papers write them.

Rewards are one number per episode (the environment's terminal reward); `groups` says which episodes share a
task (the K samples of one task in one iteration). Monte Carlo estimators give one advantage per episode and
the learner looks them up by name in `EPISODE_ADVANTAGES`; GAE gives one per sampled token from a value head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def leave_one_out(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """LOOP Eq. 3 (RLOO, LOOP): A_k = K/(K-1) (R_k - mean of the group), which equals R_k minus the mean of
    the other K-1 rewards. A group of one has no baseline and gets 0."""
    mean, count = _group_mean(rewards, groups)
    k = count[groups]
    return torch.where(k > 1, k / (k - 1).clamp(min=1) * (rewards - mean[groups]), torch.zeros_like(rewards))


def group_normalized(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO (Shao et al. 2024; LOOP's RwNorm): (R_k - group mean) / (group standard deviation + eps), the
    sample (Bessel-corrected) standard deviation as torch, TRL and verl compute it. A group whose rewards are
    all equal, or of one episode, gets 0."""
    mean, count = _group_mean(rewards, groups)
    centred = rewards - mean[groups]
    n = int(groups.max()) + 1
    sq = torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, centred**2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()[groups]
    return torch.where(count[groups] > 1, centred / (std + eps), torch.zeros_like(rewards))


def reinforce_pp(rewards: torch.Tensor, tokens: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """REINFORCE++ (Hu 2025) with an outcome reward and gamma = 1: every sampled token's return is its
    episode's reward, and returns are whitened over all sampled tokens of the batch (global, not per group;
    verl's `masked_whiten`: token-weighted mean, Bessel-corrected variance). `tokens` is each episode's number
    of sampled tokens. The KL penalty is the trainer's `kl_coef` loss term, not a reward."""
    weight = tokens.to(rewards.dtype)
    n = weight.sum()
    mean = (weight * rewards).sum() / n
    var = (weight * (rewards - mean) ** 2).sum() / (n - 1).clamp(min=1)
    return (rewards - mean) * torch.rsqrt(var + eps)


# The Monte Carlo estimators by `PGSwitches.advantage` name, one signature: per episode its reward, group and number
# of sampled tokens [N] in, its advantage [N] out. `gae` is not here: it needs the value head (`PolicyGradient`).
EpisodeAdvantage = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
EPISODE_ADVANTAGES: dict[str, EpisodeAdvantage] = {
    "loo": lambda rewards, groups, tokens: leave_one_out(rewards, groups),
    "group_norm": lambda rewards, groups, tokens: group_normalized(rewards, groups),
    "reinforcepp": lambda rewards, groups, tokens: reinforce_pp(rewards, tokens),
}


def gae(
    reward: float, values: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation over one episode's sampled tokens in order (LOOP C.5): the terminal
    `reward` arrives after the last token, `values[i]` is the value before token i. Returns per-token advantages
    and value targets (advantage + value). With gamma = lam = 1 (LOOP's choice) A_i = R - V_i."""
    n = len(values)
    advantages = torch.zeros(n, dtype=values.dtype)
    running = 0.0
    for i in reversed(range(n)):
        following = values[i + 1] if i + 1 < n else 0.0
        r = reward if i == n - 1 else 0.0
        delta = r + gamma * following - values[i]
        running = delta + gamma * lam * running
        advantages[i] = running
    return advantages, advantages + values


def _group_mean(rewards: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = int(groups.max()) + 1
    count = torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, torch.ones_like(rewards))
    total = torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, rewards)
    return total / count.clamp(min=1), count
