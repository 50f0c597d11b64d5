"""benchmarks/decode_attention.py's variants compute one attention: each equals a softmax written out by hand
over the unpadded positions, so its timings compare the same work."""

import importlib.util
import sys
from pathlib import Path

import torch

SPEC = importlib.util.spec_from_file_location(
    "decode_attention", Path(__file__).resolve().parents[1] / "benchmarks" / "decode_attention.py"
)
bench = sys.modules[SPEC.name] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_every_variant_is_the_attention_over_the_unpadded_positions():
    batch, context, heads, dim, copies = 4, 12, 2, 8, 2
    fns = bench.variants(batch, context, heads, dim, copies)
    # the same draws as `variants` makes, in its order
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, 1, dim, generator=gen) * dim**-0.5
    keys = [torch.randn(batch, heads, 2 * context, dim, generator=gen)[:, :, :context] for _ in range(copies)]
    values = [
        torch.randn(batch, heads, 2 * context, dim, generator=gen)[:, :, :context] for _ in range(copies)
    ]
    for i in range(copies):
        want = torch.empty(batch, heads, 1, dim)
        for b in range(batch):
            first = 7 if b < batch // 2 else 0  # the first half of the rows is left-padded by 7
            for h in range(heads):
                scores = keys[i][b, h, first:] @ q[b, h, 0]
                weights = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
                want[b, h, 0] = weights @ values[i][b, h, first:]
        for name in ("sdpa", "kernel (the engine's)", "matmul", "matmul, keys transposed"):
            torch.testing.assert_close(fns[name](i), want, atol=1e-5, rtol=1e-5, msg=name)
        read = fns["read only"](i)
        torch.testing.assert_close(read, keys[i].sum() + values[i].sum())
