"""The gradient noise scale: the signal-share estimator against hand-computed and synthetic numbers, the control,
the disjoint draws, and that the measured gradient is the policy-gradient loss's at ratio 1."""

import math

import pytest
import torch
from test_pg import _model, _reinforce_gradient, _token_episodes, tokenizer  # noqa: F401 (a fixture)

from gymflow.envs.base import Task
from gymflow.errors import UserError
from gymflow.models.sampling import sample
from gymflow.train.grad_noise import Batches, disjoint_draws, gradient, noise_scale, permute_rewards
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.presets import PRESETS, PGSwitches


def test_signal_share_by_hand():
    # g1 = (1, 0), g2 = (1, 2): the mean cross product is 1, the mean own square (1 + 5) / 2 = 3
    batches = Batches()
    batches.add(torch.tensor([1.0, 0.0]))
    batches.add(torch.tensor([1.0, 2.0]))
    assert batches.share() == pytest.approx(1 / 3)
    assert noise_scale(1 / 3, 144) == pytest.approx(288)  # 144 * (2/3) / (1/3): noise equals signal there


def test_identical_batches_are_all_signal_and_one_batch_says_nothing():
    batches = Batches()
    batches.add(torch.tensor([3.0, -1.0]))
    assert math.isnan(batches.share())  # one batch cannot separate signal from noise
    batches.add(torch.tensor([3.0, -1.0]))
    assert batches.share() == pytest.approx(1.0) and noise_scale(1.0, 144) == 0
    assert noise_scale(0.0, 144) == float("inf") and noise_scale(-0.01, 144) == float("inf")


def test_share_recovers_a_known_signal_to_noise_ratio():
    """g_i = s + n_i with |s|^2 = 1 and E|n_i|^2 = 3: the share is 1 / (1 + 3) = 0.25, at any scale."""
    gen = torch.Generator().manual_seed(0)
    d = 20_000
    s = torch.randn(d, generator=gen)
    s = s / s.norm()
    batches = Batches()
    for _ in range(16):
        batches.add(1e-3 * (s + torch.randn(d, generator=gen) * (3 / d) ** 0.5))
    assert batches.share() == pytest.approx(0.25, abs=0.02)


def test_jackknife_error_matches_the_spread_of_repeated_measurements():
    """The standard error from one experiment's 8 batches against the standard deviation of the share over 30
    repeated experiments (|s|^2 = 1, E|n|^2 = 30: share 1/31)."""
    gen = torch.Generator().manual_seed(1)
    d = 5_000
    s = torch.randn(d, generator=gen)
    s = s / s.norm()
    shares, errors = [], []
    for _ in range(30):
        batches = Batches()
        for _ in range(8):
            batches.add(s + torch.randn(d, generator=gen) * (30 / d) ** 0.5)
        shares.append(batches.share())
        errors.append(batches.stderr())
    spread = torch.tensor(shares).std().item()
    assert 0.5 < (sum(errors) / len(errors)) / spread < 2, (errors, spread)
    assert sum(shares) / len(shares) == pytest.approx(1 / 31, abs=spread)


def test_control_permutes_rewards_within_groups_only():
    rollouts = _token_episodes()  # group 0: rewards 1, 0; group 1: 0, 0.6
    seen = set()
    for seed in range(20):
        out = permute_rewards(rollouts, seed)
        assert [r.ids for r in out] == [r.ids for r in rollouts]
        assert sorted(r.reward for r in out[:2]) == [0.0, 1.0] and sorted(r.reward for r in out[2:]) == [
            0.0,
            0.6,
        ]
        seen.add(tuple(r.reward for r in out))
    assert len(seen) == 4  # both groups' pairings flip in some seeds


def test_disjoint_draws_share_no_task_and_refuse_too_few():
    tasks = {
        env: [Task(env, f"{env}{i}", "train", "easy", i, "go") for i in range(n)]
        for env, n in (("maze", 20), ("babyai", 9))
    }
    draws = disjoint_draws(tasks, {"maze": 4, "babyai": 3}, batches=3, seed=1)
    ids = [t.task_id for d in draws for env in d for t in d[env]]
    assert len(ids) == len(set(ids)) == 3 * (4 + 3)
    assert all(len(d["maze"]) == 4 and len(d["babyai"]) == 3 for d in draws)
    with pytest.raises(UserError, match="4 batches of 3 babyai tasks need 12 train tasks, there are 9"):
        disjoint_draws(tasks, {"maze": 4, "babyai": 3}, batches=4, seed=1)


def test_measured_gradient_is_reinforce_leave_one_out_and_mixes_by_kept_episodes(tokenizer):  # noqa: F811
    """At the first step the ratio is 1, so the loop loss's gradient is REINFORCE-LOO with the per-episode token
    mean (Eq. 10); a mixture's gradient is its parts' weighted by how many episodes each kept."""
    model = _model(tokenizer)
    switches = PGSwitches.model_validate(PRESETS["loop"])
    learner = PolicyGradient(model, LearnerConfig(switches=switches, lr=0.0, pad_id=tokenizer.pad_token_id))
    rollouts = _token_episodes()
    grad, kept = gradient(learner, rollouts)
    assert kept == 4
    assert torch.allclose(grad, _reinforce_gradient(model, per_token_mean=True), atol=1e-6)
    g0, k0 = gradient(learner, rollouts[:2])
    g1, k1 = gradient(learner, rollouts[2:])
    assert torch.allclose(grad, (g0 * k0 + g1 * k1) / (k0 + k1), atol=1e-7)
    same = [r.__class__(r.ids, r.turns, 1.0, r.group) for r in rollouts]  # no contrast: all filtered
    zero, none_kept = gradient(learner, same)
    assert none_kept == 0 and not zero.any()


def _parity_shares(tok, tasks: int, batches: int = 8) -> tuple[float, float]:
    """Signal share and its control at `tasks` x 8 samples per batch, on test_pg's one-turn parity task."""
    torch.manual_seed(0)
    model = _model(tok)
    switches = PGSwitches.model_validate(PRESETS["loop"])
    learner = PolicyGradient(model, LearnerConfig(switches=switches, lr=0.0, pad_id=tok.pad_token_id))
    generator = torch.Generator().manual_seed(0)
    prompts = [[5, 6], [7, 8]]
    real, control = Batches(), Batches()
    for b in range(batches):
        groups = [g for g in range(tasks) for _ in range(8)]
        replies = sample(model, [prompts[g % 2] for g in groups], 1, [], 0, generator=generator)
        rollouts = [
            TokenEpisode(prompts[g % 2] + c.token_ids, [0, 0, 1], float(c.token_ids[0] % 2 == g % 2), g)
            for g, c in zip(groups, replies, strict=True)
        ]
        real.add(gradient(learner, rollouts)[0])
        control.add(gradient(learner, permute_rewards(rollouts, b))[0])
    return real.share(), control.share()


@pytest.mark.slow  # measures the noise scale at two batch sizes of the task every preset learns
def test_share_grows_with_the_batch_as_the_noise_scale_says_and_the_control_stays_near_zero(tokenizer):  # noqa: F811
    """On the parity task every preset learns (test_pg), 4x the batch must raise the share from B / (B + N) to
    4B / (4B + N) for one noise scale N: both batch sizes must give the same N within a factor of 2."""
    small, small_control = _parity_shares(tokenizer, tasks=8)
    large, large_control = _parity_shares(tokenizer, tasks=32)
    assert 0.03 < small < large and large > 0.15
    assert max(abs(small_control), abs(large_control)) < 0.08
    ratio = noise_scale(small, 64) / noise_scale(large, 256)
    assert 0.5 < ratio < 2, ratio
