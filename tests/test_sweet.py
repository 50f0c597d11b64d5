"""SWEET-RL's actor data and the baselines' data: per-turn pairs from the top and bottom halves (ties, odd
counts, seeds), multi-turn pairs within a task, RFT's successes, and the stored pairs: ids exactly as sampled
(also where re-tokenizing the text would change them), contexts the policy saw without the hidden text, a
seeded table that a stopped run finishes identically, and both kinds of pairs training with DPO."""

import dataclasses
import random
import statistics

import pyarrow.parquet as pq
import pytest
import torch

from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_splits, save_tasks
from gymflow.errors import UserError
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.engine import SamplingConfig, episode_turns, rollout
from gymflow.rollout.records import RunInfo
from gymflow.train import sweet
from gymflow.train.critic import CriticConfig, CriticEpisode, TurnCritic, critic_episodes
from gymflow.train.dpo import DPOParams, train_dpo
from gymflow.train.sweet import (
    PAIRS_SCHEMA,
    CandidateParams,
    build_turn_pairs,
    episode_pair,
    episode_pairs,
    half_pairs,
    read_turn_pairs,
    rft_rows,
)

SPLITS = build_splits(ColBench, 3, 0, seed=0)
TASKS = SPLITS["train"]


pytestmark = pytest.mark.usefixtures("one_thread")


class IdSumCritic:
    """Test double for `gymflow.train.critic.TurnCritic`: scores a reply by a fixed function of its ids (their
    sum mod 101) and records every item it was given."""

    def __init__(self) -> None:
        self.items = []

    def score(self, items):
        self.items += items
        return [float(sum(item.reply_ids) % 101) for item in items]


@pytest.fixture(scope="module")
def offline(fmt, policy, tmp_path_factory):
    """Two sampled episodes per task, stored and read back as the actor reads them: (episodes, as played)."""
    data = tmp_path_factory.mktemp("data")
    save_tasks(data, "colbench", SPLITS)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, batch_size=8)
    played = rollout(
        policy, fmt, [(t, s) for t in TASKS for s in (0, 1)], sampling, horizon=3, generator=torch.Generator()
    )
    write_episodes(data / "rollouts", "colbench", played, RunInfo("main", "offline", 0, "sft"))
    return critic_episodes(data / "rollouts", data, fmt), played


def _build(policy, fmt, critic, episodes, tmp_path, **params):
    cfg = CandidateParams(**({"candidates": 4, "pairs_per_turn": 2} | params))
    out = tmp_path / "pairs.parquet"
    sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=8, batch_size=8)
    metrics = build_turn_pairs(policy, fmt, critic, episodes, cfg, sampling, out, "critic-test")
    return pq.read_table(out).to_pylist(), metrics


def _episode(task: str, reward: float, success: bool = False, sample: int = 0) -> CriticEpisode:
    """A hand-made stored episode: prompt ids, a 2-id reply, an observation, a 1-id reply."""
    ids, turns = [1, 2, 3, 10, 11, 4, 5, 12], [0, 0, 0, 1, 1, 0, 0, 2]
    return CriticEpisode(f"{task}/{sample}", "colbench", task, reward, success, "ref", ids, turns, [2, 4])


# ---- per-turn pairs: the halves --------------------------------------------------------------------------


def test_of_16_candidates_chosen_scores_at_least_the_median_and_rejected_at_most():
    for seed in range(40):
        draw = random.Random(seed)
        scores = [round(draw.random(), 1) for _ in range(16)]  # one decimal: some ties
        median = statistics.median(scores)
        top = sorted(scores, reverse=True)[:8]
        pairs = half_pairs(scores, 4, random.Random(seed))
        assert pairs and len(set(pairs)) == len(pairs) <= 4
        for c, r in pairs:
            assert scores[c] >= median >= scores[r] and scores[c] > scores[r]
            assert scores[c] >= min(top) and scores[r] <= top[-1]
        assert half_pairs(scores, 4, random.Random(seed)) == pairs  # seeded


def test_a_tie_is_no_preference():
    assert half_pairs([0.5] * 16, 4, random.Random(0)) == []
    # tied candidates straddle the middle: top = 5, 4 and two of the 3s; bottom = the other 3s, 2, 1
    scores = [5, 4, 3, 3, 3, 3, 2, 1]
    every = half_pairs(scores, 100, random.Random(1))
    assert len(every) == 4 + 4 + 2 + 2 and all(scores[c] > scores[r] for c, r in every)
    halves = [half_pairs(scores, 100, random.Random(s)) for s in range(20)]
    assert len({frozenset(c for c, _ in h) for h in halves}) > 1  # which 3s are "top" is a draw


def test_an_odd_count_leaves_the_middle_candidate_out_and_nan_is_refused():
    assert half_pairs([3.0, 2.0, 1.0], 5, random.Random(0)) == [(0, 2)]
    with pytest.raises(ValueError, match="NaN"):
        half_pairs([1.0, float("nan")], 1, random.Random(0))


# ---- multi-turn pairs and RFT ----------------------------------------------------------------------------


def test_episode_pairs_rank_by_reward_within_a_task_skip_ties_and_cap_per_task():
    eps = [_episode("a", r, sample=i) for i, r in enumerate([1.0, 0.5, 0.5, 0.0])]
    eps += [_episode("b", 1.0), _episode("c", 0.3), _episode("c", 0.3, sample=1)]
    every = episode_pairs(eps, 100, seed=0)
    assert len(every) == 5  # a: 1 > 0.5 (twice), 1 > 0, 0.5 > 0 (twice); b alone; c tied
    assert all(c.task_id == r.task_id == "a" and c.reward > r.reward for c, r in every)
    names = {(c.episode_id, r.episode_id) for c, r in every}
    capped = [(c.episode_id, r.episode_id) for c, r in episode_pairs(eps, 3, seed=0)]
    assert len(capped) == 3 and set(capped) <= names
    assert [(c.episode_id, r.episode_id) for c, r in episode_pairs(eps, 3, seed=0)] == capped


def test_an_episode_pair_counts_every_reply_and_no_observation():
    pair = episode_pair(_episode("a", 1.0), _episode("a", 0.0, sample=1))
    assert pair.chosen_ids == [1, 2, 3, 10, 11, 4, 5, 12]
    assert pair.chosen_mask == [0, 0, 0, 1, 1, 0, 0, 1] == pair.rejected_mask


def test_rft_keeps_only_the_successes_token_for_token():
    eps = [_episode("a", 1.0, True), _episode("a", 0.9, False, 1), _episode("b", 1.0, True)]
    rows = rft_rows(eps, epochs=1, seed=0)
    assert rows == [{"input_ids": eps[0].ids, "assistant_masks": [0, 0, 0, 1, 1, 0, 0, 1]}] * 2
    assert len(rft_rows(eps, epochs=2, seed=0)) == 4
    with pytest.raises(UserError, match="no successful episode"):
        rft_rows(eps[1:2], 1, 0)
    # a threshold instead: every episode with at least that reward, succeeded or not
    assert [r["input_ids"] for r in rft_rows(eps, 1, 0, min_reward=0.9)] == [e.ids for e in eps]
    with pytest.raises(UserError, match="no episode with reward >= 0.95"):
        rft_rows(eps[1:2], 1, 0, min_reward=0.95)


# ---- per-turn pairs from stored episodes ----------------------------------------------------------------


def test_stored_pairs_hold_the_sampled_ids_and_the_context_the_policy_saw(
    offline, policy, fmt, tmp_path, monkeypatch
):
    episodes, played = offline
    calls = []

    def spy(model, prompts, *args, **kw):
        out = real(model, prompts, *args, **kw)
        calls.append(([list(p) for p in prompts], [list(c.token_ids) for c in out]))
        return out

    real = sweet.sample
    monkeypatch.setattr(sweet, "sample", spy)
    critic = IdSumCritic()
    rows, metrics = _build(policy, fmt, critic, episodes, tmp_path)

    per_turn = []  # each turn's 4 candidates as `sample` returned them, turns in the order they were sampled
    for prompts, replies in calls:
        for k in range(0, len(prompts), 4):
            assert prompts[k : k + 4] == [prompts[k]] * 4  # N copies of one context
            per_turn.append(replies[k : k + 4])
    order = {(t.episode.episode_id, t.reply): i for i, t in enumerate(sweet.replies_in_context(episodes))}
    engine = {}  # (task, sample) -> the sequence as the engine fed it, from the episode in memory
    for ep in played:
        engine[ep.task.task_id, ep.sample] = episode_turns(ep.messages, fmt)
    by_id = {e.episode_id: e for e in episodes}
    retokenized_differs = False
    assert rows and metrics["pairs"] == len(rows) and metrics["turns"] == sum(e.replies for e in episodes)
    for row in rows:
        ep = by_id[row["episode_id"]]
        ids, turns = engine[ep.task_id, int(ep.episode_id.rsplit("/", 1)[1])]
        assert row["prompt_ids"] == ids[: turns.index(row["reply"])]
        assert row["turn"] == ep.message_index[row["reply"] - 1]
        candidates = per_turn[order[row["episode_id"], row["reply"]]]
        assert row["chosen_ids"] == candidates[row["chosen"]]
        assert row["rejected_ids"] == candidates[row["rejected"]]
        assert row["chosen_score"] == row["scores"][row["chosen"]] > row["rejected_score"]
        assert len(row["scores"]) == row["candidates"] == 4
        for side in ("chosen", "rejected"):
            ids = row[f"{side}_ids"]
            assert row[f"{side}_text"] == fmt.reply_text(ids)
            retokenized_differs |= fmt.encode(fmt.reply_text(ids)) != ids
    assert retokenized_differs  # decoding and encoding again would have trained on other ids

    pairs = read_turn_pairs(tmp_path / "pairs.parquet")
    assert [p.chosen_ids for p in pairs] == [r["prompt_ids"] + r["chosen_ids"] for r in rows]
    assert [sum(p.rejected_mask) for p in pairs] == [len(r["rejected_ids"]) for r in rows]
    assert pq.read_schema(tmp_path / "pairs.parquet").remove_metadata() == PAIRS_SCHEMA


def test_the_critic_reads_the_hidden_text_and_the_policy_never_does(
    offline, policy, fmt, tmp_path, monkeypatch
):
    episodes, _ = offline
    prompts_seen = []

    def spy(model, prompts, *args, **kw):
        prompts_seen.extend(prompts)
        return real(model, prompts, *args, **kw)

    real = sweet.sample
    monkeypatch.setattr(sweet, "sample", spy)
    critic = IdSumCritic()
    _build(policy, fmt, critic, episodes, tmp_path)
    hidden = {t.task_id: ColBench.hidden_text(t) for t in TASKS}
    assert {item.hidden for item in critic.items} == {hidden[e.task_id] for e in episodes}
    references = [t.hidden["reference"] for t in TASKS]
    for prompt in prompts_seen:
        text = fmt.tokenizer.decode(prompt)
        assert not any(ref in text or ref.splitlines()[0] in text for ref in references)


def test_the_table_is_seeded_and_a_stopped_run_finishes_it_identically(
    offline, policy, fmt, tmp_path, monkeypatch
):
    episodes, _ = offline
    monkeypatch.setattr(sweet, "PART_TURNS", 2)
    whole, _ = _build(policy, fmt, IdSumCritic(), episodes, tmp_path / "whole")
    again, _ = _build(policy, fmt, IdSumCritic(), episodes, tmp_path / "again")
    other, _ = _build(policy, fmt, IdSumCritic(), episodes, tmp_path / "other", seed=1)
    assert whole == again and whole != other

    real, parts = sweet._pairs_of, []

    def stopped_in_part_three(*args):
        parts.append(1)
        if len(parts) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(sweet, "_pairs_of", stopped_in_part_three)
    with pytest.raises(KeyboardInterrupt):
        _build(policy, fmt, IdSumCritic(), episodes, tmp_path / "resumed")
    assert len(list(tmp_path.glob("resumed/pairs.parquet.checkpoints/*/part-*.parquet"))) == 2
    monkeypatch.setattr(sweet, "_pairs_of", lambda *args: parts.append(2) or real(*args))
    resumed, _ = _build(policy, fmt, IdSumCritic(), episodes, tmp_path / "resumed")
    assert resumed == whole and parts.count(2) == -(-sum(e.replies for e in episodes) // 2) - 2
    assert not (tmp_path / "resumed" / "pairs.parquet.checkpoints").exists()


def test_a_draw_of_turns_and_the_real_critic(offline, policy, fmt, tmp_path):
    episodes, _ = offline
    critic = TurnCritic.initial(policy, fmt, CriticConfig())
    with torch.no_grad():  # pi_theta moved off pi_ref, so advantages differ between candidates
        for p in critic.model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.05)
    rows, metrics = _build(policy, fmt, critic, episodes, tmp_path, turns=3)
    assert metrics["turns"] == 3 and len({(r["episode_id"], r["reply"]) for r in rows}) <= 3
    assert rows and all(r["chosen_score"] > r["rejected_score"] for r in rows)


def test_a_damaged_pairs_table_is_a_user_error(tmp_path):
    (tmp_path / "pairs.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match="pairs table"):
        read_turn_pairs(tmp_path / "pairs.parquet")


def test_both_kinds_of_pairs_train_with_dpo(offline, policy, fmt, tmp_path):
    episodes, _ = offline
    start = tmp_path / "policy"
    policy.save_pretrained(start)
    fmt.tokenizer.save_pretrained(start)
    _build(policy, fmt, IdSumCritic(), episodes, tmp_path)
    cfg = DPOParams(lr=1e-3, epochs=1, batch_size=4)
    turn_pairs = read_turn_pairs(tmp_path / "pairs.parquet")
    per_turn = train_dpo(str(start), tmp_path / "sweet", turn_pairs, cfg, tmp_path / "sweet.csv")
    # the offline episodes all scored 0: give each task's second sample a higher reward
    ranked = [dataclasses.replace(e, reward=float(e.episode_id.endswith("/1"))) for e in episodes]
    pairs = [episode_pair(c, r) for c, r in episode_pairs(ranked, 4, seed=0)]
    assert len(pairs) == len(TASKS)
    multi_turn = train_dpo(str(start), tmp_path / "mtdpo", pairs, cfg, tmp_path / "mtdpo.csv")
    assert per_turn["steps"] >= 1 and multi_turn["steps"] == 1
    assert (tmp_path / "sweet" / "config.json").exists() and (tmp_path / "mtdpo" / "config.json").exists()
