"""The policy-gradient family against numbers computed by hand: every advantage estimator, the clipped objective
at each importance-weight level, its gradient, the KL term, and the learner's update on a tiny model."""

import math
from typing import get_args

import pytest
import torch

from gymflow.config import ModelConfig, RLParams
from gymflow.errors import UserError
from gymflow.models.build import build_model
from gymflow.models.sampling import sample
from gymflow.models.tokenizer import train_tokenizer
from gymflow.train.advantages import EPISODE_ADVANTAGES, gae, group_normalized, leave_one_out, reinforce_pp
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.pg_loss import clipped_objective, kl_penalty, unit_ids
from gymflow.train.prefix import shared_prefixes
from gymflow.train.presets import PRESETS, PGSwitches, switches

# ---- advantages --------------------------------------------------------------------------------------


def test_leave_one_out_is_the_reward_minus_the_mean_of_the_others():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 1.0, 0.7])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2])
    # group 0: 1 - (0 + 0 + 1)/3 = 2/3 and 0 - 2/3; group 1: 0.5 - 0.75 and 1 - 0.5; group 2 alone: 0
    expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, -0.25, -0.25, 0.5, 0.0]
    assert leave_one_out(rewards, groups).tolist() == pytest.approx(expected)


def test_group_normalized_divides_by_the_sample_standard_deviation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.3])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    # group 0: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735; group 1: all equal -> 0
    a = 0.5 / math.sqrt(1 / 3)
    expected = [a, -a, -a, a, 0.0, 0.0]
    assert group_normalized(rewards, groups).tolist() == pytest.approx(expected, abs=1e-5)


def test_reinforce_pp_whitens_returns_over_the_batch_tokens():
    # episode 0: reward 1 over 3 sampled tokens, episode 1: reward 0 over 1 token. Token mean 3/4, variance
    # (3 * 0.25^2 + 0.75^2) / (4 - 1) = 0.25, std 0.5: advantages 0.25 / 0.5 and -0.75 / 0.5.
    adv = reinforce_pp(torch.tensor([1.0, 0.0]), torch.tensor([3, 1]))
    assert adv.tolist() == pytest.approx([0.5, -1.5], abs=1e-6)


def test_episode_advantage_table_names_the_switches_estimators_and_calls_each_with_its_inputs():
    """`PGSwitches.advantage` accepts exactly the table's names and gae (the token-level path); each name calls
    its own estimator with the inputs it needs (REINFORCE++ weights by tokens, the others group)."""
    assert set(get_args(PGSwitches.model_fields["advantage"].annotation)) == {*EPISODE_ADVANTAGES, "gae"}
    rewards, groups, tokens = (
        torch.tensor([1.0, 0.0, 0.5, 0.0]),
        torch.tensor([0, 0, 1, 1]),
        torch.tensor([3, 1, 2, 5]),
    )
    expected = {
        "loo": leave_one_out(rewards, groups),
        "group_norm": group_normalized(rewards, groups),
        "reinforcepp": reinforce_pp(rewards, tokens),
    }
    assert expected.keys() == EPISODE_ADVANTAGES.keys()
    for name, estimate in EPISODE_ADVANTAGES.items():
        assert torch.equal(estimate(rewards, groups, tokens), expected[name]), name
    assert not torch.equal(expected["loo"], expected["reinforcepp"])  # the check above tells them apart


def test_gae_without_discount_is_reward_minus_value_and_with_it_follows_the_recursion():
    values = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    adv, ret = gae(1.0, values, gamma=1.0, lam=1.0)
    assert adv.tolist() == pytest.approx([0.8, 0.5, 0.1]) and ret.tolist() == pytest.approx([1.0, 1.0, 1.0])
    # gamma 0.9, lam 0.5: deltas 0.9*0.5-0.2 = 0.25, 0.9*0.9-0.5 = 0.31, 1-0.9 = 0.1; A_t = delta_t + 0.45 A_t+1
    adv, ret = gae(1.0, values, gamma=0.9, lam=0.5)
    assert adv.tolist() == pytest.approx([0.25 + 0.45 * 0.355, 0.355, 0.1])
    assert ret.tolist() == pytest.approx((adv + values).tolist())


# ---- the clipped objective ---------------------------------------------------------------------------

# One episode: context, two ids of reply 1, context, one id of reply 2. Log-ratios 0.1, 0.2 and -0.3.
TURNS = [0, 1, 1, 0, 2]
LOG_RATIO = torch.tensor([[0.0, 0.1, 0.2, 0.0, -0.3]])


def _objective(level: str, advantage: float) -> tuple[float, int, int]:
    units = torch.tensor([unit_ids(TURNS, level)])
    adv = torch.tensor([[advantage * (t > 0) for t in TURNS]])
    parts = clipped_objective(LOG_RATIO, torch.zeros_like(LOG_RATIO), adv, units, clip=0.2)
    return float(parts.loss), int(parts.clipped), int(parts.units)


def test_units_per_level():
    assert unit_ids(TURNS, "token") == [0, 1, 2, 0, 3]
    assert unit_ids(TURNS, "turn") == [0, 1, 1, 0, 2]
    assert unit_ids(TURNS, "traj") == [0, 1, 1, 0, 1]


def test_per_token_weights_eq_10():
    # ratios e^0.1 = 1.10517, e^0.2 = 1.22140 (clipped at 1.2 for A > 0), e^-0.3 = 0.74082
    loss, clipped, units = _objective("token", 1.0)
    assert loss == pytest.approx(-(math.exp(0.1) + 1.2 + math.exp(-0.3)) / 3)
    assert (clipped, units) == (1, 3)
    # A < 0: min(-r, -0.8): the low ratio is clipped (-0.8), the high ones are not
    loss, clipped, _ = _objective("token", -1.0)
    assert loss == pytest.approx((math.exp(0.1) + math.exp(0.2) + 0.8) / 3) and clipped == 1


def test_per_turn_weights_multiply_a_replys_token_ratios():
    # reply 1: e^(0.1 + 0.2) = 1.34986 -> clipped at 1.2; reply 2: e^-0.3
    loss, clipped, units = _objective("turn", 1.0)
    assert loss == pytest.approx(-(1.2 + math.exp(-0.3)) / 2) and (clipped, units) == (1, 2)


def test_per_trajectory_weight_eq_9_is_the_product_of_all_ratios():
    loss, clipped, units = _objective("traj", 1.0)  # 0.1 + 0.2 - 0.3 = 0: ratio 1
    assert loss == pytest.approx(-1.0) and (clipped, units) == (0, 1)
    loss, _, _ = _objective("traj", -2.0)
    assert loss == pytest.approx(2.0)


def test_gradient_of_the_clipped_loss_on_two_tokens():
    """Loss = -(1/2) sum_t min(r_t A, g(A)); d loss / d logp_t = -(1/2) r_t A where unclipped, 0 where clipped."""
    old = torch.zeros(1, 3)
    units = torch.tensor([[0, 1, 2]])
    for advantage, expected in [
        (1.0, [0.0, -0.5 * math.exp(0.1), 0.0]),  # token 2's ratio e^0.3 > 1.2: clipped, no gradient
        (-1.0, [0.0, 0.5 * math.exp(0.1), 0.5 * math.exp(0.3)]),  # A < 0: high ratios are not clipped
    ]:
        logp = torch.tensor([[0.0, 0.1, 0.3]], requires_grad=True)
        adv = torch.tensor([[0.0, advantage, advantage]])
        clipped_objective(logp, old, adv, units, clip=0.2).loss.backward()
        assert logp.grad.tolist()[0] == pytest.approx(expected)


def test_per_token_level_is_cleanrls_ppo_clip_averaged_per_episode():
    """Level token against CleanRL's PPO loss written out per token (ratio, pg_loss1, pg_loss2, max), then Eq. 10's
    mean over each episode's sampled tokens and the mean over episodes: the same loss and gradient. The ratios
    fall on both sides of the clip range for a positive and a negative advantage."""
    turns = [[0, 1, 1, 0, 2, 2], [0, 0, 1, 1, 1, 0]]
    reply = (torch.tensor(turns) > 0).float()
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.5, -0.7], [-0.2, -1.1, -2.2, -0.9, -1.4, -0.6]])
    shift = torch.tensor([[0.5, 0.3, -0.05, 0.4, -0.4, 0.1], [-0.3, 0.2, 0.25, -0.3, 0.02, 0.6]])
    adv = torch.tensor([[0.7], [-1.3]]) * reply
    units = torch.tensor([unit_ids(t, "token") for t in turns])

    logp = (old + shift).requires_grad_(True)
    parts = clipped_objective(logp, old, adv, units, clip=0.2)
    parts.loss.backward()

    direct = (old + shift).requires_grad_(True)
    ratio = (direct - old).exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1 - 0.2, 1 + 0.2)
    pg_loss = torch.max(pg_loss1, pg_loss2)
    loss = ((pg_loss * reply).sum(1) / reply.sum(1)).mean()
    loss.backward()

    assert float(parts.loss.detach()) == pytest.approx(float(loss.detach()), abs=1e-7)
    assert torch.allclose(logp.grad, direct.grad, atol=1e-7)
    # clipped: e^0.3 with A > 0, e^-0.3 with A < 0; context: no gradient; e^-0.4 with A > 0 is not clipped
    assert (logp.grad == 0).tolist() == [
        [True, True, False, True, False, False],
        [True, True, False, True, False, True],
    ]
    assert (int(parts.clipped), int(parts.units)) == (2, 7)


def test_context_positions_get_no_gradient_at_any_level():
    for level in ("token", "turn", "traj"):
        logp = (LOG_RATIO * 0.5).clone().requires_grad_(True)
        units = torch.tensor([unit_ids(TURNS, level)])
        adv = torch.tensor([[0.7 * (t > 0) for t in TURNS]])
        reply = (units > 0).float()
        loss = clipped_objective(logp, torch.zeros_like(logp), adv, units, 0.2).loss
        (loss + kl_penalty(logp, torch.full_like(logp, -0.2), reply)).backward()
        grad = logp.grad[0]
        assert grad[0] == 0 and grad[3] == 0, level
        assert (grad[[1, 2, 4]] != 0).all(), level


def test_kl_penalty_is_k3_per_token_averaged_per_episode():
    logp = torch.tensor([[0.0, -0.5, 0.5], [0.0, 0.0, 0.0]])
    ref = torch.zeros(2, 3)
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    # episode 0: ref - logp = 0.5 and -0.5 -> (e^0.5 - 1.5 + e^-0.5 - 0.5) / 2; episode 1: 0
    first = (math.exp(0.5) - 1.5 + math.exp(-0.5) - 0.5) / 2
    assert float(kl_penalty(logp, ref, mask)) == pytest.approx(first / 2)


# ---- the learner on a tiny model --------------------------------------------------------------------


def test_learner_config_is_keyword_only_and_checked():
    sw = PGSwitches.model_validate(PRESETS["loop"])
    with pytest.raises(TypeError):
        LearnerConfig(sw, 1e-3)  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        LearnerConfig(switches=sw, lr=1e-3, max_tokens=0)
    assert LearnerConfig(switches=sw, lr=1e-3).max_tokens == 16384


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["left right up down go stop"] * 20, 300)


def _model(tokenizer):
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=128)
    return build_model(cfg, tokenizer)


def _token_episodes() -> list[TokenEpisode]:
    """Two tasks, two samples each, replies of different lengths and numbers of turns."""
    shapes = [
        ([5, 6, 7, 10, 11, 8, 9, 12], [0, 0, 0, 1, 1, 0, 0, 2], 1.0, 0),
        ([5, 6, 7, 13], [0, 0, 0, 1], 0.0, 0),
        ([5, 9, 14, 15, 16], [0, 0, 1, 1, 1], 0.0, 1),
        ([5, 9, 17, 8, 18], [0, 0, 1, 0, 2], 0.6, 1),
    ]
    return [TokenEpisode(ids, turns, reward, group) for ids, turns, reward, group in shapes]


def _config(preset: str, **kw) -> LearnerConfig:
    return LearnerConfig(switches=PGSwitches.model_validate(PRESETS[preset]), **kw)


def _gradient(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _learner_gradient(tokenizer, preset: str) -> tuple[torch.Tensor, torch.nn.Module]:
    model = _model(tokenizer)
    switches = PGSwitches.model_validate({**PRESETS[preset], "min_abs_advantage": 0, "max_grad_norm": None})
    config = LearnerConfig(switches=switches, lr=0.0, pad_id=tokenizer.pad_token_id)  # lr 0: weights stay
    learner = PolicyGradient(model, config)
    learner.step(learner.prepare(_token_episodes()))
    return _gradient(model), model


def _reinforce_gradient(model, per_token_mean: bool) -> torch.Tensor:
    """REINFORCE with the leave-one-out advantage, written directly: -(1/N) sum_i A_i sum_t log p(x_t) (Eq. 2),
    or with Eq. 10's 1/|a(x)| per episode."""
    model.zero_grad()
    rollouts = _token_episodes()
    adv = leave_one_out(torch.tensor([r.reward for r in rollouts]), torch.tensor([r.group for r in rollouts]))
    total = 0.0
    for r, a in zip(rollouts, adv, strict=True):
        ids = torch.tensor([r.ids])
        logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        reply = torch.tensor(r.turns[1:]) > 0
        episode = logp[reply].sum() / (reply.sum() if per_token_mean else 1)
        total = total - a * episode / len(rollouts)
    total.backward()
    return _gradient(model)


def test_loop_with_one_epoch_and_no_minibatches_is_the_reinforce_leave_one_out_update(tokenizer):
    """On-policy, the ratio is 1 and PPO's gradient is REINFORCE's (LOOP 4.2): `loop` with one epoch of one
    mini-batch gives REINFORCE-LOO with Eq. 10's per-episode token mean, and `rloo` (per-trajectory weight,
    one step) gives Eq. 2's sum over the episode's tokens. They differ only by that 1/|a(x)|."""
    switches = {"epochs": 1, "minibatches": 1}
    PRESETS["loop_one_step"] = {**PRESETS["loop"], **switches}
    try:
        grad, model = _learner_gradient(tokenizer, "loop_one_step")
    finally:
        del PRESETS["loop_one_step"]
    assert torch.allclose(grad, _reinforce_gradient(model, per_token_mean=True), atol=1e-6)
    grad, model = _learner_gradient(tokenizer, "rloo")
    assert torch.allclose(grad, _reinforce_gradient(model, per_token_mean=False), atol=1e-6)
    assert not torch.allclose(grad, _reinforce_gradient(model, per_token_mean=True), atol=1e-4)


def test_advantage_filter_drops_small_advantages(tokenizer):
    rollouts = _token_episodes()
    rollouts[1].reward = 1.0  # group 0 now all 1: A = 0 for both
    learner = PolicyGradient(_model(tokenizer), _config("loop", lr=1e-3))
    batch = learner.prepare(rollouts)
    assert batch.stats["filtered"] == 0.5 and [e.group for e in batch.episodes] == [1, 1]


def test_kl_abort_stops_the_iteration(tokenizer):
    switches = PGSwitches.model_validate({**PRESETS["loop"], "kl_abort": 1e-9, "min_abs_advantage": 0})
    learner = PolicyGradient(_model(tokenizer), LearnerConfig(switches=switches, lr=0.05))
    stats = learner.step(learner.prepare(_token_episodes()))
    assert stats["aborted"] and stats["steps"] == 1  # the first step moved the policy; the second is skipped


def test_warmup_ramps_the_learning_rate_over_the_first_steps(tokenizer):
    """Adam's first step moves every weight with a gradient by lr (m / sqrt(v) = sign(g)), however small the
    gradient: with warm-up 4 the steps use lr/4, lr/2, 3lr/4, then lr."""
    model = _model(tokenizer)
    switches = PGSwitches.model_validate({**PRESETS["rloo"], "max_grad_norm": None})
    config = LearnerConfig(switches=switches, lr=1e-3, pad_id=tokenizer.pad_token_id, warmup=4)
    learner = PolicyGradient(model, config)
    batch = learner.prepare(_token_episodes())
    rates, first_move = [], None
    for _ in range(5):
        rates.append(learner.optimizer.param_groups[0]["lr"])
        before = [p.detach().clone() for p in model.parameters()]
        learner.step(batch)  # rloo: one step per call
        if first_move is None:
            first_move = max(
                float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True)
            )
    assert rates == pytest.approx([0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3])
    assert first_move == pytest.approx(0.25e-3, rel=1e-3)  # Adam's first step: the step size itself


def test_reference_model_only_when_there_is_a_kl_term(tokenizer):
    assert PolicyGradient(_model(tokenizer), _config("loop", lr=1e-3)).reference is None
    grpo = PolicyGradient(_model(tokenizer), _config("grpo", lr=1e-3))
    assert grpo.reference is not None and not any(p.requires_grad for p in grpo.reference.parameters())


@pytest.mark.slow  # trains each preset until it learns
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_learns_a_one_turn_task_from_chance(tokenizer, preset):
    """Two prompts; the reward is 1 when the reply's token id has the prompt's parity (chance: 1/2). Within
    30 updates of 8 tasks x 8 samples, the mean reward must reach 0.9."""
    torch.manual_seed(0)
    model = _model(tokenizer)
    switches = PGSwitches.model_validate({**PRESETS[preset], "value_warmup": 2})
    learner = PolicyGradient(model, LearnerConfig(switches=switches, lr=1e-2, pad_id=tokenizer.pad_token_id))
    generator = torch.Generator().manual_seed(0)
    prompts = [[5, 6], [7, 8]]
    history = []
    for _ in range(30):
        groups = [g for g in range(8) for _ in range(8)]
        model.eval()
        replies = sample(model, [prompts[g % 2] for g in groups], 1, [], 0, generator=generator)
        rollouts = [
            TokenEpisode(
                prompts[g % 2] + c.token_ids, [0, 0, 1], float(c.token_ids[0] % 2 == g % 2), g, c.logprobs
            )
            for g, c in zip(groups, replies, strict=True)
        ]
        history.append(sum(r.reward for r in rollouts) / len(rollouts))
        batch = learner.prepare(rollouts)
        assert batch.stats["logprob_gap"] < 1e-5  # the learner recomputes exactly what the sampler drew with
        learner.step(batch)
    assert history[0] < 0.7 and max(history[-5:]) >= 0.9 and sum(history[-5:]) / 5 >= 0.85, history


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_logprob_gap_compares_like_with_like_at_any_temperature(tokenizer, temperature):
    """The sampler stores the model's own (untempered) log-probabilities; the learner's old log-probabilities
    are tempered. The diagnostic must compare the same quantity, so it is ~0 at every temperature."""
    torch.manual_seed(0)
    model = _model(tokenizer).eval()
    learner = PolicyGradient(model, _config("loop", lr=1e-3, temperature=temperature))
    replies = sample(model, [[5, 6]] * 8, 4, [], 0, temperature, generator=torch.Generator().manual_seed(0))
    rollouts = [
        TokenEpisode([5, 6] + c.token_ids, [0, 0] + [1] * len(c.token_ids), float(i % 2), 0, c.logprobs)
        for i, c in enumerate(replies)
    ]
    assert learner.prepare(rollouts).stats["logprob_gap"] < 1e-5


def test_rl_params_resolve_presets_and_reject_bad_switches():
    rl = RLParams(tasks={"maze": 4}, algorithm="grpo", switches={"epochs": 3})
    assert switches(rl).kl_coef == 0.04 and switches(rl).epochs == 3
    with pytest.raises(UserError, match="gae gives one advantage per token"):
        switches(RLParams(tasks={"maze": 4}, algorithm="ppo", switches={"level": "traj"}))
    with pytest.raises(UserError, match="switches: epoch: Extra inputs"):
        switches(RLParams(tasks={"maze": 4}, switches={"epoch": 3}))


def test_scalinginter_schedule_holds_each_limit_for_its_iterations():
    rl = RLParams(
        tasks={"maze": 4},
        iterations=7,
        horizon=[{"turns": 3, "iterations": 2}, {"turns": 6, "iterations": 3}, {"turns": 9}],
    )
    assert [rl.turn_limit(i) for i in range(1, 8)] == [3, 3, 6, 6, 6, 9, 9]
    assert RLParams(tasks={"maze": 4}).turn_limit(5) is None
    with pytest.raises(ValueError, match="needs its `iterations`"):
        RLParams(tasks={"maze": 4}, horizon=[{"turns": 3}, {"turns": 6}])


def test_loop_gradient_is_trls_grpo_gradient_with_shared_prompts(tokenizer, tmp_path):
    """LOOP's clipped token-level objective (Eq. 10: each episode's token mean) is TRL GRPOTrainer's loss_type
    "grpo" with beta 0: on the same batch, old log-probabilities and weights, the gradients are equal. Two
    prompts of 20 ids shared by three samples each (their prefix runs once), replies of 2 to 6 ids; the weights
    move after the old log-probabilities so the ratios differ from 1 and some are clipped."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompts = torch.randint(5, vocab, (2, 20), generator=generator)
    lengths = [3, 6, 2, 4, 5, 2]
    completions = [torch.randint(5, vocab, (n,), generator=generator).tolist() for n in lengths]
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    episodes = [
        TokenEpisode(prompts[i // 3].tolist() + c, [0] * 20 + [1] * len(c), r, i // 3)
        for i, (c, r) in enumerate(zip(completions, rewards, strict=True))
    ]
    assert min(shared_prefixes(episodes)) >= 20
    model = _model(tokenizer)
    switches = PGSwitches.model_validate({**PRESETS["loop"], "min_abs_advantage": 0, "max_grad_norm": None})
    learner = PolicyGradient(model, LearnerConfig(switches=switches, lr=0.0, pad_id=tokenizer.pad_token_id))
    batch = learner.prepare(episodes)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    sums = learner.backward(batch, list(range(6)), learner.units(batch))
    ours = _gradient(model)

    model.zero_grad()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=6,
        num_generations=3,
        beta=0.0,
        loss_type="grpo",
        epsilon=switches.clip,
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_completion_length=6,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "unused"}] * 2),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 1
    completion_mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    completion_ids = torch.tensor([c + [tokenizer.pad_token_id] * (6 - len(c)) for c in completions])
    old = torch.stack([torch.cat([lp[20:], torch.zeros(26 - len(lp))]) for lp in batch.old_logp])
    inputs = {
        "prompt_ids": prompts.repeat_interleave(3, 0),
        "prompt_mask": torch.ones(6, 20, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": leave_one_out(torch.tensor(rewards), torch.tensor([0, 0, 0, 1, 1, 1])).float(),
        "old_per_token_logps": old,
        "num_items_in_batch": completion_mask.sum(),
    }
    trainer.compute_loss(trainer.model, inputs).backward()
    theirs = _gradient(model)
    assert 0 < sums["clipped"] < sums["units"]
    assert ours.abs().max() > 1e-3 and torch.allclose(ours, theirs, atol=1e-6, rtol=1e-4)
