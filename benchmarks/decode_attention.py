"""One decoding step's attention at the engine's shapes: PyTorch's fused kernel against matrix products.

Decoding is bound by reading the KV cache (docs/results/speed.md): each generated token's attention reads its
row's whole cache. This measures how close one layer's attention comes to reading that cache at the machine's
streaming rate, one query per row against a (batch, heads, context, head dim) cache that is a view of a longer
buffer, as `GrowingLayer` keeps it:

- `kernel`: `gymflow.models.decode_attention`'s C++ kernel, what the engine runs on CPU;
- `sdpa`: `scaled_dot_product_attention` with the padding mask, what the engine ran before;
- `matmul`: the same as two matrix products around a softmax (scores, then the weighted sum of values);
- `matmul, keys transposed`: the keys stored (dim, context), so the scores' product runs along the context;
- `read only`: summing the keys and values, the floor any kernel that reads the cache once stands on.

Each call reads one of `--copies` caches in turn, so that no call finds the last one's in the CPU's caches.

    python benchmarks/decode_attention.py [--batch 256] [--context 332] [--heads 4] [--dim 32]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from gymflow.models.decode_attention import kernel


def per_call_ms(fn: Callable[[int], object], copies: int, repeats: int) -> float:
    for i in range(copies):
        fn(i)
    start = time.perf_counter()
    for i in range(repeats):
        fn(i % copies)
    return (time.perf_counter() - start) / repeats * 1e3


def variants(
    batch: int, context: int, h: int, d: int, copies: int
) -> dict[str, Callable[[int], torch.Tensor]]:
    """Each variant's attention over cache copy i, on the same query, caches and mask."""
    room = 2 * context  # GrowingLayer's buffer, grown by doubling
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, h, 1, d, generator=gen) * d**-0.5
    keys = [torch.randn(batch, h, room, d, generator=gen)[:, :, :context] for _ in range(copies)]
    values = [torch.randn(batch, h, room, d, generator=gen)[:, :, :context] for _ in range(copies)]
    stored = [torch.empty(batch, h, d, room) for _ in range(copies)]
    for buf, k in zip(stored, keys, strict=True):
        buf[..., :context] = k.transpose(-1, -2)
    keys_t = [buf[..., :context] for buf in stored]
    mask = torch.ones(batch, 1, 1, context, dtype=torch.bool)
    mask[: batch // 2, ..., :7] = False  # half the rows left-padded, as a batch of episodes is
    additive = torch.zeros(batch, 1, 1, context).masked_fill(~mask, float("-inf"))
    rows, query, compiled = mask[:, 0, 0].contiguous(), q[:, :, 0].contiguous(), kernel()
    return {
        "sdpa": lambda i: F.scaled_dot_product_attention(q, keys[i], values[i], attn_mask=mask, scale=1.0),
        "kernel (the engine's)": lambda i: compiled.attend(query, keys[i], values[i], rows, 1.0)[:, :, None],
        "matmul": lambda i: torch.matmul(
            torch.matmul(q, keys[i].transpose(-1, -2)).add_(additive).softmax(-1), values[i]
        ),
        "matmul, keys transposed": lambda i: torch.matmul(
            torch.matmul(q, keys_t[i]).add_(additive).softmax(-1), values[i]
        ),
        "read only": lambda i: keys[i].sum() + values[i].sum(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--context", type=int, nargs="+", default=[332, 1000])
    parser.add_argument("--heads", type=int, default=4, help="key/value heads (the default model's 4)")
    parser.add_argument("--dim", type=int, default=32, help="head dim (the default model's 128 / 4)")
    parser.add_argument("--copies", type=int, default=3, help="caches read in turn")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    table = Table(
        "batch", "context", "cache MB", "variant", "ms", "GB/s", "x sdpa", "max diff",
        title=f"One decoding step's attention, one layer ({torch.get_num_threads()} threads, "
        f"{torch.backends.cpu.get_cpu_capability()} kernels)",
    )  # fmt: skip
    for batch in args.batch:
        for context in args.context:
            fns = variants(batch, context, args.heads, args.dim, args.copies)
            megabytes = 2 * batch * args.heads * context * args.dim * 4 / 1e6
            reference = fns["sdpa"](0)
            base = None
            for name, fn in fns.items():
                ms = per_call_ms(fn, args.copies, args.repeats)
                base = base or ms
                diff = "" if name == "read only" else f"{(fn(0) - reference).abs().max():.1e}"
                table.add_row(
                    str(batch), str(context), f"{megabytes:.0f}", name, f"{ms:.2f}",
                    f"{megabytes / ms:.1f}", f"{base / ms:.2f}", diff,
                )  # fmt: skip
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
