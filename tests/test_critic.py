"""SWEET-RL's turn-wise critic against numbers worked out by hand and an independent forward pass: Eq. 3's
advantage, Eq. 2's Bradley-Terry loss and its gradient, the value row's BCE, pair construction, what the critic
reads (hidden or not), the stored episodes it is trained on, saving its variant, and resuming its training."""

import dataclasses
import math

import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_splits, save_tasks
from gymflow.envs.maze import Maze
from gymflow.errors import UserError
from gymflow.models.build import build_model
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.engine import episode_turns
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Episode, RunInfo
from gymflow.train import critic as critic_mod
from gymflow.train.critic import (
    CriticConfig,
    CriticEpisode,
    CriticItem,
    TurnCritic,
    bt_loss,
    critic_episodes,
    fit,
    load_critic,
    preference_pairs,
    save_critic,
    train_critic,
    turn_advantages,
    turn_scores,
    value_loss,
)

TASKS = build_splits(ColBench, 4, 0, seed=0)["train"]


def _sampled(ep: Episode, fmt: ChatFormat) -> Episode:
    """An expert episode as if a policy had sampled it: each reply's ids are its text's, closed by eos."""
    for m in ep.messages:
        if m.role == "assistant":
            m.token_ids = fmt.encode(m.text) + [fmt.eos_id]
            m.logprobs = [0.0] * len(m.token_ids)
    return ep


def _spoiled(ep: Episode, fmt: ChatFormat) -> Episode:
    """The same episode, its last reply a wrong submission and its reward 0."""
    messages = [dataclasses.replace(m) for m in ep.messages]
    ep = dataclasses.replace(ep, messages=messages, reward=0.0, success=False, sample=1)
    last = [m for m in ep.messages if m.role == "assistant"][-1]
    last.text = "Thought: I guess.\nAction: submit\ndef f():\n    return 0"
    last.token_ids = fmt.encode(last.text) + [fmt.eos_id]
    return ep


def _episodes(fmt: ChatFormat) -> list[Episode]:
    """Per task: the expert's episode (reward 1) and a spoiled copy (reward 0)."""
    env = make_env("colbench")
    out = []
    for t in TASKS:
        good = _sampled(run_expert(env, t), fmt)
        out += [good, _spoiled(good, fmt)]
    return out


def _critic_episode(ep: Episode, fmt: ChatFormat) -> CriticEpisode:
    ids, turns = episode_turns(ep.messages, fmt)
    index = [i for i, m in enumerate(ep.messages) if m.role == "assistant"]
    hidden = ColBench.hidden_text(ep.task)
    return CriticEpisode(
        f"{ep.task.task_id}/{ep.reward}",
        "colbench",
        ep.task.task_id,
        ep.reward,
        ep.success,
        hidden,
        ids,
        turns,
        index,
    )


def _perturbed(critic: TurnCritic, seed: int = 0, scale: float = 0.05) -> TurnCritic:
    """pi_theta moved away from pi_ref, so advantages are not all 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in critic.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return critic


# ---- Eq. 3 ----------------------------------------------------------------------------------------------


def test_turn_advantage_is_the_mean_log_ratio_over_each_replys_ids():
    # reply 1: ids with log-ratios (-1.0 + 1.5) = 0.5 and (-2.0 + 1.0) = -1.0 -> mean -0.25;
    # reply 2: one id, -0.5 + 0.7 = 0.2
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.7])
    assert turn_advantages(logp, ref, torch.tensor([1, 1, 2])).tolist() == pytest.approx([-0.25, 0.2])


def _two_turns(fmt: ChatFormat) -> tuple[list[int], list[int], list[int], list[int]]:
    """A 2-turn colbench sequence: (prompt, reply 1, ids between, reply 2)."""
    prompt = fmt.prompt(ColBench.spec.system_prompt, TASKS[0].instruction)
    r1 = fmt.encode("Thought: I still need the rate.\nAction: ask What is the rate?") + [fmt.eos_id]
    between = fmt.between(r1, "The rate is 6%.")
    r2 = fmt.encode("Thought: done.\nAction: submit\ndef f():\n    return 6") + [fmt.eos_id]
    return prompt, r1, between, r2


def test_eq3_on_a_two_turn_episode_equals_an_independent_forward_pass(policy, fmt):
    """Each turn's advantage is the mean over its reply ids of log pi_theta - log pi_ref, each computed here by a
    plain full forward of hidden block + sequence; per turn with its context (`score`) and over the whole
    episode at once (`score_episodes`) give the same numbers."""
    critic = _perturbed(TurnCritic.initial(policy, fmt, CriticConfig()))
    prompt, r1, between, r2 = _two_turns(fmt)
    hidden = ColBench.hidden_text(TASKS[0])
    block = fmt.encode(hidden + "\n\n")
    full = block + prompt + r1 + between + r2

    with torch.no_grad():  # per position p, log-probabilities of the id at p given full[:p]
        table = {
            name: model(input_ids=torch.tensor([full])).logits[0].float().log_softmax(-1)
            for name, model in (("theta", critic.model), ("ref", critic.reference))
        }

    start1 = len(block) + len(prompt)
    start2 = start1 + len(r1) + len(between)
    expected = []
    for start, reply in ((start1, r1), (start2, r2)):
        ratios = [
            float(table["theta"][p - 1, full[p]] - table["ref"][p - 1, full[p]])
            for p in range(start, start + len(reply))
        ]
        expected.append(sum(ratios) / len(ratios))
    assert all(abs(a) > 1e-4 for a in expected)  # the perturbation moved them off 0

    items = [CriticItem(hidden, prompt, r1), CriticItem(hidden, prompt + r1 + between, r2)]
    assert critic.score(items) == pytest.approx(expected, abs=1e-5)
    ids, turns = (
        prompt + r1 + between + r2,
        [0] * len(prompt) + [1] * len(r1) + [0] * len(between) + [2] * len(r2),
    )
    whole = CriticEpisode("e", "colbench", TASKS[0].task_id, 1.0, True, hidden, ids, turns, [2, 4])
    assert critic.score_episodes([whole])[0] == pytest.approx(expected, abs=1e-5)
    rows = turn_scores(critic, "hidden", [whole])
    assert [(r["critic"], r["episode_id"], r["turn"]) for r in rows] == [
        ("hidden", "e", 2),
        ("hidden", "e", 4),
    ]
    assert [r["critic_score"] for r in rows] == pytest.approx(expected, abs=1e-5)
    assert [r["advantage"] for r in rows] == [r["critic_score"] for r in rows]  # Eq. 3: the score is it


def test_advantage_is_zero_when_theta_equals_reference(policy, fmt):
    critic = TurnCritic.initial(policy, fmt, CriticConfig())
    prompt, r1, between, r2 = _two_turns(fmt)
    hidden = ColBench.hidden_text(TASKS[0])
    assert critic.score([CriticItem(hidden, prompt, r1), CriticItem("", prompt + r1 + between, r2)]) == [
        0.0,
        0.0,
    ]


def test_scores_are_batched_like_single_items(policy, fmt):
    """Padding and chunking (max_tokens) change no score: items of different lengths, one pass or several."""
    critic = _perturbed(TurnCritic.initial(policy, fmt, CriticConfig()))
    prompt, r1, between, r2 = _two_turns(fmt)
    items = [CriticItem("x", prompt, r1), CriticItem("a longer hidden text", prompt + r1 + between, r2)]
    together = critic.score(items)
    alone = [critic.score([item])[0] for item in items]
    small = TurnCritic(critic.model, fmt, CriticConfig(max_tokens=64), reference=critic.reference)
    assert together == pytest.approx(alone, abs=1e-6) and small.score(items) == pytest.approx(alone, abs=1e-6)


@pytest.mark.parametrize("kind", ["advantage", "value"])
def test_candidates_of_one_context_score_as_they_would_alone(policy, fmt, kind):
    """Replies that share their context (Best-of-N's candidates) are scored from one encoding of it: the same
    numbers as each scored alone, with a context shared by none in the same call."""
    critic = _perturbed(TurnCritic.initial(policy, fmt, CriticConfig(kind=kind)))
    prompt, r1, between, r2 = _two_turns(fmt)
    context = prompt + r1 + between
    replies = [r2, r1, r2[:3], fmt.encode("Action: ask why") + [fmt.eos_id]]
    items = [CriticItem("h", context, r) for r in replies] + [CriticItem("h", prompt, r1)]
    alone = [critic.score([item])[0] for item in items]
    assert critic.score(items) == pytest.approx(alone, abs=1e-5)
    assert len(set(alone)) == len(alone)


# ---- what the critic reads ---------------------------------------------------------------------------------


def test_the_hidden_block_leads_the_critics_input_and_the_variant_without_it_drops_it(policy, fmt):
    prompt, r1, _, _ = _two_turns(fmt)
    hidden = ColBench.hidden_text(TASKS[0])
    assert (
        hidden.startswith("In light that the final answer is:\n") and TASKS[0].hidden["reference"] in hidden
    )
    item = CriticItem(hidden, prompt, r1)
    ids, turns = TurnCritic.initial(policy, fmt, CriticConfig()).item_sequence(item)
    block = fmt.encode(hidden + "\n\n")
    assert ids == block + prompt + r1 and turns == [0] * (len(block) + len(prompt)) + [1] * len(r1)
    assert TASKS[0].hidden["reference"] in fmt.tokenizer.decode(ids)
    ids, _ = TurnCritic.initial(policy, fmt, CriticConfig(hidden=False)).item_sequence(item)
    assert ids == prompt + r1 and TASKS[0].hidden["reference"] not in fmt.tokenizer.decode(ids)
    cut = TurnCritic.initial(policy, fmt, CriticConfig(max_hidden_tokens=5)).item_sequence(item)[0]
    assert cut == block[:5] + prompt + r1


def test_hidden_text_defaults_to_sorted_json_and_is_empty_without_hidden():
    maze = next(Maze.generate("train", 0))
    assert Maze.hidden_text(maze).startswith('{"') and len(Maze.hidden_text(maze)) <= 2_003
    assert Maze.hidden_text(dataclasses.replace(maze, hidden={})) == ""
    long = dataclasses.replace(maze, hidden={"b": "x" * 5000, "a": 1})
    assert Maze.hidden_text(long).startswith('{"a": 1, "b": "xx') and len(Maze.hidden_text(long)) == 2_003


# ---- Eq. 2 ----------------------------------------------------------------------------------------------


def test_bt_loss_against_hand_computed_numbers():
    # chosen turns [0.2, -0.1] sum 0.1, rejected [0.3, 0.1] sum 0.4; beta 1: -log sigma(-0.3) = log(1 + e^0.3)
    chosen, rejected = torch.tensor([0.2 - 0.1]), torch.tensor([0.3 + 0.1])
    assert float(bt_loss(chosen, rejected, 1.0)) == pytest.approx(0.854355, abs=1e-6)
    assert float(bt_loss(chosen, rejected, 1.0)) == pytest.approx(math.log(1 + math.exp(0.3)), abs=1e-6)
    # two pairs, beta 0.1: margins 0.1*(0.1-0.4) = -0.03 and 0.1*(1.0-0.0) = 0.1, averaged
    two = bt_loss(torch.tensor([0.1, 1.0]), torch.tensor([0.4, 0.0]), 0.1)
    assert float(two) == pytest.approx(
        (math.log(1 + math.exp(0.03)) + math.log(1 + math.exp(-0.1))) / 2, abs=1e-6
    )


def test_bt_gradient_raises_chosen_and_lowers_rejected():
    chosen = torch.tensor([0.1], requires_grad=True)
    rejected = torch.tensor([0.4], requires_grad=True)
    bt_loss(chosen, rejected, 1.0).backward()
    # d/dc -log sigma(c - r) = -sigma(r - c) = -sigma(0.3)
    assert float(chosen.grad) == pytest.approx(-1 / (1 + math.exp(-0.3)), abs=1e-6)
    assert float(rejected.grad) == pytest.approx(1 / (1 + math.exp(-0.3)), abs=1e-6)


@pytest.mark.slow  # trains until the critic learns
def test_training_on_one_pair_raises_the_chosen_episodes_advantage_sum(policy, fmt, tmp_path):
    good, bad = (_critic_episode(ep, fmt) for ep in _episodes(fmt)[:2])
    critic = TurnCritic.initial(policy, fmt, CriticConfig(lr=1e-3, epochs=5, beta=1.0, max_grad_norm=None))
    before = [sum(s) for s in critic.score_episodes([good, bad])]
    assert before == [0.0, 0.0]
    rows = fit(critic, [good, bad], tmp_path / "state.pt")
    after = [sum(s) for s in critic.score_episodes([good, bad])]
    assert after[0] - after[1] > 0.1
    assert rows[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # the first step: every advantage 0
    assert rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["accuracy"] == 1.0


def test_the_nll_term_adds_the_chosen_replies_mean_nll(policy, fmt, tmp_path):
    """At the first step every advantage is 0, so the loss is log 2 + nll_coef * the chosen episode's mean NLL
    over its reply ids (under pi_theta = the policy, given hidden + context)."""
    good, bad = (_critic_episode(ep, fmt) for ep in _episodes(fmt)[:2])
    critic = TurnCritic.initial(policy, fmt, CriticConfig(nll_coef=0.5, epochs=1))
    nll = -float(critic.reference_logp([critic.sequence(good.hidden, good.ids, good.turns)])[0].mean())
    rows = fit(critic, [good, bad], tmp_path / "state.pt")
    assert rows[0]["loss"] == pytest.approx(math.log(2) + 0.5 * nll, abs=1e-5)


# ---- pairs ----------------------------------------------------------------------------------------------


def test_pairs_rank_by_reward_within_a_task_and_skip_ties():
    rewards = [1.0, 0.0, 0.5, 0.5, 1.0, 0.2, 0.2]
    groups = ["a", "a", "a", "b", "b", "c", "c"]
    pairs = preference_pairs(rewards, groups, 10, seed=0)
    # a: (0 > 1), (0 > 2), (2 > 1); b: (4 > 3); c: a tie, none; no pair across tasks
    assert sorted(pairs) == [(0, 1), (0, 2), (2, 1), (4, 3)]


def test_pairs_are_capped_per_task_by_a_seeded_draw():
    rewards = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5] + [1.0, 0.0]
    groups = ["a"] * 6 + ["b"] * 2
    every = preference_pairs(rewards, groups, 100, seed=0)
    assert len(every) == 15 + 1
    capped = preference_pairs(rewards, groups, 4, seed=0)
    assert len([p for p in capped if p[0] < 6]) == 4 and (6, 7) in capped
    assert set(capped) <= set(every)
    assert capped == preference_pairs(rewards, groups, 4, seed=0)
    assert any(preference_pairs(rewards, groups, 4, seed=s) != capped for s in range(1, 5))
    # a task's draw does not depend on the other tasks
    assert [p for p in preference_pairs(rewards[:6], groups[:6], 4, seed=0)] == [
        p for p in capped if p[0] < 6
    ]


# ---- the value variant ------------------------------------------------------------------------------------


def test_value_loss_is_bce_against_success():
    # logits 0 and 2 against success 1 and 0: (-log sigma(0) - log(1 - sigma(2))) / 2 = (log 2 + log(1 + e^2)) / 2
    loss = value_loss(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0]))
    assert float(loss) == pytest.approx((math.log(2) + math.log(1 + math.exp(2))) / 2, abs=1e-6)


@pytest.mark.slow  # trains until the critic learns
def test_value_critic_scores_the_state_after_the_reply_and_moves_toward_success(policy, fmt, tmp_path):
    """The score is the head on the last hidden state of the reply's last id; training on an episode that
    succeeded raises every one of its turns' logits, on one that failed lowers them."""
    config = CriticConfig(kind="value", lr=1e-3, head_lr=1e-2, epochs=3, batch=1)
    critic = TurnCritic.initial(policy, fmt, config)
    prompt, r1, _, _ = _two_turns(fmt)
    hidden = ColBench.hidden_text(TASKS[0])
    full = fmt.encode(hidden + "\n\n") + prompt + r1
    with torch.no_grad():
        state = critic.model.model(input_ids=torch.tensor([full])).last_hidden_state[0, -1]
        expected = float(critic.head(state[None]))
    assert critic.score([CriticItem(hidden, prompt, r1)]) == pytest.approx([expected], abs=1e-5)
    _, _, between, r2 = _two_turns(fmt)
    items = [CriticItem(hidden, prompt, r1), CriticItem(hidden, prompt + r1 + between, r2)]
    turns = [0] * len(prompt) + [1] * len(r1) + [0] * len(between) + [2] * len(r2)
    whole = CriticEpisode("e", "colbench", "t", 1.0, True, hidden, prompt + r1 + between + r2, turns, [2, 4])
    assert critic.score_episodes([whole])[0] == pytest.approx(critic.score(items), abs=1e-5)
    first, second = critic.score(items)
    rows = turn_scores(critic, "value", [whole])
    assert [r["critic_score"] for r in rows] == pytest.approx([first, second], abs=1e-5)
    assert rows[0]["advantage"] is None and rows[1]["advantage"] == pytest.approx(second - first, abs=1e-5)
    good, bad = (_critic_episode(ep, fmt) for ep in _episodes(fmt)[:2])
    for episode, direction in ((good, 1), (bad, -1)):
        critic = TurnCritic.initial(policy, fmt, config)
        before = critic.score_episodes([episode])[0]
        rows = fit(critic, [episode], tmp_path / f"{direction}.pt")
        after = critic.score_episodes([episode])[0]
        assert all(direction * (a - b) > 0.05 for a, b in zip(after, before, strict=True)), (before, after)
        assert rows[-1]["loss"] < rows[0]["loss"]


@pytest.mark.slow  # trains until the critic learns
def test_a_reward_target_value_head_learns_from_episodes_that_all_failed(policy, fmt, tmp_path):
    """Nothing succeeded, so a success target only pushes every logit down; the reward as a soft label
    (value_target="reward") pulls every logit toward logit(0.9) = 2.2, up from where a fresh head starts (near 0)."""
    high = dataclasses.replace(_critic_episode(_episodes(fmt)[0], fmt), reward=0.9, success=False)
    moved = {}
    for target in ("success", "reward"):
        config = CriticConfig(kind="value", value_target=target, lr=0.0, head_lr=1e-2, epochs=20, batch=1)
        critic = TurnCritic.initial(policy, fmt, config)
        before = critic.score_episodes([high])[0]
        fit(critic, [high], tmp_path / f"{target}.pt")
        moved[target] = [a - b for a, b in zip(critic.score_episodes([high])[0], before, strict=True)]
    assert all(m < 0 for m in moved["success"]) and all(m > 0 for m in moved["reward"])


# ---- stored episodes, saving, resuming ------------------------------------------------------------------------


def _store(fmt: ChatFormat, root) -> tuple:
    """The episodes (and an expert one without sampled ids) in rollout tables, the tasks in an instruction table."""
    episodes = _episodes(fmt)
    env = make_env("colbench")
    write_episodes(
        root / "rollouts",
        "colbench",
        [*episodes, dataclasses.replace(run_expert(env, TASKS[0]), sample=2)],
        RunInfo("main", "collect", 0, "sft"),
    )
    save_tasks(root, "colbench", {"train": TASKS})
    return root / "rollouts", root / "instructions", episodes


def test_stored_episodes_are_read_token_exactly_with_their_tasks_hidden(fmt, tmp_path):
    rollouts, instructions, episodes = _store(fmt, tmp_path)
    read = critic_episodes(rollouts, instructions, fmt)
    assert len(read) == len(episodes)  # the expert episode, without sampled ids, is skipped
    by_key = {(e.task_id, e.reward): e for e in read}
    for ep in episodes:
        got = by_key[ep.task.task_id, ep.reward]
        ids, turns = episode_turns(ep.messages, fmt)
        assert got.ids == ids and got.turns == turns and got.success == ep.success
        assert got.hidden == ColBench.hidden_text(ep.task)
        assert got.message_index == [i for i, m in enumerate(ep.messages) if m.role == "assistant"]
    save_tasks(tmp_path, "colbench", {"train": TASKS[1:]})
    with pytest.raises(UserError, match="tasks are not in"):
        critic_episodes(rollouts, instructions, fmt)


@pytest.mark.parametrize("kind", ["advantage", "value"])
def test_a_saved_critic_loads_as_its_variant_and_scores_the_same(policy, fmt, tmp_path, kind):
    critic = _perturbed(TurnCritic.initial(policy, fmt, CriticConfig(kind=kind, hidden=False, beta=0.3)))
    save_critic(critic, tmp_path / "critic")
    loaded = load_critic(tmp_path / "critic")
    assert loaded.config == critic.config and loaded.config.kind == kind and not loaded.config.hidden
    prompt, r1, between, r2 = _two_turns(fmt)
    items = [CriticItem("h", prompt, r1), CriticItem("h", prompt + r1 + between, r2)]
    assert loaded.score(items) == pytest.approx(critic.score(items), abs=1e-6)
    with pytest.raises(UserError, match="no critic"):
        load_critic(tmp_path)


def test_a_stopped_training_resumes_to_the_weights_of_an_uninterrupted_one(fmt, tmp_path, monkeypatch):
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=2048)
    start = tmp_path / "policy"
    build_model(cfg, fmt.tokenizer).save_pretrained(start)
    fmt.tokenizer.save_pretrained(start)
    episodes = [_critic_episode(ep, fmt) for ep in _episodes(fmt)]
    config = CriticConfig(lr=1e-3, epochs=3, batch=2, max_pairs_per_task=1)

    whole = train_critic(start, episodes, config, tmp_path / "whole")

    save, saves = critic_mod._save, []

    def stop_after_first_epoch(*args):
        save(*args)
        saves.append(1)
        raise KeyboardInterrupt  # killed right after the epoch's checkpoint

    monkeypatch.setattr(critic_mod, "_save", stop_after_first_epoch)
    with pytest.raises(KeyboardInterrupt):
        train_critic(start, episodes, config, tmp_path / "resumed")
    assert saves == [1] and not (tmp_path / "resumed").exists()

    def count(*args):
        save(*args)
        saves.append(2)

    monkeypatch.setattr(critic_mod, "_save", count)
    resumed = train_critic(start, episodes, config, tmp_path / "resumed")
    assert saves == [1, 2, 2]  # the rerun trained epochs 2 and 3 only

    assert [r["epoch"] for r in resumed["epochs"]] == [1, 2, 3]
    assert [r["loss"] for r in resumed["epochs"]] == [r["loss"] for r in whole["epochs"]]
    a = load_critic(tmp_path / "whole").model.state_dict()
    b = load_critic(tmp_path / "resumed").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "resumed.checkpoints").exists()  # removed once the critic is saved


def test_no_pair_is_a_user_error(policy, fmt, tmp_path):
    good = _critic_episode(_episodes(fmt)[0], fmt)
    critic = TurnCritic.initial(policy, fmt, CriticConfig())
    with pytest.raises(UserError, match="no pair of episodes"):
        fit(critic, [good, dataclasses.replace(good, episode_id="copy")], tmp_path / "state.pt")


def test_critic_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="Extra inputs"):
        CriticConfig.model_validate({"hiden": False})
    with pytest.raises(ValueError, match="kind"):
        CriticConfig.model_validate({"kind": "q"})
    with pytest.raises(ValueError, match="beta"):
        CriticConfig(beta=0)
