"""Drawing one token per row from a batch of next-token distributions: our inverse-CDF `draw` against
`torch.multinomial`, at rollout shapes (batch x vocabulary); prints microseconds per draw and the ratio.

    python benchmarks/sampling_draw.py [--batch 64] [--vocab 2048]
"""

from __future__ import annotations

import argparse
import time

import torch

from gymflow.models.sampling import draw


def per_call(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    probs = torch.randn(args.batch, args.vocab, generator=gen).softmax(-1)
    ours = per_call(lambda: draw(probs, gen), args.repeats)
    multinomial = per_call(lambda: torch.multinomial(probs, 1, generator=gen), args.repeats)
    print(f"batch {args.batch} x vocab {args.vocab}, {torch.get_num_threads()} threads")
    print(f"torch.multinomial  {multinomial:8.0f} us per draw")
    print(f"inverse CDF (draw) {ours:8.0f} us per draw")
    print(f"draw speed over multinomial: {multinomial / ours:.1f}x")


if __name__ == "__main__":
    main()
