"""SFT batches whose rows begin alike (an environment's system prompt) run those ids once.

Every AgentTraj episode of an environment begins with the same system prompt, and the loss never reads it: 0.30
of the default mixture's tokens (`benchmarks/sft_profile.py`). `GroupedLengthSampler` keeps each batch to rows
that begin alike, in the order TRL's length-grouped sampler draws; `shared_prefix` finds how many leading ids a
batch's rows share before their first target; `prefix_then_rows` runs those ids once with a KV cache and every
row's rest on it (autograd sums the rows' gradients into the prefix's), the same loss and gradients as the whole
rows up to float rounding (tests/test_sft.py). The prefix runs on the bare model and the rows through the
caller's (DDP's) wrapper, so DDP's one forward per backward still sees every parameter's whole gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn
from transformers import DynamicCache
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from gymflow.train.prefix import cache_kwarg

KEY_IDS = 64
"""leading ids that name a row's group: fewer than any system prompt of the default's environments"""

MIN_SHARED = 16
"""shared ids below which a batch runs whole: a second model call costs more than it saves"""

MIN_FRACTION = 8
"""a batch runs whole unless its shared ids are at least 1/MIN_FRACTION of its longest row: past that the rows'
masked attention over the cache costs more than the prefix saves (apps' long rows: benchmarks/sft_shared_prefix.py)"""


def regroup(order: Sequence[int], keys: Sequence[object], batch_size: int) -> list[int]:
    """`order` (rows in the order they would train) rearranged so that each run of `batch_size` holds rows of one
    key: a key's rows fill a batch in the order they come, and the batch goes out when full. The rows left over
    (each key's last, short batch) end the list. With one key it is `order` itself."""
    pending: dict[object, list[int]] = {}
    out: list[int] = []
    for i in order:
        rows = pending.setdefault(keys[i], [])
        rows.append(i)
        if len(rows) == batch_size:
            out += rows
            rows.clear()
    return out + [i for rows in pending.values() for i in rows]


class GroupedLengthSampler(LengthGroupedSampler):
    """TRL's `group_by_length` order (`get_length_grouped_indices`, the same draws), regrouped so that each batch
    holds rows whose first `KEY_IDS` ids are the same (`regroup`): one environment's rows, of similar lengths."""

    def __init__(self, batch_size: int, lengths: list[int], keys: list[object]) -> None:
        super().__init__(batch_size, lengths=lengths)
        self.keys = keys

    def __iter__(self) -> Iterator[int]:
        order = get_length_grouped_indices(self.lengths, self.batch_size, generator=self.generator)
        return iter(regroup(order, self.keys, self.batch_size))


def group_key(ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(ids[:KEY_IDS])


def shared_prefix(ids: torch.Tensor, labels: torch.Tensor) -> int:
    """How many leading ids every row of a right-padded batch shares, short of the state that predicts its first
    target (labels at position t are predicted from position t - 1); 0 if that is too few to be worth a pass."""
    first_target = int((labels != -100).int().argmax(1).min())
    same = (ids == ids[:1]).all(0)[: max(first_target - 1, 0)]
    length = int(same.int().cumprod(0).sum())
    return length if length >= MIN_SHARED and MIN_FRACTION * length >= ids.shape[1] else 0


def prefix_then_rows(model: Callable[..., object], bare: nn.Module, ids: torch.Tensor, prefix: int) -> object:
    """`model`'s output (the wrapper's, e.g. DDP's) for the rows' ids after their shared `prefix`, on a KV cache of
    the prefix run once through `bare`'s decoder. Rows are right-padded: a causal model's real ids never attend to
    the padding after them, so no mask is needed (`gymflow.train.sft.causal_mask`)."""
    base = bare.get_base_model() if hasattr(bare, "get_base_model") else bare  # LoRA's wrapper: its model
    decoder, kwarg = base.get_decoder(), cache_kwarg(base)
    cache = DynamicCache(config=base.config)
    decoder(input_ids=ids[:1, :prefix], use_cache=True, **{cache_kwarg(decoder): cache})
    rows = len(ids)
    copies = DynamicCache(
        ddp_cache_data=[
            (layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1))
            for layer in cache.layers
        ],
        config=base.config,
    )
    positions = torch.arange(prefix, ids.shape[1], device=ids.device).expand(rows, -1)
    return model(input_ids=ids[:, prefix:], position_ids=positions, use_cache=True, **{kwarg: copies})
