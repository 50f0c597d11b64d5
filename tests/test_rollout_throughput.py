"""benchmarks/rollout_throughput.py's limits, by hand: the FLOP and KV-cache bytes of one generated token, and
the engine's decode against the bare transformers loop giving the same ids (what its table checks)."""

import importlib.util
import sys
from pathlib import Path

import torch

from gymflow.config import ModelConfig
from gymflow.models.build import build_model

SPEC = importlib.util.spec_from_file_location(
    "rollout_throughput", Path(__file__).resolve().parents[1] / "benchmarks" / "rollout_throughput.py"
)
bench = sys.modules[SPEC.name] = importlib.util.module_from_spec(SPEC)  # its dataclass looks itself up
SPEC.loader.exec_module(bench)


def test_per_token_cost_by_hand():
    # hidden 8, 2 heads of 4 with 1 kv head (width 4), intermediate 16, 3 layers, vocab 10, context 5:
    # a layer's weights: q 8x8 + o 8x8 + k 8x4 + v 8x4 = 192, MLP 3 x 8 x 16 = 384 -> 576; x 3 = 1,728;
    # LM head 10 x 8 = 80; 2 FLOP a weight: 3,616; attention 4 x 5 x 8 x 3 = 480 -> 4,096.
    # KV bytes: 2 (K, V) x 3 layers x 5 x 4 (kv width) x 4 bytes = 480.
    cfg = ModelConfig(hidden_size=8, heads=2, kv_heads=1, intermediate_size=16, layers=3)
    assert bench.per_token(cfg, 10, 5) == (4096, 480)


def test_engine_and_bare_loop_decode_the_same_ids():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, intermediate_size=32, layers=1, heads=2, kv_heads=2)
    model = build_model(cfg, bench.Vocab(50)).eval()
    prompts = torch.randint(2, 50, (3, 7), generator=torch.Generator().manual_seed(0))
    ours, _ = bench.engine_decode(model, prompts, 5)
    bare, _ = bench.bare_loop(model, prompts, 5)
    assert ours == bare and len(ours) == 3 and all(len(row) == 5 for row in ours)
