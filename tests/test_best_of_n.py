"""Best-of-N (SWEET-RL Figure 3a) on colbench with a tiny policy: the executed reply is the chooser's pick, N = 1
is the engine's plain sampling, the random pick is seeded, episodes keep the executed reply as sampled, and the
task's hidden information reaches the critic's input but never the policy's."""

import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.envs.colbench import ColBench
from gymflow.envs.instructions import build_splits
from gymflow.eval import best_of_n as bon
from gymflow.eval.best_of_n import CriticChooser, RandomChooser, best_of_n, best_of_n_curve, sample_copies
from gymflow.models.files import weights_hash
from gymflow.models.sampling import sample
from gymflow.remote.env_client import EnvUnavailable
from gymflow.rollout.engine import SamplingConfig, episode_turns, rollout
from gymflow.rollout.play import Policy
from gymflow.store.db import connect
from gymflow.train.critic import CriticConfig, TurnCritic

TASKS = build_splits(ColBench, 3, 0, seed=0)["train"]
SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=16, batch_size=8)


def _jobs():
    return [(t, 0) for t in TASKS]


class StubCritic:
    """Test double for `TurnCritic`: a fixed arbitrary score per reply (a hash of its ids), its inputs recorded."""

    def __init__(self) -> None:
        self.config = CriticConfig()
        self.items = []

    @staticmethod
    def value(reply_ids) -> float:
        return (sum((i + 1) * t for i, t in enumerate(reply_ids)) * 7919 % 1009) / 1009

    def score(self, items):
        self.items += items
        return [self.value(item.reply_ids) for item in items]


class Recording:
    """Wraps a chooser and keeps, per call, each episode's task id, candidates and pick."""

    def __init__(self, choose) -> None:
        self.choose, self.calls = choose, []

    def __call__(self, tasks, contexts, candidates):
        picks = self.choose(tasks, contexts, candidates)
        self.calls.append([(t.task_id, c, p) for t, c, p in zip(tasks, candidates, picks, strict=True)])
        return picks


def test_the_executed_reply_is_the_candidate_the_critic_ranks_highest(policy, fmt):
    stub = StubCritic()
    chooser = Recording(CriticChooser(stub))
    episodes = best_of_n(
        policy, fmt, _jobs(), SAMPLING, 4, chooser, torch.Generator().manual_seed(0), horizon=2
    )
    executed: dict[str, list] = {}
    for call in chooser.calls:
        for task_id, candidates, (pick, score) in call:
            scores = [stub.value(c.token_ids) for c in candidates]
            assert len(candidates) == 4 and len({tuple(c.token_ids) for c in candidates}) > 1
            assert pick == scores.index(max(scores)) and score == max(scores)
            executed.setdefault(task_id, []).append((candidates[pick], score))
    assert len(stub.items) == 4 * sum(len(call) for call in chooser.calls)
    for ep in episodes:
        replies = [m for m in ep.messages if m.role == "assistant"]
        assert [m.token_ids for m in replies] == [c.token_ids for c, _ in executed[ep.task.task_id]]
        assert [m.logprobs for m in replies] == [c.logprobs for c, _ in executed[ep.task.task_id]]
        # the turns table's critic_score: the executed reply's score, as the critic gave it
        assert [m.critic_score for m in replies] == [score for _, score in executed[ep.task.task_id]]
        assert all(m.critic_score is None for m in ep.messages if m.role != "assistant")


def test_n_1_is_plain_sampling_with_the_same_generator(policy, fmt):
    plain = rollout(policy, fmt, _jobs(), SAMPLING, horizon=3, generator=torch.Generator().manual_seed(5))
    one = best_of_n(
        policy, fmt, _jobs(), SAMPLING, 1, RandomChooser(0), torch.Generator().manual_seed(5), horizon=3
    )
    assert len(plain) == len(one) == len(TASKS)
    for a, b in zip(plain, one, strict=True):
        assert [m.text for m in a.messages] == [m.text for m in b.messages]
        assert [m.token_ids for m in a.messages] == [m.token_ids for m in b.messages]
        for x, y in zip(a.messages, b.messages, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)  # cached vs re-encoded context
        assert (a.reward, a.turns, a.end_reason, a.tokens) == (b.reward, b.turns, b.end_reason, b.tokens)


def test_candidates_are_what_sample_draws_for_n_copies_of_each_context(policy, fmt):
    """Each context is encoded once and its cache repeated: the same draws as `sample` on n copies."""
    contexts = [fmt.prompt("system", "a request"), fmt.prompt("system", "another, longer request than that")]
    copies = [c for c in contexts for _ in range(3)]
    expected = sample(
        policy,
        copies,
        SAMPLING.max_new_tokens,
        [fmt.eos_id],
        fmt.tokenizer.pad_token_id,
        generator=torch.Generator().manual_seed(3),
    )
    got = sample_copies(policy, contexts, 3, SAMPLING, fmt, torch.Generator().manual_seed(3))
    assert [c.token_ids for c in got] == [c.token_ids for c in expected]
    assert len({tuple(c.token_ids) for c in got}) > 2
    for a, b in zip(got, expected, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4) and a.finish_reason == b.finish_reason


def test_the_random_pick_is_seeded(policy, fmt):
    def play(seed):
        chooser = Recording(RandomChooser(seed))
        best_of_n(policy, fmt, _jobs(), SAMPLING, 4, chooser, torch.Generator().manual_seed(0), horizon=2)
        picks = [p for call in chooser.calls for _, _, p in call]
        assert all(
            score is None for _, score in picks
        )  # no critic: the turns table's critic_score stays null
        return [i for i, _ in picks]

    first = play(0)
    assert first == play(0) and len(set(first)) > 1
    assert any(play(s) != first for s in (1, 2))


def test_episodes_carry_the_executed_reply_as_sampled(policy, fmt):
    """The policy's own log-probabilities of each executed reply id, recomputed by a plain forward pass of the
    episode's whole sequence, are the stored ones: what was executed is what was sampled, in that context."""
    episodes = best_of_n(
        policy, fmt, _jobs(), SAMPLING, 3, RandomChooser(1), torch.Generator().manual_seed(2), horizon=3
    )
    for ep in episodes:
        ids, turns = episode_turns(ep.messages, fmt)
        assert ep.tokens == len(ids)
        with torch.no_grad():
            logp = policy(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
        recomputed = [float(logp[p - 1, ids[p]]) for p in range(len(ids)) if turns[p]]
        stored = [lp for m in ep.messages if m.role == "assistant" for lp in m.logprobs]
        assert recomputed == pytest.approx(stored, abs=1e-4)


def test_bad_n_and_greedy_best_of_n_are_refused(policy, fmt):
    with pytest.raises(ValueError, match="n >= 1"):
        best_of_n(policy, fmt, _jobs(), SAMPLING, 0, RandomChooser(0))
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=4)
    with pytest.raises(ValueError, match="greedy"):
        best_of_n(policy, fmt, _jobs(), greedy, 2, RandomChooser(0))


# ---- who sees the hidden information ----------------------------------------------------------------------


def _inputs(module: torch.nn.Module, fmt: ChatFormat, seen: list[str]):
    """Record, as text, every sequence `module` (a decoder stack) is fed (padding dropped)."""

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        for row in ids.tolist():
            seen.append(fmt.tokenizer.decode([i for i in row if i != fmt.tokenizer.pad_token_id]))

    return module.register_forward_pre_hook(hook, with_kwargs=True)


def _secrets(task) -> list[str]:
    """The reference's lines that carry its hidden rules (everything after the signature the request states)."""
    return [line.strip() for line in task.hidden["reference"].splitlines()[1:] if line.strip()]


def _leaks(texts: list[str], task) -> bool:
    return any(s in text for text in texts for s in [*_secrets(task), "In light that the final answer"])


@pytest.mark.parametrize("hidden", [True, False])
def test_hidden_information_reaches_the_critic_and_never_the_policy(policy, fmt, hidden):
    critic = TurnCritic.initial(policy, fmt, CriticConfig(hidden=hidden))
    policy_seen, critic_seen, reference_seen = [], [], []
    hooks = [
        _inputs(policy.model, fmt, policy_seen),
        _inputs(critic.model.model, fmt, critic_seen),
        _inputs(critic.reference.model, fmt, reference_seen),
    ]
    try:
        jobs = [(TASKS[0], 0)]
        best_of_n(
            policy, fmt, jobs, SAMPLING, 3, CriticChooser(critic), torch.Generator().manual_seed(0), horizon=2
        )
    finally:
        for h in hooks:
            h.remove()
    prompts = [t for t in policy_seen if "<|im_start|>system" in t]  # prefills, not one-token decode steps
    assert prompts and critic_seen and reference_seen
    assert not _leaks(policy_seen, TASKS[0])
    assert _leaks([policy_seen[0] + TASKS[0].hidden["reference"]], TASKS[0])  # the check can fail
    for seen in (critic_seen, reference_seen):
        contexts = [
            t for t in seen if "<|im_start|>system" in t
        ]  # not the candidates fed after their context
        assert contexts
        if hidden:
            assert all(text.startswith(ColBench.hidden_text(TASKS[0])) for text in contexts)
        else:
            assert not _leaks(seen, TASKS[0])


# ---- the curve --------------------------------------------------------------------------------------------


def test_the_curve_writes_each_n_and_a_rerun_plays_nothing(policy, fmt, tmp_path, monkeypatch):
    played = Policy("tiny", policy, fmt, weights_hash(policy))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, batch_size=8)
    curve = best_of_n_curve(
        played, TASKS[:2], [1, 2], "random", lambda: RandomChooser(0), sampling, 0, tmp_path, horizon=2
    )
    assert set(curve) == {"1", "2"} and all(c["episodes"] == 2 for c in curve.values())
    rows = (
        connect(tmp_path)
        .execute("select stage, iteration, policy from episodes order by iteration")
        .fetchall()
    )
    assert rows == [("best_of_n", 1, "tiny+random")] * 2 + [("best_of_n", 2, "tiny+random")] * 2

    def fail(*args, **kwargs):
        raise AssertionError("played again")

    monkeypatch.setattr(bon, "best_of_n", fail)
    assert (
        best_of_n_curve(
            played, TASKS[:2], [1, 2], "random", lambda: RandomChooser(0), sampling, 0, tmp_path, horizon=2
        )
        == curve
    )


def test_choosers_are_paired_per_task_at_each_n_above_one(policy, fmt, tmp_path, monkeypatch):
    played = Policy("tiny", policy, fmt, weights_hash(policy))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, batch_size=8)
    successes = {"hidden": [True, True, False], "random": [False, True, False]}

    def fixed(model, fmt, jobs, cfg, n, choose, generator, horizon):  # the chooser's successes, by task
        episodes = rollout(model, fmt, jobs, cfg, horizon=1)
        for ep, won in zip(episodes, successes[choose], strict=True):
            ep.success = won
        return episodes

    monkeypatch.setattr(bon, "best_of_n", fixed)
    for name in successes:
        best_of_n_curve(played, TASKS, [1, 2], name, lambda n=name: n, sampling, 0, tmp_path, name, horizon=1)
    (pair,) = bon.paired_choosers(tmp_path, ["hidden", "random"], [1, 2]).values()
    assert list(pair) == ["2"]  # N = 1: every chooser plays the same draws
    # differences 1, 0, 0: mean 1/3, sample sd sqrt(((2/3)^2 + 2 (1/3)^2) / 2)
    assert pair["2"]["n"] == 3 and pair["2"]["method"] == pytest.approx(2 / 3)
    assert pair["2"]["mean"] == pytest.approx(1 / 3) and pair["2"]["sd"] == pytest.approx((1 / 3) ** 0.5)


def test_an_episode_whose_environment_cannot_start_ends_as_an_error(policy, fmt):
    class Unreachable(ColBench):
        def reset(self, task):
            raise EnvUnavailable("no server answered")

    episodes = best_of_n(
        policy, fmt, _jobs()[:2], SAMPLING, 2, RandomChooser(0), horizon=2, make=lambda name: Unreachable()
    )
    assert [(e.end_reason, e.turns, e.success) for e in episodes] == [("error", 0, False)] * 2
    assert "environment unavailable" in episodes[0].messages[-1].text
