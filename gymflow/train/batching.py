"""Forward passes bounded by padded size, shared by every trainer (policy gradient, the critic, DPO)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def length_chunks(order: Iterable[int], length: Callable[[int], int], max_tokens: int) -> list[list[int]]:
    """The indices of `order` cut into forward passes of at most `max_tokens` padded ids (rows x the longest
    row's `length`), shortest first, so similar lengths share a pass and little is padding. One row longer than
    `max_tokens` gets a pass of its own: activation memory is bounded, not the batch (passes accumulate)."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    for i in sorted(order, key=length):
        if chunk and (len(chunk) + 1) * length(i) > max_tokens:
            chunks.append(chunk)
            chunk = []
        chunk.append(i)
    return chunks + [chunk] if chunk else chunks
