"""The clipped policy objective at the three importance-weight levels of LOOP (Eq. 9, Eq. 10, Figure 2), and
the KL penalty to a frozen reference (GRPO).

Every level is PPO's clipped surrogate over "units" of sampled tokens: a unit's importance weight is the product
of its tokens' probability ratios, exp(sum of log-ratios). A token is a unit of its own (Eq. 10, per-token), the
tokens of one reply are a unit (per-turn), or all sampled tokens of the episode are one unit (Eq. 9,
per-trajectory). A unit's loss is CleanRL's max(-A w, -A clip(w, 1 - eps, 1 + eps)) with the clipped branch
as LOOP writes it, -g(A) with g(A) = A + eps |A| (Eq. 4): the same value wherever that branch is the larger, and
a constant, so no gradient flows through it. An episode's loss is the mean over its units, the batch's the mean
over episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LOG_RATIO = 20.0  # a per-trajectory log-ratio beyond this would overflow exp(); its gradient is cut there


@dataclass
class LossParts:
    loss: torch.Tensor  # minus the objective, averaged over episodes: what is minimised
    clipped: torch.Tensor  # units whose clipped branch is taken (no gradient), out of `units`
    units: torch.Tensor


def clipped_objective(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    units: torch.Tensor,
    clip: float,
) -> LossParts:
    """Per-episode rows [B, T]: log-probabilities under the learner and under the policy that sampled,
    per-token advantages, and each token's unit (1, 2, ...; 0 marks context, which carries no loss).

    A unit's advantage is the mean of its tokens' (one value for Monte Carlo estimators)."""
    b, t = units.shape
    n_units = int(units.max()) + 1
    index = units.long()
    in_loss = (units > 0).to(logp.dtype)

    def per_unit(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(b, n_units, dtype=x.dtype, device=x.device).scatter_add_(1, index, x * in_loss)

    tokens = per_unit(torch.ones_like(logp))[:, 1:]  # tokens per unit; 0: no such unit in this row
    present = (tokens > 0).to(logp.dtype)
    log_ratio = per_unit(logp - old_logp)[:, 1:].clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    adv = per_unit(advantages)[:, 1:] / tokens.clamp(min=1)

    # PPO's clip per unit. pg_loss2 is -g(A), which equals CleanRL's -adv * clamp(ratio, 1 - clip, 1 + clip)
    # wherever that branch is the larger one, and is a constant: no gradient through the clipped branch.
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -(adv + clip * adv.abs())
    pg_loss = torch.max(pg_loss1, pg_loss2)  # [B, units]

    per_episode = (pg_loss * present).sum(1) / present.sum(1).clamp(min=1)
    clipped = ((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip))
    return LossParts(per_episode.mean(), (clipped & (present > 0)).sum(), present.sum())


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO's KL to the reference (the k3 estimator, Schulman 2020): exp(ref - logp) - (ref - logp) - 1 per
    sampled token, averaged per episode, then over episodes (the policy objective's weighting)."""
    diff = ref_logp - logp
    k3 = (diff.exp() - diff - 1) * mask
    return (k3.sum(1) / mask.sum(1).clamp(min=1)).mean()


def unit_ids(turn_of_token: list[int], level: str) -> list[int]:
    """Each token's unit for `level` from its reply number (0 for context, 1 for the first reply's tokens...)."""
    if level == "turn":
        return list(turn_of_token)
    if level == "traj":
        return [min(turn, 1) for turn in turn_of_token]
    if level == "token":
        units, n = [], 0
        for turn in turn_of_token:
            n += turn > 0
            units.append(n if turn > 0 else 0)
        return units
    raise ValueError(f"unknown importance-weight level {level!r}: token, turn or traj")
