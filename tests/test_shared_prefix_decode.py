"""benchmarks/shared_prefix_decode.py's candidate decoder: a prompt every row shares, cached once, changes
neither the ids nor the log-probabilities (the benchmark's speed claims rest on this)."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_sampling import PAD, STOP, model, recomputed_logprobs  # noqa: F401 (a fixture)

from gymflow.models.sampling import Decoder, sample

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when the script runs: it imports rollout_throughput beside it
SPEC = importlib.util.spec_from_file_location("shared_prefix_decode", BENCHMARKS / "shared_prefix_decode.py")
bench = sys.modules[SPEC.name] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_a_prompt_every_row_shares_is_cached_once_and_changes_nothing(model, monkeypatch):  # noqa: F811
    """12 rows beginning with the same 20 ids: over two turns, with ended replies set aside and a quarter of the
    rows dropped, every log-probability is the whole sequence's and the greedy ids are the engine's."""
    shared = [2 + (7 * i) % 37 for i in range(20)]
    prompts = [shared + [5 + (3 * i) % 30, 6 + i % 7, 7 + (5 * i) % 20][: 1 + i % 3] for i in range(12)]
    greedy = sample(model, prompts, 8, stop_ids=[STOP], pad_id=PAD, temperature=0)
    stops = [t for t, _ in Counter(t for c in greedy for t in c.token_ids).most_common(3)]
    parked = []
    park = Decoder._park
    monkeypatch.setattr(Decoder, "_park", lambda self, *a: (parked.append(len(a[0])), park(self, *a))[1])
    observation, going = [20, 21, 22], [i for i in range(12) if i % 4]
    turns = {}
    for decoder_class in (bench.SharedPrefixDecoder, Decoder):
        decoder = decoder_class(model, len(prompts), PAD)
        first = decoder.decode(decoder.extend(prompts), [True] * len(prompts), 8, stops, temperature=0)
        own = 20 if decoder_class is bench.SharedPrefixDecoder else 0  # the rows hold only what follows it
        assert decoder.mask.sum(-1).tolist() == [
            len(p) - own + len(c.token_ids) - 1 for p, c in zip(prompts, first, strict=True)
        ]
        decoder.keep(going)
        chunks = [[first[i].token_ids[-1], *observation] for i in going]
        second = decoder.decode(decoder.extend(chunks), [True] * len(going), 5, [STOP], 0)
        turns[decoder_class] = first, second
    assert parked
    first, second = turns[bench.SharedPrefixDecoder]
    assert [c.token_ids for c in first] == [c.token_ids for c in turns[Decoder][0]]
    assert [c.token_ids for c in second] == [c.token_ids for c in turns[Decoder][1]]
    for i, b in zip(going, second, strict=True):
        a = first[i]
        full = recomputed_logprobs(model, prompts[i], a.token_ids + observation + b.token_ids)
        n = len(a.token_ids)
        assert a.logprobs + b.logprobs == pytest.approx(full[:n] + full[n + len(observation) :], abs=1e-5)


@pytest.mark.parametrize(
    "chunks, length",
    [
        ([list(range(30)), list(range(25)) + [99]], 25),
        ([list(range(30)), list(range(20))], 19),  # each row keeps an id of its own, for its logits
        ([list(range(30)), list(range(15)) + [99]], 0),  # too few to be worth a pass
        ([list(range(30))], 0),  # one row shares with nobody
    ],
)
def test_the_shared_length_is_the_common_start_short_of_every_rows_last_id(chunks, length):
    assert bench.shared_length(chunks) == length
