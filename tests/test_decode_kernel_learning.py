"""benchmarks/decode_kernel_learning.py: its two arms decode as they say (the comparison rests on it), and its
statistics over seeds are the hand-computed ones."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from test_sampling import PAD, STOP, model  # noqa: F401 (a fixture)

from gymflow.eval.compare import paired
from gymflow.models import decode_attention
from gymflow.models.sampling import sample

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when the script runs: it imports rollout_throughput beside it
SPEC = importlib.util.spec_from_file_location(
    "decode_kernel_learning", BENCHMARKS / "decode_kernel_learning.py"
)
bench = sys.modules[SPEC.name] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

LABELS = [label for label, _, _ in bench.COMPARISONS]
PROMPTS = [[5, 9, 3, 7], [4, 2], [8, 8, 6, 11, 12, 3]]


def decode(model, arm: str) -> tuple[list[list[int]], int]:  # noqa: F811
    model.set_attn_implementation("sdpa")  # as a freshly loaded model
    counts = {"kernel_steps": 0}
    with bench.decoding(arm, counts):
        done = sample(model, PROMPTS, 6, stop_ids=[STOP], pad_id=PAD, temperature=0)
    return [c.token_ids for c in done], counts["kernel_steps"]


def test_each_arm_decodes_as_it_says_and_greedy_ids_agree(model):  # noqa: F811
    build = decode_attention.kernel
    pytorch_ids, pytorch_steps = decode(model, "pytorch")
    assert pytorch_steps == 0
    assert model.config._attn_implementation == "sdpa"
    kernel_ids, kernel_steps = decode(model, "kernel")
    assert kernel_steps > 0 and kernel_steps % model.config.num_hidden_layers == 0  # every layer of a step
    assert kernel_ids == pytorch_ids
    assert decode_attention.kernel is build  # restored


def test_differences_over_seeds_by_hand():
    mean, se = bench.over_seeds([0.1, -0.1, 0.0])
    assert mean == pytest.approx(0.0)
    assert se == pytest.approx(0.1 / math.sqrt(3))  # sample sd of (0.1, -0.1, 0) is 0.1
    assert bench.over_seeds([0.2])[1] == math.inf


def test_the_table_pairs_each_seed_and_pools():
    # seed 0: kernel wins one task of two against PyTorch's; seed 1: they agree
    tasks, solved, failed = {"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0}
    one = dict(
        zip(LABELS, (paired(solved, tasks), paired(solved, failed), paired(tasks, failed)), strict=True)
    )
    two = {label: paired(tasks, tasks) for label in LABELS}
    table = bench.report({"maze": {0: one, 1: two}}, [0, 1], ["maze"])
    row = next(line for line in table.splitlines() if "kernel - PyTorch" in line)
    assert "+0.500 (1.000 vs 0.500)" in row and "+0.000 (0.500 vs 0.500)" in row
    # pooled: differences (0, 1, 0, 0): mean 0.25, sd 0.5, se 0.25; over seeds: (0.5, 0): 0.25 +- 0.25
    assert "+0.250 +- 0.250 | +0.250 +- 0.250 |" in row
    assert bench.stored({"maze": {0: one}})["maze"][0]["kernel-pytorch"] == {
        "n": 2,
        "mean": 0.5,
        "sd": math.sqrt(0.5),
        "method": 1.0,
        "baseline": 0.5,
    }  # the JSON file's cells: what `paired` returns, under method-baseline keys
