"""How much of an RL step is signal: the gradient noise scale of McCandlish et al. (2018, "An Empirical Model
of Large-Batch Training"), measured for the policy-gradient objective from independent batches of fresh tasks.

With g_i the objective's gradient over batch i, g_i = G + noise_i, the mean of <g_i, g_j> over pairs i != j
estimates |G|^2 without bias and the mean of |g_i|^2 estimates |G|^2 + tr(Sigma) / B. Their ratio is the
signal's share of a step's squared norm at batch B, and B (1 - share) / share is the batch at which noise and
signal are equal (their B_simple); a share within two jackknife standard errors of 0 only bounds it from below.
The control permutes the rewards within each group: the same episodes and
advantage sizes with no link between them, so its share spreads around 0 by the estimator's own noise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.config import RLParams, RolloutParams
from gymflow.envs.base import Task
from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer
from gymflow.rollout.engine import SamplingConfig
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.presets import switches
from gymflow.train.rl import sample_groups, token_episodes


@dataclass
class Batches:
    """Independent batches' gradients (kept: the estimate's error needs every pair's inner product)."""

    grads: list[torch.Tensor] = field(default_factory=list)

    def add(self, grad: torch.Tensor) -> None:
        self.grads.append(grad.detach().float().clone())

    def share(self) -> float:
        """|G|^2 / E|g|^2: 1 when every batch points the same way, around 0 when they are noise."""
        return _share(self._gram())

    def stderr(self) -> float:
        """The share's jackknife standard error (each batch left out in turn)."""
        gram, n = self._gram(), len(self.grads)
        if n < 3:
            return float("nan")
        keep = [[j for j in range(n) if j != i] for i in range(n)]
        loo = torch.tensor([_share(gram[k][:, k]) for k in keep], dtype=torch.float64)
        return float(((n - 1) / n * ((loo - loo.mean()) ** 2).sum()).sqrt())

    def _gram(self) -> torch.Tensor:
        if not self.grads:
            return torch.zeros(0, 0, dtype=torch.float64)
        g = torch.stack(self.grads).double()
        return g @ g.T


def _share(gram: torch.Tensor) -> float:
    n = gram.shape[0]
    own = float(gram.trace())
    if n < 2 or own == 0:
        return float("nan")
    cross = (float(gram.sum()) - own) / (n * (n - 1))
    return cross / (own / n)


def noise_scale(share: float, batch: float) -> float:
    """The batch (in `batch`'s units) at which the gradient's noise energy equals its signal's."""
    return batch * (1 - share) / share if share > 0 else float("inf")


def permute_rewards(rollouts: list[TokenEpisode], seed: int) -> list[TokenEpisode]:
    """The control: each group's rewards shuffled among its episodes."""
    rng = random.Random(seed)
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group, []).append(i)
    out = list(rollouts)
    for members in groups.values():
        rewards = [rollouts[i].reward for i in members]
        rng.shuffle(rewards)
        for i, reward in zip(members, rewards, strict=True):
            out[i] = replace(rollouts[i], reward=reward)
    return out


def disjoint_draws(
    tasks: dict[str, list[Task]], per_batch: dict[str, int], batches: int, seed: int
) -> list[dict[str, list[Task]]]:
    """`batches` draws of `per_batch` tasks per environment, no task in two draws (a shared task would
    count its own features as signal)."""
    pools = {}
    for env, n in per_batch.items():
        if n * batches > len(tasks[env]):
            raise UserError(
                f"{batches} batches of {n} {env} tasks need {n * batches} train tasks, there are "
                f"{len(tasks[env])}: ask for --batches {len(tasks[env]) // n} or fewer"
            )
        pools[env] = random.Random(seed).sample(tasks[env], n * batches)
    return [
        {env: pool[b * per_batch[env] : (b + 1) * per_batch[env]] for env, pool in pools.items()}
        for b in range(batches)
    ]


def gradient(learner: PolicyGradient, rollouts: list[TokenEpisode]) -> tuple[torch.Tensor, int]:
    """The flattened gradient of the learner's loss (its first step: the ratio is 1) over the kept episodes,
    and how many were kept."""
    batch = learner.prepare(rollouts)
    learner.model.zero_grad()
    if batch.episodes:
        learner.backward(batch, range(len(batch.episodes)), learner.units(batch))
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in learner.params]
    return torch.cat([g.flatten() for g in grads]).detach(), len(batch.episodes)  # cat copies


def measure(
    start_dir: str,
    tasks: dict[str, list[Task]],
    rl: RLParams,
    cfg: RolloutParams,
    batches: int,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Per environment and for the whole mixture: episodes and kept episodes per batch (one iteration's draw
    of `rl.tasks`, K = `rl.samples`), the signal share with its control, and the noise scale."""
    tokenizer = load_tokenizer(start_dir)
    fmt = ChatFormat(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(start_dir, dtype=torch.float32)
    config = LearnerConfig(
        switches=switches(rl),
        lr=rl.lr,
        temperature=rl.temperature,
        max_tokens=rl.max_tokens,
        pad_id=tokenizer.pad_token_id,
        seed=seed,
    )
    learner = PolicyGradient(model, config)
    learner.model.eval()  # no dropout in the measured gradient, as in the sampler
    sampling = SamplingConfig.from_rollout(cfg, temperature=rl.temperature)
    generator = torch.Generator().manual_seed(seed)
    envs = list(rl.tasks)
    real = {env: Batches() for env in [*envs, "all"]}
    control = {env: Batches() for env in [*envs, "all"]}
    episodes = dict.fromkeys(envs, 0)
    kept = dict.fromkeys(envs, 0)
    for b, drawn in enumerate(disjoint_draws(tasks, rl.tasks, batches, seed)):
        parts: dict[str, list[tuple[torch.Tensor, int]]] = {"real": [], "control": []}
        for env in envs:
            played, _ = sample_groups(model, fmt, {env: drawn[env]}, rl.samples, sampling, generator)
            rollouts = token_episodes(played, fmt)
            episodes[env] += len(rollouts)
            for kind, rs in (("real", rollouts), ("control", permute_rewards(rollouts, seed * 1000 + b))):
                parts[kind].append(gradient(learner, rs))
            kept[env] += parts["real"][-1][1]
        for kind, estimate in (("real", real), ("control", control)):
            for env, (grad, _) in zip(envs, parts[kind], strict=True):
                estimate[env].add(grad)
            n = sum(k for _, k in parts[kind])
            estimate["all"].add(sum(g * k for g, k in parts[kind]) / max(n, 1))  # the mixture's mean
        print(f"batch {b + 1}/{batches}: {sum(episodes.values())} episodes, {sum(kept.values())} kept")
    episodes["all"], kept["all"] = sum(episodes.values()), sum(kept.values())
    rows = []
    for env in [*envs, "all"]:
        share, stderr, per_batch = real[env].share(), real[env].stderr(), episodes[env] / batches
        rows.append(
            {
                "env": env,
                "episodes": per_batch,
                "kept": kept[env] / batches,
                "share": share,
                "stderr": stderr,
                "control": control[env].share(),
                "noise_scale": noise_scale(share, per_batch),
                # below two standard errors the share is not told apart from 0: the scale is a lower bound
                "at_least": share < 2 * stderr,
                "noise_scale_bound": noise_scale(share + 2 * stderr, per_batch),
            }
        )
    return rows
