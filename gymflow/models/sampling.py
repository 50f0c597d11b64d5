"""In-process batched sampling with the policy's log-probability of every sampled token.

A hand-written loop over Hugging Face's KV cache rather than `model.generate`, because rollouts need, per
sequence, exactly the ids sampled, the policy's log-probability of each (log-softmax of the raw logits, the
quantity the learner recomputes; temperature and top-p only shape the draw), and why it stopped.
Prompts are left-padded so all sequences append on the right; position ids skip the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from gymflow.models.decode_attention import use_for_decoding


@dataclass
class Completion:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"  # "stop": ended with a stop token or string (kept: sampled, trained on)
    critic_score: float | None = None  # the critic's score of this reply when one chose it (Best-of-N)


class CompletionBackend(Protocol):
    """Continues token-id prompts elsewhere, e.g. a vLLM server (`gymflow.models.openai_client`).

    The rollout engine uses it where it has no `PreTrainedModel`: each call sends whole sequences, so no
    cache survives between turns, but the ids and log-probabilities returned are still exactly those sampled.
    """

    def complete(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[Completion]: ...


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (to -inf) every token outside the smallest set whose probability reaches `top_p`."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already reaches top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row, index i with probability probs[i]: inverse transform sampling, the first index
    whose cumulative probability passes a uniform draw (never a zero-probability token). The same
    distribution as `torch.multinomial`, which is many times slower on CPU (`benchmarks/sampling_draw.py`)."""
    cdf = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


PARK_ROWS = 8  # `Decoder.decode` sets ended replies' rows aside only in batches of at least this many rows


class GrowingLayer(DynamicLayer):
    """A KV cache layer that writes into a buffer grown by doubling, instead of concatenating every step.

    `DynamicLayer` copies the whole cache once per generated token (torch.cat); over a multi-turn episode
    that copying took 40% of rollout time here (`benchmarks/rollout_throughput.py`).
    """

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.used = 0
            self.key_buf = self.value_buf = None
        need = self.used + key_states.shape[-2]
        if self.key_buf is None or need > self.key_buf.shape[-2]:
            shape = list(key_states.shape)
            shape[-2] = max(2 * need, 256)
            key_buf, value_buf = key_states.new_empty(shape), value_states.new_empty(shape)
            if self.used:
                key_buf[..., : self.used, :] = self.key_buf[..., : self.used, :]
                value_buf[..., : self.used, :] = self.value_buf[..., : self.used, :]
            self.key_buf, self.value_buf = key_buf, value_buf
        self.key_buf[..., self.used : need, :] = key_states
        self.value_buf[..., self.used : need, :] = value_states
        self.used = need
        self.keys, self.values = self.key_buf[..., :need, :], self.value_buf[..., :need, :]
        return self.keys, self.values

    def keep(self, rows: torch.Tensor, columns: torch.Tensor) -> None:
        """Keep `rows` only and, of row i, the entries at `columns[i]` in that order."""
        self.assemble(
            [(self.keys, self.values, rows, columns, torch.arange(len(rows), device=rows.device))], len(rows)
        )

    def assemble(self, parts: Sequence[Part], rows: int) -> None:
        """Become `rows` rows copied from `parts`: of each (keys, values, source rows, their columns, target
        rows), the entries at the columns, right-aligned to the widest part; the columns that pad a narrower one
        are zeros (masked, and finite: a NaN left in a masked key would still poison the softmax). The tensors
        the parts come from are left as they are. Each entry is read once, by one `index_select` over the
        source's storage, where a gather copied every kept row three times (1.12x on whole maze episodes:
        `benchmarks/rollout_throughput.py`)."""
        width = max(columns.shape[1] for *_, columns, _ in parts)
        first = parts[0][0]
        heads, dim = first.shape[1], first.shape[-1]
        shape = [rows, heads, max(2 * width, 256), dim]
        key_buf, value_buf = first.new_empty(shape), parts[0][1].new_empty(shape)
        if any(columns.shape[1] < width for *_, columns, _ in parts):  # `keep`'s single part needs no zeros
            key_buf[..., :width, :], value_buf[..., :width, :] = 0, 0
        for keys, values, source, columns, target in parts:
            start, placed = width - columns.shape[1], (len(source), heads, columns.shape[1], dim)
            for buf, cached in ((key_buf, keys), (value_buf, values)):  # each its own layout: an index each
                entries = storage_rows(cached).index_select(0, entry_index(cached, source, columns))
                buf[target, :, start:width] = entries.view(placed)
        self.key_buf, self.value_buf, self.used = key_buf, value_buf, width
        self.keys, self.values = key_buf[..., :width, :], value_buf[..., :width, :]


def storage_rows(cache: torch.Tensor) -> torch.Tensor:
    """The whole storage under a (batch, heads, positions, dim) cache view, as rows of `dim` values."""
    dim = cache.shape[-1]
    if cache.stride(-1) != 1 or any(n % dim for n in (*cache.stride()[:-1], cache.storage_offset())):
        raise ValueError("a cache layer's last dimension must be contiguous and its rows aligned to it")
    return cache.as_strided(
        (cache.untyped_storage().nbytes() // cache.element_size() // dim, dim), (dim, 1), 0
    )


def entry_index(cache: torch.Tensor, source: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Rows of `storage_rows(cache)` holding cache[source[i], h, columns[i, j]], in (i, h, j) order."""
    dim = cache.shape[-1]
    row, head, position = (stride // dim for stride in cache.stride()[:-1])
    heads = torch.arange(cache.shape[1], device=cache.device)
    offset = cache.storage_offset() // dim
    return (
        offset + source[:, None, None] * row + heads[None, :, None] * head + columns[:, None, :] * position
    ).flatten()


Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""Where rows of a new cache layer come from (`GrowingLayer.assemble`)."""


@dataclass(frozen=True)
class Parked:
    """Rows set aside in `Decoder.decode`: the cache as it was then (its tensors stay as they were, since
    `keep` gives the layers new buffers), and which of its rows are which of the caller's."""

    rows: list[int]  # the caller's rows
    index: list[int]  # the same rows in the snapshot
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor
    length: torch.Tensor


def growing_cache() -> DynamicCache:
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


class Decoder:
    """One KV cache for a batch of sequences that grow turn by turn (a multi-turn rollout batch).

    `extend` appends a chunk of context per row (left-padded; padding is masked and takes no position) and
    returns each row's next-token logits; `decode` samples replies from them. A reply's last token is left
    out of the cache: the caller puts it at the start of that row's next chunk. So history is read once,
    never re-encoded, and what the model sees is exactly the ids sampled. On CPU the steps' attention is
    `decode_attention`'s kernel.
    """

    def __init__(self, model: PreTrainedModel, batch: int, pad_id: int) -> None:
        use_for_decoding(model)
        self.model, self.pad_id, self.device = model, pad_id, model.device
        self.cache = growing_cache()
        self.mask = torch.zeros((batch, 0), dtype=torch.long, device=self.device)
        self.length = torch.zeros(batch, dtype=torch.long, device=self.device)  # real tokens so far per row

    def keep(self, rows: Sequence[int]) -> None:
        """Go on with `rows` only, in that order, without padding: each row's cached tokens move to the right
        end, left-padded to the longest. Attention reads every cached column of every row for each token, so
        finished episodes and the padding of earlier turns cost time until dropped
        (`benchmarks/rollout_throughput.py`); a copy that would drop little is skipped. Cached keys carry
        their rotary positions: the model computes the same as before."""
        rows = list(rows)
        width = int(self.mask[rows].sum(-1).max())
        if rows == list(range(len(self.mask))) and width > 0.75 * self.mask.shape[1]:
            return  # every row stays and little padding: the copy would cost more than it saves
        index, columns = self._compacted(rows)
        for layer in self.cache.layers:
            layer.keep(index, columns)
        self.mask = self.mask[index].gather(1, columns)
        self.length = self.length[index]

    def _compacted(
        self, rows: list[int], mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`rows` as an index, and per row the columns of its cached tokens in `mask` (this decoder's), left-padded
        to the longest."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        mask = (self.mask if mask is None else mask)[index]
        width = int(mask.sum(-1).max())
        return index, mask.argsort(dim=-1, stable=True)[:, mask.shape[1] - width :]  # padding sorts first

    def _park(self, ended: list[int], going: list[int], rows: list[int]) -> Parked:
        """Set rows `ended` aside and go on with `going`: one copy of the going rows, none of the ended ones."""
        layers = [(layer.keys, layer.values) for layer in self.cache.layers]
        parked = Parked([rows[r] for r in ended], ended, layers, self.mask, self.length)
        self.keep(going)
        return parked

    def _unpark(self, parked: list[Parked], rows: list[int]) -> None:
        """Every row back, in the caller's order: the current ones (the caller's `rows`) and the parked ones, in
        one copy of the cache."""
        here = Parked(
            rows,
            list(range(len(rows))),
            [(layer.keys, layer.values) for layer in self.cache.layers],
            self.mask,
            self.length,
        )
        groups = [*parked, here]
        total = sum(len(g.rows) for g in groups)
        placed = [
            (g, *self._compacted(g.index, g.mask), torch.tensor(g.rows, device=self.device)) for g in groups
        ]
        width = max(columns.shape[1] for _, _, columns, _ in placed)
        mask = torch.zeros((total, width), dtype=torch.long, device=self.device)
        length = torch.zeros(total, dtype=torch.long, device=self.device)
        for g, index, columns, target in placed:
            mask[target, width - columns.shape[1] :] = g.mask[index].gather(1, columns)
            length[target] = g.length[index]
        for i, layer in enumerate(self.cache.layers):
            layer.assemble(
                [(*g.layers[i], index, columns, target) for g, index, columns, target in placed], total
            )
        self.mask, self.length = mask, length

    @torch.no_grad()
    def extend(self, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        ids, mask = (t.to(self.device) for t in left_pad(chunks, self.pad_id))
        positions = self.length[:, None] + (mask.cumsum(-1) - 1).clamp(min=0)
        self.mask = torch.cat([self.mask, mask], dim=-1)
        self.length = self.length + mask.sum(-1)
        out = self.model(
            input_ids=ids, attention_mask=self.mask, position_ids=positions, past_key_values=self.cache
        )
        return out.logits[:, -1]

    @torch.no_grad()
    def decode(
        self,
        logits: torch.Tensor,
        active: Sequence[bool],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        stop_strings: Sequence[str] = (),
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> list[Completion | None]:
        """Sample a reply for every active row until a stop token, a stop string or `max_new_tokens`;
        temperature 0 is greedy. A stop string ends a row once its decoded reply (`tokenizer`, special
        tokens skipped) contains it; the ids stay as sampled, even if the string ends inside a token."""
        if stop_strings and tokenizer is None:
            raise ValueError("stop_strings need the tokenizer that decodes the replies")
        done = ~torch.tensor(list(active), dtype=torch.bool, device=self.device)
        out: list[Completion | None] = [None if d else Completion() for d in done.tolist()]
        stops = torch.tensor(list(stop_ids), dtype=torch.long, device=self.device)
        rows = list(range(len(out)))  # the row each of the cache's rows was when the call began
        parked: list[Parked] = []  # rows whose replies ended, set aside
        for step in range(max_new_tokens):
            logits = logits.float()
            logp = logits.log_softmax(-1)
            if temperature == 0:
                token = logits.argmax(-1)
            else:
                probs = top_p_filter(logits / temperature, top_p).softmax(-1)
                if generator is not None:  # draws follow the generator's device (a CPU seed on a GPU model)
                    probs = probs.to(generator.device)
                token = draw(probs, generator).to(self.device)
            chosen = logp.gather(-1, token[:, None]).squeeze(-1)
            tokens, chosen_list = token.tolist(), chosen.tolist()
            for row in (~done).nonzero().flatten().tolist():
                out[rows[row]].token_ids.append(tokens[row])
                out[rows[row]].logprobs.append(chosen_list[row])
            stopped = torch.isin(token, stops) & ~done
            if stop_strings:  # decoding the whole reply each step is cheap next to a forward pass
                for row in (~done & ~stopped).nonzero().flatten().tolist():
                    text = tokenizer.decode(out[rows[row]].token_ids, skip_special_tokens=True)
                    stopped[row] = any(stop in text for stop in stop_strings)
            for row in stopped.nonzero().flatten().tolist():
                out[rows[row]].finish_reason = "stop"
            done |= stopped
            if done.all() or step == max_new_tokens - 1:
                break  # every row's last token stays out of the cache (see the class docstring)
            going = (~done).nonzero().flatten().tolist()
            if len(rows) >= PARK_ROWS and 2 * len(going) <= len(rows):
                # most replies have ended: set their rows aside, so that the next tokens' attention does not
                # read their caches while a few long replies run on
                parked.append(self._park(done.nonzero().flatten().tolist(), going, rows))
                rows, token, done = [rows[r] for r in going], token[going], done[going]
            feed = (~done).long()
            self.mask = torch.cat([self.mask, feed[:, None]], dim=-1)
            logits = self.model(
                input_ids=token.masked_fill(done, self.pad_id)[:, None],
                attention_mask=self.mask,
                position_ids=self.length[:, None],
                past_key_values=self.cache,
            ).logits[:, -1]
            self.length = self.length + feed
        if parked:
            self._unpark(parked, rows)
        return out


def sample(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    stop_strings: Sequence[str] = (),
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> list[Completion]:
    """Continue every prompt until a stop token, a stop string or `max_new_tokens` (one turn; see
    `Decoder.decode`)."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    decoder = Decoder(model, len(prompts), pad_id)
    logits = decoder.extend(prompts)
    active = [True] * len(prompts)
    return decoder.decode(
        logits, active, max_new_tokens, stop_ids, temperature, top_p, generator, stop_strings, tokenizer
    )
