"""The sampler returns exactly what it sampled, with the policy's log-probabilities, batched or not."""

import math
from collections import Counter

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from gymflow.models.sampling import Decoder, GrowingLayer, sample, top_p_filter

PAD, STOP = 0, 1


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=PAD,
        eos_token_id=STOP,
    )
    return Qwen2ForCausalLM(config).eval()


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]


@torch.no_grad()
def recomputed_logprobs(model, prompt, completion):
    ids = torch.tensor([prompt + completion])
    logp = model(input_ids=ids).logits[0].float().log_softmax(-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion)]


def test_greedy_matches_hugging_face_generate(model):
    out = sample(model, [PROMPTS[0]], 12, stop_ids=[STOP], pad_id=PAD, temperature=0)[0]
    ref = model.generate(
        torch.tensor([PROMPTS[0]]), max_new_tokens=12, do_sample=False, eos_token_id=STOP, pad_token_id=PAD
    )[0, len(PROMPTS[0]) :].tolist()
    assert out.token_ids == ref[: len(out.token_ids)] and len(out.token_ids) == len(ref)


def test_batch_of_unequal_prompts_equals_one_at_a_time(model):
    batched = sample(model, PROMPTS, 10, stop_ids=[STOP], pad_id=PAD, temperature=0)
    for prompt, got in zip(PROMPTS, batched, strict=True):
        alone = sample(model, [prompt], 10, stop_ids=[STOP], pad_id=PAD, temperature=0)[0]
        assert got.token_ids == alone.token_ids
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_logprobs_are_the_policy_log_probabilities_of_the_sampled_tokens(model):
    gen = torch.Generator().manual_seed(1)
    outs = sample(model, PROMPTS, 10, stop_ids=[STOP], pad_id=PAD, temperature=0.7, top_p=0.9, generator=gen)
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert len(out.token_ids) == len(out.logprobs) == 10 or out.finish_reason == "stop"
        # what a learner recomputes from the stored ids: temperature and top-p shape the draw, not the logprob
        assert out.logprobs == pytest.approx(recomputed_logprobs(model, prompt, out.token_ids), abs=1e-4)


def test_stops_on_a_stop_token_and_keeps_it(model):
    greedy = sample(model, [PROMPTS[1]], 6, stop_ids=[STOP], pad_id=PAD, temperature=0)[0].token_ids
    stop = greedy[2]  # make the third greedy token a stop token
    out = sample(model, PROMPTS[1:], 6, stop_ids=[stop], pad_id=PAD, temperature=0)
    assert out[0].token_ids == greedy[:3] and out[0].finish_reason == "stop"
    assert out[1].finish_reason == "length" or out[1].token_ids[-1] == stop


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    kept = lambda p: torch.isfinite(top_p_filter(logits, p))[0].tolist()  # noqa: E731
    assert kept(0.5) == [False, True, False]
    assert kept(0.6) == [False, True, True]
    assert kept(0.81) == [True, True, True]
    assert kept(1.0) == [True, True, True]


def test_sampled_frequencies_follow_the_policy(model):
    n = 3000
    gen = torch.Generator().manual_seed(0)
    outs = sample(model, [PROMPTS[2]] * n, 1, stop_ids=[STOP], pad_id=PAD, temperature=1.0, generator=gen)
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([PROMPTS[2]])).logits[0, -1].float().log_softmax(-1)
    top = int(logp.argmax())
    p = math.exp(float(logp[top]))
    freq = sum(o.token_ids[0] == top for o in outs) / n
    assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / n), (freq, p)


def test_a_row_that_stops_early_continues_at_the_right_position_next_turn(model):
    stop = sample(model, [PROMPTS[1]], 6, stop_ids=[STOP], pad_id=PAD, temperature=0)[0].token_ids[1]
    decoder = Decoder(model, len(PROMPTS), PAD)
    first = decoder.decode(decoder.extend(PROMPTS), [True] * 3, 6, [stop], temperature=0)
    assert len(first[1].token_ids) == 2 and len({len(c.token_ids) for c in first}) > 1  # rows end apart
    observation = [20, 21, 22]
    second = decoder.decode(
        decoder.extend([[c.token_ids[-1], *observation] for c in first]), [True] * 3, 5, [STOP], 0
    )
    for prompt, a, b in zip(PROMPTS, first, second, strict=True):
        full = recomputed_logprobs(model, prompt, a.token_ids + observation + b.token_ids)
        n = len(a.token_ids)
        assert a.logprobs + b.logprobs == pytest.approx(full[:n] + full[n + len(observation) :], abs=1e-4)


def test_dropping_rows_and_padding_leaves_what_the_kept_rows_compute_unchanged(model):
    stop = sample(model, [PROMPTS[1]], 6, stop_ids=[STOP], pad_id=PAD, temperature=0)[0].token_ids[1]
    decoder = Decoder(model, len(PROMPTS), PAD)
    first = decoder.decode(decoder.extend(PROMPTS), [True] * 3, 6, [stop], temperature=0)
    padded = decoder.mask.shape[1]
    decoder.keep([2, 1])  # row 0, the longest prompt, is done; row 1 stopped early (padding after it)
    kept = [(PROMPTS[2], first[2]), (PROMPTS[1], first[1])]
    real = [len(p) + len(c.token_ids) - 1 for p, c in kept]  # a reply's last id is not cached yet
    assert decoder.mask.shape == (2, max(real)) and decoder.mask.shape[1] < padded
    assert decoder.mask.sum(-1).tolist() == real and decoder.cache.get_seq_length() == max(real)
    observation = [20, 21, 22]
    chunks = [[c.token_ids[-1], *observation] for _, c in kept]
    second = decoder.decode(decoder.extend(chunks), [True] * 2, 5, [STOP], 0)
    for (prompt, a), b in zip(kept, second, strict=True):
        full = recomputed_logprobs(model, prompt, a.token_ids + observation + b.token_ids)
        n = len(a.token_ids)
        assert a.logprobs + b.logprobs == pytest.approx(full[:n] + full[n + len(observation) :], abs=1e-4)


def test_rows_whose_replies_ended_are_set_aside_and_come_back_unchanged(model, monkeypatch):
    prompts = [[5 + (3 * i) % 30, 6 + i % 7, 7 + (5 * i) % 20][: 1 + i % 3] for i in range(12)]
    greedy = sample(model, prompts, 8, stop_ids=[STOP], pad_id=PAD, temperature=0)
    common = Counter(t for c in greedy for t in c.token_ids).most_common(3)
    stops = [t for t, _ in common]  # most rows end within a few steps, at different ones
    parked = []
    park = Decoder._park
    monkeypatch.setattr(Decoder, "_park", lambda self, *a: (parked.append(len(a[0])), park(self, *a))[1])
    decoder = Decoder(model, len(prompts), PAD)
    first = decoder.decode(decoder.extend(prompts), [True] * len(prompts), 8, stops, temperature=0)
    assert parked and len({len(c.token_ids) for c in first}) > 1  # rows were set aside mid-reply
    assert decoder.mask.sum(-1).tolist() == [
        len(p) + len(c.token_ids) - 1 for p, c in zip(prompts, first, strict=True)
    ]
    observation = [20, 21, 22]
    second = decoder.decode(
        decoder.extend([[c.token_ids[-1], *observation] for c in first]), [True] * len(prompts), 5, [STOP], 0
    )
    for prompt, a, b in zip(prompts, first, second, strict=True):
        full = recomputed_logprobs(model, prompt, a.token_ids + observation + b.token_ids)
        n = len(a.token_ids)
        assert a.logprobs + b.logprobs == pytest.approx(full[:n] + full[n + len(observation) :], abs=1e-4)


def test_assembling_a_cache_copies_each_entry_from_its_row_and_column():
    """Two parts: a view into a wider buffer (a snapshot of a layer) and a plain tensor, different widths; the
    result is right-aligned, zeros where the narrower part has no column, entry for entry by hand."""
    torch.manual_seed(0)
    snapshot = torch.randn(3, 2, 9, 4)[..., :6, :]  # 3 rows, 2 heads, 6 of 9 positions used, dim 4
    plain = torch.randn(2, 2, 3, 4)
    parts = [
        (
            snapshot,
            -snapshot,
            torch.tensor([2, 0]),
            torch.tensor([[1, 3, 4, 5], [0, 2, 3, 5]]),
            torch.tensor([0, 2]),
        ),
        (plain, -plain, torch.tensor([1]), torch.tensor([[0, 2]]), torch.tensor([1])),
    ]
    layer = GrowingLayer()
    layer.assemble(parts, 3)
    expected = torch.zeros(3, 2, 4, 4)
    for keys, _, source, columns, target in parts:
        for i in range(len(source)):
            start = 4 - columns.shape[1]
            for j, column in enumerate(columns[i].tolist()):
                expected[target[i], :, start + j] = keys[source[i], :, column]
    assert torch.equal(layer.keys, expected) and torch.equal(layer.values, -expected)
    assert layer.used == 4 and layer.key_buf.shape[2] >= 256  # room to grow without another copy


class AngleTokenizer:
    """Decodes id i as "<i>", so any run of ids is findable as text."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{i}>" for i in ids)


def test_a_stop_string_ends_the_row_and_keeps_the_sampled_ids(model):
    greedy = sample(model, PROMPTS[:2], 8, stop_ids=[], pad_id=PAD, temperature=0)
    first = greedy[0].token_ids
    stop = AngleTokenizer().decode(first[1:3])  # ends in the third greedy token of row 0
    out = sample(
        model, PROMPTS[:2], 8, [], PAD, temperature=0, stop_strings=[stop], tokenizer=AngleTokenizer()
    )
    assert out[0].token_ids == first[:3] and out[0].finish_reason == "stop"
    assert out[0].logprobs == pytest.approx(greedy[0].logprobs[:3], abs=1e-5)
    if stop not in AngleTokenizer().decode(greedy[1].token_ids):
        assert out[1].token_ids == greedy[1].token_ids and out[1].finish_reason == "length"


def test_stop_strings_need_a_tokenizer(model):
    with pytest.raises(ValueError, match="tokenizer"):
        sample(model, PROMPTS[:1], 4, [], PAD, temperature=0, stop_strings=["x"])


def test_draw_follows_the_probabilities_and_never_picks_a_zero():
    from gymflow.models.sampling import draw

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]]).repeat(10000, 1)
    tokens = draw(probs, torch.Generator().manual_seed(0))
    first = torch.bincount(tokens[0::2], minlength=4) / 10000
    assert first[1] == 0 and torch.allclose(first, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.015)
    assert (tokens[1::2] == 3).all()
