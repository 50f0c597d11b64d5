"""Decoding with the system prompt cached once for a whole batch, against the engine as it is.

A rollout batch plays one environment's tasks, so every row's context begins with the same system prompt (120-300
tokens). Decoding is bound by reading the KV cache (docs/results/speed.md): each generated token's attention reads
its row's whole cache. The candidate here (`SharedPrefixDecoder`, a prototype, not the engine's path) caches the
prefix once, (kv heads, prefix, dim), and each row's cache only what follows it. A query's attention over the
prefix is one matrix product per kv head over all rows (the prefix read once per step); over its own entries
it is the fused SDPA kernel, which also returns the log-sum-exp that merges the two softmaxes. It runs through
Hugging Face's attention interface, so positions, rotary embeddings and masks stay the model's own.

Two tables, each against the engine's `Decoder` in the same run, both checking the ids are the same:

1. Greedy decoding of `--new-tokens` after `--prompt-len` random ids of which the first `--shared` are the same in
   every row, at `--batches`.
2. Whole episodes of `--env` (`--model`, default data/models/sft), `--episodes` at `rollout.batch_size` 64, the
   two decoders alternating over `--repeats`, the same seed each (so paths computing the same probabilities draw
   the same ids).

    python benchmarks/shared_prefix_decode.py [--batches 16 64 256 1024] [--env maze --model data/models/sft]

CPU only: the fused kernel that returns the log-sum-exp is PyTorch's CPU one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from rollout_throughput import Vocab  # a model that decodes random ids (this folder is on the path)
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits
from gymflow.models.build import build_model
from gymflow.models.sampling import Decoder
from gymflow.rollout import engine
from gymflow.rollout.engine import SamplingConfig, rollout

NAME = "gymflow_shared_prefix"
MIN_SHARED = 16  # ids: below this a separate pass for the prefix saves less than it costs

PrefixLayers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer, the shared prefix's keys and values, each (kv heads, prefix length, head dim)."""


def prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    shared_prefix: PrefixLayers | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of `query` (rows, heads, queries, dim) over the layer's shared prefix and then `key`/`value`,
    the rows' own entries (rows, kv heads, entries, dim) under `attention_mask` (True: attend); SDPA as the model
    runs it where no `shared_prefix` is given."""
    if shared_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    prefix_keys, prefix_values = shared_prefix[module.layer_idx]
    rows, heads, queries, dim = query.shape
    kv_heads = prefix_keys.shape[0]
    group = heads // kv_heads
    # per kv head, every row's queries of its group as one (rows * group * queries, dim) matrix
    stacked = query.reshape(rows, kv_heads, group * queries, dim).transpose(0, 1).reshape(kv_heads, -1, dim)
    on_prefix = torch.bmm(stacked, prefix_keys.transpose(1, 2)) * scaling
    prefix_lse = on_prefix.logsumexp(-1, keepdim=True)
    from_prefix = torch.bmm((on_prefix - prefix_lse).exp(), prefix_values)
    from_prefix = from_prefix.view(kv_heads, rows, group, queries, dim).transpose(0, 1).reshape(query.shape)
    prefix_lse = prefix_lse.view(kv_heads, rows, group, queries).transpose(0, 1).reshape(rows, heads, queries)
    if group > 1:
        key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    additive = None  # the fused kernel takes a mask of the query's dtype
    if attention_mask is not None:
        additive = torch.zeros(attention_mask.shape, dtype=query.dtype)
        additive = additive.masked_fill(~attention_mask, float("-inf"))
    own, own_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, False, attn_mask=additive, scale=scaling
    )
    top = torch.maximum(own_lse, prefix_lse)
    to_own, to_prefix = (own_lse - top).exp()[..., None], (prefix_lse - top).exp()[..., None]
    out = (own * to_own + from_prefix * to_prefix) / (to_own + to_prefix)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, prefix_attention)
# the mask always materialised, since this attention applies it itself (SDPA's skip of a causal one gives None)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, partial(sdpa_mask, allow_is_causal_skip=False))


def shared_length(chunks: Sequence[Sequence[int]]) -> int:
    """How many leading ids every chunk shares, leaving each at least one id of its own (whose logits the
    caller wants); 0 when that is under `MIN_SHARED` or there is a single chunk."""
    if len(chunks) < 2:
        return 0
    first, limit = chunks[0], min(len(c) for c in chunks) - 1
    length = 0
    while length < limit and all(c[length] == first[length] for c in chunks):
        length += 1
    return length if length >= MIN_SHARED else 0


@torch.no_grad()
def run_prefix(model, ids: Sequence[int]) -> PrefixLayers:
    """The prefix's keys and values per layer, from one pass of it alone (positions 0 on)."""
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([list(ids)], device=model.device), past_key_values=cache, use_cache=True)
    return [(layer.keys[0].contiguous(), layer.values[0].contiguous()) for layer in cache.layers]


@contextmanager
def attention_of(model) -> Iterator[None]:
    """`model` runs `prefix_attention` while the block runs."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before


class WithPrefix:
    """The model, called with the batch's shared prefix: what `Decoder` calls once one is cached."""

    def __init__(self, model, prefix: PrefixLayers) -> None:
        self.inner, self.prefix, self.device = model, prefix, model.device

    def __call__(self, **kwargs):
        with attention_of(self.inner):
            return self.inner(**kwargs, shared_prefix=self.prefix)


class SharedPrefixDecoder(Decoder):
    """The engine's `Decoder`, with the start its first chunks share cached once (the rows hold the rest)."""

    def extend(self, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        shared = shared_length(chunks) if self.mask.shape[1] == 0 else 0
        if shared:
            self.model = WithPrefix(self.model, run_prefix(self.model, chunks[0][:shared]))
            self.length = self.length + shared
            chunks = [chunk[shared:] for chunk in chunks]
        return super().extend(chunks)


def greedy(decoder_class, model, prompts: torch.Tensor, steps: int) -> tuple[list[list[int]], float]:
    """Greedy ids and seconds of `steps` tokens after the prompts (their pass included: the prefix saves there
    too)."""
    start = time.perf_counter()
    decoder = decoder_class(model, len(prompts), pad_id=0)
    out = decoder.decode(decoder.extend(prompts.tolist()), [True] * len(prompts), steps, [], temperature=0)
    return [c.token_ids for c in out], time.perf_counter() - start


def decode_table(batches: list[int], prompt_len: int, shared: int, steps: int) -> Table:
    vocab = ModelConfig().vocab_size
    torch.manual_seed(0)
    model = build_model(ModelConfig(), Vocab(vocab)).eval()
    table = Table(
        title=f"Greedy decoding, default model: {prompt_len} prompt ids ({shared} the same in every row), then "
        f"{steps} tokens; {torch.get_num_threads()} threads"
    )
    for col in ["batch", "engine tok/s", "shared prefix tok/s", "x engine", "same ids"]:
        table.add_column(col, justify="right")
    for batch in batches:
        prompts = torch.randint(2, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
        prompts[:, :shared] = prompts[0, :shared]
        whole, whole_s = greedy(Decoder, model, prompts, steps)
        ours, ours_s = greedy(SharedPrefixDecoder, model, prompts, steps)
        rate = batch * steps / ours_s
        table.add_row(
            str(batch),
            f"{batch * steps / whole_s:,.0f}",
            f"{rate:,.0f}",
            f"{whole_s / ours_s:.2f}",
            "yes" if ours == whole else "NO",
        )
    return table


def episodes_table(env: str, model_dir: Path, episodes: int, repeats: int, temperature: float) -> Table:
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    fmt = ChatFormat(AutoTokenizer.from_pretrained(model_dir))
    tasks = build_splits(ENVS[env], 0, episodes, seed=0)["eval"]
    cfg = SamplingConfig(temperature=temperature, batch_size=64)
    seconds: dict[str, list[float]] = {"engine": [], "shared prefix": []}
    replies, tokens = {}, {}
    for _ in range(repeats):
        for name, decoder in (("engine", Decoder), ("shared prefix", SharedPrefixDecoder)):
            engine.Decoder = decoder
            torch.manual_seed(0)
            start = time.perf_counter()
            played = rollout(model, fmt, [(t, 0) for t in tasks], cfg, desc=name)
            seconds[name].append(time.perf_counter() - start)
            replies[name] = [m.token_ids for e in played for m in e.messages]
            tokens[name] = sum(e.tokens for e in played)
    engine.Decoder = Decoder
    table = Table(
        title=f"{env}: {episodes} held-out episodes at batch 64, temperature {temperature}, {model_dir}; "
        f"x engine per repeat (alternating)"
    )
    for col in ["decoder", "seconds (median)", "episode tokens", "x engine", "same ids"]:
        table.add_column(col, justify="right")
    same = replies["shared prefix"] == replies["engine"]
    for name, times in seconds.items():
        ratios = [a / b for a, b in zip(seconds["engine"], times, strict=True)]
        table.add_row(
            name,
            f"{statistics.median(times):.1f}",
            f"{tokens[name]:,}",
            " ".join(f"{r:.2f}" for r in ratios),
            "yes" if same else "NO",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--prompt-len", type=int, default=300)
    parser.add_argument(
        "--shared", type=int, default=200, help="of the prompt ids, how many every row shares"
    )
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--env", default="maze", help="the episodes table's environment; 'none' skips it")
    parser.add_argument("--model", type=Path, default=Path("data/models/sft"))
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    console = Console(width=160)
    console.print(decode_table(args.batches, args.prompt_len, args.shared, args.new_tokens))
    if args.env != "none":
        console.print(episodes_table(args.env, args.model, args.episodes, args.repeats, args.temperature))


if __name__ == "__main__":
    main()
