"""Forward passes that run a prompt once for the samples that share it (`PolicyGradient._forward`).

The K samples of a GRPO/LOOP group begin with the same ids (a multi-turn episode's system prompt and first
observation, sometimes more), and most of a short reply's sequence is that prompt. Rows of one group in a pass
that share at least `MIN_SHARED` ids run that prefix once, with a KV cache, and their suffixes run on copies of
the cache (autograd sums the copies' gradients into the prefix's): per pass a prefix of P ids shared by K rows
costs P ids instead of K x P, forward and backward. Every row's reply states are the ones a whole-sequence pass
gives, up to float rounding.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch
from torch import nn
from transformers import DynamicCache


class TokenEpisode(Protocol):
    """What this module reads of `gymflow.train.pg.TokenEpisode` (named here, not imported: pg imports this)."""

    ids: list[int]
    turns: list[int]
    group: int


MIN_SHARED = 16
"""ids a group's rows must share for their prefix to run once: below it the second model call costs more"""


def shared_prefixes(rows: Sequence[TokenEpisode]) -> list[int]:
    """Per row, how many ids it shares with the other rows of its group in `rows`: their longest common prefix,
    short of the shortest row's last id so every row keeps a suffix; 0 below `MIN_SHARED` or alone."""
    members: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        members.setdefault(r.group, []).append(i)
    out = [0] * len(rows)
    for group in members.values():
        first = rows[group[0]].ids
        length = min(len(rows[i].ids) for i in group) - 1
        for i in group[1:]:
            length = _common(first, rows[i].ids, length)
        if len(group) > 1 and length >= MIN_SHARED:
            for i in group:
                out[i] = length
    return out


def _common(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """The length of the common prefix of `a` and `b`, at most `limit`."""
    for n in range(limit):
        if a[n] != b[n]:
            return n
    return limit


def padded_ids(rows: Sequence[TokenEpisode]) -> int:
    """The ids `reply_states` runs for `rows`, padding included: the rows that share nothing in one pass, the
    shared prefixes in another, their rows' suffixes in a third."""
    prefixes = shared_prefixes(rows)
    lone = [len(r.ids) for r, p in zip(rows, prefixes, strict=True) if not p]
    suffixes = [len(r.ids) - p for r, p in zip(rows, prefixes, strict=True) if p]
    groups = {r.group for r, p in zip(rows, prefixes, strict=True) if p}
    return (
        len(lone) * max(lone, default=0)
        + len(groups) * max(prefixes)
        + len(suffixes) * max(suffixes, default=0)
    )


def prefix_chunks(order: Iterable[int], episodes: Sequence[TokenEpisode], max_tokens: int) -> list[list[int]]:
    """`batching.length_chunks` for episodes that share prefixes: the indices of `order` cut into passes of at
    most `max_tokens` padded ids as `reply_states` runs them (a shared prefix counts once), a group's rows that
    share a prefix kept together (groups shortest first, each group's rows shortest first), so a group is split
    only where it does not fit a pass. Rows that share nothing are ordered and cut as `length_chunks` does."""
    order = list(order)
    prefixes = shared_prefixes([episodes[i] for i in order])
    blocks: dict[tuple[str, int], list[int]] = {}
    for i, p in zip(order, prefixes, strict=True):
        blocks.setdefault(("group", episodes[i].group) if p else ("row", i), []).append(i)

    def length(i: int) -> int:
        return len(episodes[i].ids)

    def cost(chunk: list[int]) -> int:
        return padded_ids([episodes[j] for j in chunk])

    chunks: list[list[int]] = []
    chunk: list[int] = []
    for block in sorted(blocks.values(), key=lambda b: max(map(length, b))):
        block = sorted(block, key=length)
        for n, i in enumerate(block):
            # a row shares its group's prefix only once a second one joins: it fits if it fits with the next
            if chunk and min(cost([*chunk, i]), cost([*chunk, *block[n : n + 2]])) > max_tokens:
                chunks.append(chunk)
                chunk = []
            chunk.append(i)
    return chunks + [chunk] if chunk else chunks


def reply_states(
    decoder: nn.Module, rows: Sequence[TokenEpisode], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The rows' ids and mask of real ids [B, T] (right-padded), the (row, position) of every reply id, and the
    decoder's last hidden state each was predicted from (at position - 1), in that order: one pass over the rows
    that share nothing, one over the shared prefixes and one over their rows' suffixes."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    reply = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r.ids)] = torch.tensor(r.ids)
        mask[i, : len(r.ids)] = 1
        reply[i, : len(r.ids)] = torch.tensor(r.turns) > 0
    ids, mask, reply = ids.to(device), mask.to(device), reply.to(device)
    prefix = torch.tensor(shared_prefixes(rows), device=device)
    row, pos = reply.nonzero(as_tuple=True)
    in_shared = (prefix > 0)[row]  # the reply ids of rows that share a prefix
    parts = []
    if not in_shared.all():
        lone, at = (prefix == 0).nonzero().squeeze(-1), ~in_shared
        parts.append((row[at], pos[at], _whole(decoder, ids, mask, lone, row[at], pos[at])))
    if in_shared.any():
        groups, at = torch.tensor([r.group for r in rows], device=device), in_shared
        parts.append((row[at], pos[at], _shared(decoder, ids, mask, prefix, groups, row[at], pos[at])))
    rows_, positions, states = (torch.cat(x) for x in zip(*parts, strict=True))
    return ids, mask, (rows_, positions), states


def _whole(
    decoder: nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    lone: torch.Tensor,
    row: torch.Tensor,
    pos: torch.Tensor,
) -> torch.Tensor:
    """The states before the reply ids (`row`, `pos`) of the rows `lone`, each run over its whole sequence."""
    width = int(mask[lone].sum(1).max())
    states = decoder(input_ids=ids[lone, :width], attention_mask=mask[lone, :width]).last_hidden_state
    local = torch.zeros(len(ids), dtype=torch.long, device=ids.device)
    local[lone] = torch.arange(len(lone), device=ids.device)
    return take(states, local[row], pos - 1)


def take(states: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """`states[rows, positions]` ([B, T, H] -> [N, H]) through `index_select`, whose backward adds the gradients
    of a repeated (row, position) in order. Indexing's backward adds them with atomics over the threads, in
    whatever order those run: a shared prefix's last state predicts the first reply id of every row of its
    group, and two `rl` runs on one machine trained different weights (2026-11-29)."""
    return states.reshape(-1, states.shape[-1]).index_select(0, rows * states.shape[1] + positions)


def _shared(
    decoder: nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    prefix: torch.Tensor,
    groups: torch.Tensor,
    row: torch.Tensor,
    pos: torch.Tensor,
) -> torch.Tensor:
    """The states before the reply ids (`row`, `pos`) of the rows with a shared prefix (`prefix` > 0): each
    group's prefix once (right-padded to the longest), its KV cache copied to the group's rows, then the rows'
    suffixes on it (right-padded; positions go on after the prefix). A reply id inside the prefix, or the first
    after it, is predicted from the prefix's state."""
    device = ids.device
    members = (prefix > 0).nonzero().squeeze(-1)  # the shared rows
    _, which = groups[members].unique(return_inverse=True)  # each shared row's prefix
    heads = members.new_zeros(int(which.max()) + 1).scatter_(0, which, members)  # any row of each: same ids
    head_len = prefix[heads]
    head_mask = (torch.arange(int(head_len.max()), device=device) < head_len[:, None]).long()
    cache, kwarg = DynamicCache(config=decoder.config), cache_kwarg(decoder)
    head_states = decoder(
        input_ids=ids[heads, : head_mask.shape[1]],
        attention_mask=head_mask,
        use_cache=True,
        **{kwarg: cache},
    ).last_hidden_state
    copies = DynamicCache(
        ddp_cache_data=[
            (layer.keys.index_select(0, which), layer.values.index_select(0, which)) for layer in cache.layers
        ],
        config=decoder.config,
    )
    start = prefix[members]
    tail_len = mask[members].sum(1) - start
    offsets = start[:, None] + torch.arange(int(tail_len.max()), device=device)
    tail_mask = (offsets < (start + tail_len)[:, None]).long()
    tail_states = decoder(
        input_ids=ids[members].gather(1, offsets.clamp(max=ids.shape[1] - 1)),
        attention_mask=torch.cat([head_mask[which], tail_mask], 1),
        position_ids=offsets,
        use_cache=True,
        **{kwarg: copies},
    ).last_hidden_state
    local = torch.zeros(len(ids), dtype=torch.long, device=device)
    local[members] = torch.arange(len(members), device=device)
    seen, at = pos - 1, prefix[row]  # the state each reply id was predicted from, and where its suffix begins
    in_head = (seen < at)[:, None]
    from_head = take(head_states, which[local[row]], seen.clamp(max=head_mask.shape[1] - 1))
    from_tail = take(tail_states, local[row], (seen - at).clamp(min=0))
    return torch.where(in_head, from_head, from_tail)


def cache_kwarg(decoder: nn.Module) -> str:
    """The decoder's name for a KV cache: `cache` from transformers 5.2x, `past_key_values` before (an unknown
    keyword would be swallowed by its **kwargs, and the suffixes would run without their prefix)."""
    names = inspect.signature(decoder.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in names:
            return name
    raise TypeError(
        f"{type(decoder).__name__}.forward takes no KV cache (neither `cache` nor `past_key_values`)"
    )
