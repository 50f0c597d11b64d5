"""Shared-prefix forward passes (gymflow/train/prefix.py): which rows share what, the passes they are cut into, and
the learner's log-probabilities, entropies, hidden states and gradients against running every row whole."""

import random

import pytest
import torch

from gymflow.config import ModelConfig
from gymflow.models.build import build_model, lora_config
from gymflow.models.tokenizer import train_tokenizer
from gymflow.train import prefix
from gymflow.train.batching import length_chunks
from gymflow.train.pg import LearnerConfig, PolicyGradient, TokenEpisode
from gymflow.train.prefix import padded_ids, prefix_chunks, shared_prefixes
from gymflow.train.presets import PRESETS, PGSwitches


def _episode(ids: list[int], context: int, group: int, reward: float = 0.0) -> TokenEpisode:
    return TokenEpisode(ids, [0] * context + [1] * (len(ids) - context), reward, group)


def test_rows_share_their_groups_common_prefix_from_sixteen_ids_on():
    a, b = list(range(100, 120)), list(range(200, 240))
    rows = [
        _episode(a + [1, 2], 18, 0),  # group 0: 20 ids in common, reply ids 18 and 19 among them
        _episode(a + [3], 18, 0),
        _episode(a + [1, 4, 5], 18, 0),
        _episode(b[:15] + [6, 7], 15, 1),  # group 1: 15 ids in common, under the minimum
        _episode(b[:15] + [8], 15, 1),
        _episode(b, 20, 2),  # group 2 alone
        _episode(b[:30], 20, 3),  # group 3: one row is the other's first 30 ids; the shorter keeps one id
        _episode(b[:30] + [9], 20, 3),
    ]
    assert shared_prefixes(rows) == [20, 20, 20, 0, 0, 0, 29, 29]
    # lone rows 3-5 padded to 40; prefixes of 20 and 29 padded to 29 twice; suffixes of 2, 1, 3, 1, 2 padded to 3
    assert padded_ids(rows) == 3 * 40 + 2 * 29 + 5 * 3


def test_chunks_keep_a_groups_rows_together_and_count_its_prefix_once():
    a, b = list(range(100, 132)), list(range(200, 232))
    episodes = [
        _episode(a + [1] * 8, 32, 0),  # 40 ids
        _episode(b + [2] * 4, 32, 1),  # 36
        _episode(a + [3] * 2, 32, 0),  # 34
        _episode(b + [4] * 6, 32, 1),  # 38
        _episode([5] * 10, 5, 2),  # 10, alone
    ]
    # groups longest row first: 2 (10), 1 (38), 0 (40). All five: row 4's 10 ids, two prefixes of 32 and four
    # suffixes padded to 8, 106 padded ids (by length alone: 5 x 40 = 200)
    assert prefix_chunks(range(5), episodes, 106) == [[4, 1, 3, 2, 0]]
    # 10 + 32 + 2 x 6 = 54 for rows 4, 1 and 3; then group 0's 32 + 2 x 8 = 48
    assert prefix_chunks(range(5), episodes, 105) == [[4, 1, 3], [2, 0]]
    # row 1 does not fit beside row 4 even with row 3 (54), and row 2 not beside group 1 even with row 0 (96)
    assert prefix_chunks(range(5), episodes, 50) == [[4], [1, 3], [2, 0]]


def test_chunks_without_shared_prefixes_are_length_chunks():
    lengths = [5, 2, 9, 3, 4]
    episodes = [_episode(list(range(1, n + 1)), 1, i % 2) for i, n in enumerate(lengths)]
    for budget in (12, 100, 3):
        assert prefix_chunks(range(5), episodes, budget) == length_chunks(
            range(5), lengths.__getitem__, budget
        )


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["left right up down go stop north south east west"] * 20, 300)


def _batch(vocab: int) -> list[TokenEpisode]:
    """Four tasks: prompts of 24 ids shared by three samples whose first two reply ids agree (so the shared
    prefix holds reply ids), of 40 ids by two, of 12 ids (under the minimum: nothing shared), and one alone;
    multi-turn replies with context between them."""
    rng = random.Random(0)

    def ids(n: int) -> list[int]:
        return [rng.randrange(5, vocab) for _ in range(n)]

    p0, p1, p2 = ids(24), ids(40), ids(12)
    same = ids(2)
    rows = [_episode(p0 + same + ids(n), 24, 0, r) for n, r in ((3, 1.0), (7, 0.0), (1, 0.5))]
    rows += [_episode(p1 + ids(n), 40, 1, r) for n, r in ((5, 0.0), (2, 1.0))]
    rows += [_episode(p2 + ids(n), 12, 2, r) for n, r in ((4, 1.0), (6, 0.0))]
    rows.append(_episode(p1 + ids(3), 40, 3, 1.0))
    turn = rows[1]  # a second reply after observation ids: context inside the suffix
    turn.turns[28:30] = [0, 0]
    turn.turns[30:] = [2] * (len(turn.turns) - 30)
    return rows


def _model(tokenizer, lora: bool):
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=2, heads=4, kv_heads=2, max_length=128)
    model = build_model(cfg, tokenizer)
    if lora:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(2))
        with torch.no_grad():  # B starts at 0, which would leave A without gradient
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    return model


def _learner(model, preset: str, max_tokens: int = 16384) -> PolicyGradient:
    switches = PGSwitches.model_validate({**PRESETS[preset], "min_abs_advantage": 0, "value_warmup": 0})
    return PolicyGradient(
        model, LearnerConfig(switches=switches, lr=0.0, max_tokens=max_tokens, temperature=0.7)
    )


@pytest.mark.parametrize("lora", [False, True])
def test_shared_forward_equals_running_every_row_whole(tokenizer, lora, monkeypatch):
    rows = _batch(len(tokenizer))
    assert shared_prefixes(rows) == [26] * 3 + [40] * 2 + [0] * 3
    model = _model(tokenizer, lora)
    learner = _learner(model, "loop")
    shared = learner._forward(model, rows, hidden=True)
    monkeypatch.setattr(prefix, "MIN_SHARED", 10**6)
    whole = learner._forward(model, rows, hidden=True)
    for got, want in zip(shared, whole, strict=True):
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    logp, entropy, _, mask = whole
    reply = torch.tensor([[t > 0 for t in r.turns] + [False] * (mask.shape[1] - len(r.ids)) for r in rows])
    assert (logp[reply] < 0).all() and (entropy[reply] > 0).all() and (logp[~reply] == 0).all()


@pytest.mark.parametrize(
    ("preset", "lora", "max_tokens"),
    [("loop", False, 16384), ("loop", True, 16384), ("loop", False, 40), ("ppo", False, 16384)],
)
def test_shared_backward_gives_the_gradients_of_every_row_whole(
    tokenizer, preset, lora, max_tokens, monkeypatch
):
    """One mini-batch of all eight episodes: in one pass, or (max_tokens 40) in six passes, group 0 split in two."""

    def gradient(min_shared: int) -> torch.Tensor:
        monkeypatch.setattr(prefix, "MIN_SHARED", min_shared)
        model = _model(tokenizer, lora)
        learner = _learner(model, preset, max_tokens)
        batch = learner.prepare(_batch(len(tokenizer)))
        learner.backward(batch, list(range(len(batch.episodes))), learner.units(batch))
        params = learner.trained
        return torch.cat([p.grad.flatten() for p in params if p.grad is not None])

    shared, whole = gradient(16), gradient(10**6)
    assert shared.shape == whole.shape and whole.abs().max() > 1e-3
    assert torch.allclose(shared, whole, atol=1e-6, rtol=1e-4)


def test_the_decoder_sees_a_shared_prefix_once(tokenizer):
    """The embedding's inputs over one forward: group 1's two rows (40 shared ids, suffixes of 5 and 2) as a
    prefix pass of 40 ids and a suffix pass of 2 x 5, not 2 x 45; the ids `padded_ids` counts."""
    rows = _batch(len(tokenizer))[3:5]
    model = _model(tokenizer, lora=False)
    seen = []
    model.model.embed_tokens.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    _learner(model, "loop")._forward(model, rows)
    assert seen == [(1, 40), (2, 5)] and padded_ids(rows) == 50


def test_take_adds_a_repeated_states_gradients_in_the_same_order_every_time():
    """A shared prefix's last state predicts the first reply id of every row of its group. Indexing's backward
    added those rows' gradients with atomics over the threads, in whatever order they ran (20 distinct results
    in 20 runs here); `take`'s adds them in order: the same bytes every time, the hand-summed gradient."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen = torch.Generator().manual_seed(0)
        states = torch.randn(9, 1500, 32, generator=gen, requires_grad=True)
        rows, positions = (
            torch.randint(0, 9, (6000,), generator=gen),
            torch.randint(0, 100, (6000,), generator=gen),
        )
        upstream = torch.randn(6000, 32, generator=gen)
        grads = set()
        for _ in range(20):
            states.grad = None
            prefix.take(states, rows, positions).backward(upstream)
            grads.add(states.grad.numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    assert len(grads) == 1
    assert torch.equal(prefix.take(states, rows, positions), states[rows, positions])
    expected = torch.zeros(9, 1500, 32, dtype=torch.float64)
    for i in range(6000):  # every repeat summed by hand
        expected[rows[i], positions[i]] += upstream[i].double()
    assert torch.allclose(states.grad.double(), expected, atol=1e-5)


def test_the_learners_gradient_is_the_same_bytes_run_after_run(tokenizer):
    """Twelve samples of one task share a prompt of 30 ids and reply 150 ids each, under two threads: the
    learner's gradient over them, ten times from the same weights, is one result (on the old code several)."""
    rng = random.Random(1)
    prompt = [rng.randrange(5, len(tokenizer)) for _ in range(30)]
    rows = [
        _episode(prompt + [rng.randrange(5, len(tokenizer)) for _ in range(150)], 30, 0, float(i % 2))
        for i in range(12)
    ]
    assert shared_prefixes(rows) == [30] * 12
    model = _model(tokenizer, lora=False)
    learner = _learner(model, "loop")
    batch = learner.prepare(rows)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = set()
        for _ in range(10):
            model.zero_grad()
            learner.backward(batch, list(range(12)), learner.units(batch))
            grads.add(torch.cat([p.grad.flatten() for p in model.parameters()]).numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    assert len(grads) == 1
