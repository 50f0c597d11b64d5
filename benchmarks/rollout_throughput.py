"""Rollout throughput of the engine, two tables in one run.

1. Decoding against the hardware (`--batches`, `--sizes`): the engine's `Decoder` against itself with
   PyTorch's attention in every step instead of its decode kernel (`gymflow.models.decode_attention`) and
   against a bare transformers loop (the model's own `DynamicCache`, argmax, nothing else) on the same prompts (`--prompt-len` random ids,
   then `--new-tokens` greedy steps, no environment), and both against two limits measured in the same run:
   the arithmetic one (the FLOP a generated token costs, at the mean context, over the GFLOP/s of a matrix
   product of the model's shapes at that batch) and the memory one (the bytes of KV cache each token's
   attention reads, over the bandwidth of summing a large tensor). All three must give the same token ids.
2. Episodes (`--env`): the engine against one episode at a time with `model.generate` over the whole
   re-encoded history every turn, against itself with PyTorch's attention, without setting ended replies aside within a turn (every
   row decodes until the longest reply ends: `sampling.PARK_ROWS`), with the cache copies of old (a gather
   that copied every kept row three times), and without `Decoder.keep` (finished episodes and earlier turns'
   padding left in the cache). Uses `--model` (default data/models/init) when it exists, otherwise a
   freshly built default model. Compaction matters where episodes end apart: a trained model
   (`--model data/models/sft`); greedy (`--temperature 0`) makes both engine paths play identical episodes.

    python benchmarks/rollout_throughput.py [--batches 16 64 256 1024] [--sizes default 15M default-kv1] [--env maze]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from gymflow.agent.chat import ChatFormat
from gymflow.agent.react import parse_action
from gymflow.config import ModelConfig
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.models import decode_attention, sampling
from gymflow.models.build import build_model
from gymflow.models.sampling import Decoder
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout import engine
from gymflow.rollout.engine import SamplingConfig, rollout
from gymflow.rollout.expert import run_expert

NAIVE = "naive"  # generate() on the re-encoded history, one episode at a time
PYTORCH_ATTENTION = "engine, PyTorch's attention"  # sdpa in every decoding step, not the decode kernel
SIZES = {  # name -> decoder; 15M as benchmarks/rl_update.py's and gpu_check.py's second size
    "default": ModelConfig(),
    "15M": ModelConfig(hidden_size=384, intermediate_size=1536, layers=6, heads=6, kv_heads=6),
    # the default with fewer key/value heads (grouped-query attention): a smaller cache for decoding to read
    "default-kv2": ModelConfig(kv_heads=2),
    "default-kv1": ModelConfig(kv_heads=1),
}
MAIN_SIZES = ["default", "15M"]  # what --sizes runs unless told


@contextmanager
def pytorch_attention(model=None) -> Iterator[None]:
    """The engine as it was before its decode kernel: PyTorch's sdpa in every step, for decoders made inside
    and for `model` (already switched to the kernel) if given."""
    use = sampling.use_for_decoding
    sampling.use_for_decoding = lambda model: None
    if model is not None:
        model.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        sampling.use_for_decoding = use


def gather_assemble(self, parts, rows: int) -> None:
    """`GrowingLayer.assemble` before it read each entry once: every part's rows copied (`keys[source]`), then
    gathered by column, then written to their target rows: three copies of everything kept."""
    width = max(columns.shape[1] for *_, columns, _ in parts)
    first = parts[0][0]
    shape = [rows, first.shape[1], max(2 * width, 256), first.shape[-1]]
    key_buf, value_buf = first.new_empty(shape), parts[0][1].new_empty(shape)
    if any(columns.shape[1] < width for *_, columns, _ in parts):
        key_buf[..., :width, :], value_buf[..., :width, :] = 0, 0
    for keys, values, source, columns, target in parts:
        index = columns[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[-1])
        start = width - columns.shape[1]
        key_buf[target, :, start:width] = keys[source].gather(2, index)
        value_buf[target, :, start:width] = values[source].gather(2, index)
    self.key_buf, self.value_buf, self.used = key_buf, value_buf, width
    self.keys, self.values = key_buf[..., :width, :], value_buf[..., :width, :]


class KeepAll(Decoder):
    """The engine before `Decoder.keep`: finished rows and padding columns stay in the cache."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rows = list(range(self.mask.shape[0]))  # engine row -> cache row

    def keep(self, rows) -> None:
        self.rows = [self.rows[r] for r in rows]

    def extend(self, chunks):
        full = [[] for _ in range(self.mask.shape[0])]
        for row, chunk in zip(self.rows, chunks, strict=True):
            full[row] = chunk
        return super().extend(full)

    def decode(self, logits, active, *args, **kwargs):
        on = [row in self.rows for row in range(self.mask.shape[0])]
        out = super().decode(logits, on, *args, **kwargs)
        return [out[row] for row in self.rows]


@dataclass(frozen=True)
class Vocab:
    """What `build_model` reads of a tokenizer, for a model that decodes random ids."""

    size: int
    eos_token_id: int = 1
    pad_token_id: int = 0

    def __len__(self) -> int:
        return self.size


def gflops(rows: int, inner: int, outer: int, seconds: float = 1.0) -> float:
    """GFLOP/s of a (rows x inner) @ (inner x outer) product, repeated for about `seconds`."""
    a, b = torch.randn(rows, inner), torch.randn(inner, outer)
    a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    return 2 * rows * inner * outer * n / (time.perf_counter() - start) / 1e9


def read_gbps(megabytes: int = 512, repeats: int = 5) -> float:
    """GB/s of reading a tensor far larger than the caches (`sum`): what streaming a KV cache can reach."""
    x = torch.ones(megabytes * 2**18)
    x.sum()
    start = time.perf_counter()
    for _ in range(repeats):
        x.sum()
    return x.numel() * 4 * repeats / (time.perf_counter() - start) / 1e9


def per_token(cfg: ModelConfig, vocab: int, context: float) -> tuple[float, float]:
    """FLOP and KV-cache bytes (fp32) of one generated token at `context` cached tokens: the linear layers and
    tied LM head (2 FLOP a weight), attention's scores and weighted sum (4 x context x width a layer)."""
    head = cfg.hidden_size // cfg.heads
    kv = cfg.kv_heads * head
    per_layer = cfg.hidden_size * (2 * cfg.hidden_size + 2 * kv) + 3 * cfg.hidden_size * cfg.intermediate_size
    flop = 2 * (cfg.layers * per_layer + vocab * cfg.hidden_size) + 4 * context * cfg.hidden_size * cfg.layers
    return flop, 2 * cfg.layers * context * kv * 4


@torch.no_grad()
def bare_loop(model, prompts: torch.Tensor, steps: int) -> tuple[list[list[int]], float]:
    """The model's own cache and argmax, nothing else: ids and decode seconds (prefill excluded)."""
    cache = DynamicCache()
    token = model(input_ids=prompts, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1)
    ids, start = [token], time.perf_counter()
    for _ in range(steps - 1):
        token = (
            model(input_ids=token[:, None], past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1)
        )
        ids.append(token)
    return torch.stack(ids, 1).tolist(), time.perf_counter() - start


def engine_decode(model, prompts: torch.Tensor, steps: int) -> tuple[list[list[int]], float]:
    """The engine's `Decoder` on the same prompts, greedy, no stop: ids and decode seconds (prefill excluded)."""
    decoder = Decoder(model, len(prompts), pad_id=0)
    logits = decoder.extend(prompts.tolist())
    start = time.perf_counter()
    out = decoder.decode(logits, [True] * len(prompts), steps, stop_ids=[], temperature=0)
    return [c.token_ids for c in out], time.perf_counter() - start


def decode_table(sizes: list[str], batches: list[int], prompt_len: int, new_tokens: int) -> Table:
    bandwidth = read_gbps()
    table = Table(
        title=f"Greedy decoding: {prompt_len} prompt ids, then {new_tokens} tokens; "
        f"{torch.get_num_threads()} threads, read bandwidth {bandwidth:.1f} GB/s"
    )
    columns = ["model", "batch", "engine tok/s", "with sdpa", "x sdpa", "bare tok/s", "x bare", "GFLOP/s"]
    columns.append("arith. limit")
    for col in [*columns, "x arith.", "memory limit", "x memory", "same ids"]:
        table.add_column(col, justify="right")
    vocab = ModelConfig().vocab_size
    decode_attention.kernel()  # built (once per machine) before anything is timed
    for size in sizes:
        cfg = SIZES[size]
        torch.manual_seed(0)
        model = build_model(cfg, Vocab(vocab)).eval()
        params = sum(p.numel() for p in model.parameters())
        flop, kv_bytes = per_token(cfg, vocab, prompt_len + new_tokens / 2)
        for batch in batches:
            prompts = torch.randint(2, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
            with pytorch_attention(model):
                with_sdpa, sdpa_s = engine_decode(model, prompts, new_tokens)
                bare, bare_s = bare_loop(model, prompts, new_tokens)
            ours, ours_s = engine_decode(model, prompts, new_tokens)
            rate = batch * new_tokens / ours_s
            speed = gflops(batch, cfg.hidden_size, cfg.intermediate_size)
            arithmetic, memory = speed * 1e9 / flop, bandwidth * 1e9 / kv_bytes
            table.add_row(
                f"{size} ({params / 1e6:.1f}M)",
                str(batch),
                f"{rate:,.0f}",
                f"{batch * new_tokens / sdpa_s:,.0f}",
                f"{sdpa_s / ours_s:.2f}",
                f"{batch * new_tokens / bare_s:,.0f}",
                f"{bare_s / ours_s:.2f}",
                f"{speed:.0f}",
                f"{arithmetic:,.0f}",
                f"{rate / arithmetic:.2f}",
                f"{memory:,.0f}",
                f"{rate / memory:.2f}",
                "yes" if ours == bare == with_sdpa else "NO",
            )
    return table


def load_or_build(env_name: str, path: Path) -> tuple[torch.nn.Module, ChatFormat]:
    if (path / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(path).eval(), ChatFormat(
            AutoTokenizer.from_pretrained(path)
        )
    tasks = build_splits(ENVS[env_name], 50, 0, seed=0)["train"]
    env = make_env(env_name)
    texts = [m.text for t in tasks for m in run_expert(env, t).messages]
    tokenizer = train_tokenizer(texts, 2048)
    return build_model(ModelConfig(), tokenizer).eval(), ChatFormat(tokenizer)


@torch.no_grad()
def naive(model, fmt: ChatFormat, tasks, cfg: SamplingConfig, horizon: int) -> tuple[int, int]:
    """One episode at a time; every turn re-encodes the whole conversation and calls model.generate."""
    steps = tokens = 0
    tok = fmt.tokenizer
    for task in tasks:
        env = make_env(task.env)
        chat = [
            {"role": "system", "content": env.spec.system_prompt},
            {"role": "user", "content": env.reset(task)},
        ]
        for _ in range(horizon):
            ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            prompt = torch.tensor([fmt.encode(ids)])
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=cfg.temperature > 0,
                temperature=cfg.temperature or None,
                max_new_tokens=cfg.max_new_tokens,
                eos_token_id=fmt.eos_id,
                pad_token_id=tok.pad_token_id,
            )[0, prompt.shape[1] :]
            tokens += len(out)
            text = tok.decode(out, skip_special_tokens=True)
            step = env.step(parse_action(text) or "")
            steps += 1
            chat += [{"role": "assistant", "content": text}, {"role": "user", "content": step.observation}]
            if step.done:
                break
        env.close()
    return steps, tokens


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=MAIN_SIZES)
    parser.add_argument("--prompt-len", type=int, default=300)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--env", default="maze", help="the episodes table's environment; 'none' skips it")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--model", type=Path, default=Path("data/models/init"))
    args = parser.parse_args()
    console = Console(width=200)
    console.print(decode_table(args.sizes, args.batches, args.prompt_len, args.new_tokens))
    if args.env == "none":
        return
    torch.manual_seed(0)
    model, fmt = load_or_build(args.env, args.model)
    tasks = build_splits(ENVS[args.env], 0, args.episodes, seed=0)["eval"]
    horizon = ENVS[args.env].spec.max_turns
    cfg = SamplingConfig(
        temperature=args.temperature, max_new_tokens=args.max_new_tokens, batch_size=args.batch
    )

    rows = {}
    assemble = sampling.GrowingLayer.assemble
    paths = [  # name, batch, decoder class, the fewest rows a decode sets ended replies aside from, cache copy
        (f"engine b{args.batch}", args.batch, Decoder, sampling.PARK_ROWS, assemble),
        (PYTORCH_ATTENTION, args.batch, Decoder, sampling.PARK_ROWS, assemble),
        (f"engine b{args.batch}, copies by gather", args.batch, Decoder, sampling.PARK_ROWS, gather_assemble),
        (f"engine b{args.batch}, no setting aside", args.batch, Decoder, args.batch + 1, assemble),
        (f"engine b{args.batch}, no keep", args.batch, KeepAll, args.batch + 1, assemble),
        ("engine b1", 1, Decoder, sampling.PARK_ROWS, assemble),
    ]
    park_rows = sampling.PARK_ROWS
    for name, batch, decoder, parks, copy in paths:
        engine.Decoder, sampling.PARK_ROWS, sampling.GrowingLayer.assemble = decoder, parks, copy
        start = time.perf_counter()
        with pytorch_attention(model) if name == PYTORCH_ATTENTION else nullcontext():
            eps = rollout(
                model, fmt, [(t, 0) for t in tasks], SamplingConfig(**{**cfg.__dict__, "batch_size": batch})
            )
        gen = sum(len(m.token_ids) for e in eps for m in e.messages)
        rows[name] = (len(eps), sum(e.turns for e in eps), gen, time.perf_counter() - start)
    engine.Decoder, sampling.PARK_ROWS, sampling.GrowingLayer.assemble = Decoder, park_rows, assemble
    naive_tasks = tasks[: max(4, args.episodes // 8)]  # the slow path on fewer episodes; rates compare
    start = time.perf_counter()
    with pytorch_attention(model):  # generate() as transformers runs it
        steps, gen = naive(model, fmt, naive_tasks, cfg, horizon)
    rows[NAIVE] = (
        len(naive_tasks),
        steps,
        gen,
        time.perf_counter() - start,
    )

    table = Table(
        title=f"{args.env} rollouts, {sum(p.numel() for p in model.parameters()):,}-parameter model, "
        f"turn limit {horizon}, replies up to {args.max_new_tokens} tokens"
    )
    for col in ["path", "episodes", "episodes/s", "env steps/s", "tokens/s", "x naive"]:
        table.add_column(col, justify="right")
    base = rows[NAIVE]
    base_rate = base[2] / base[3]
    for name, (n, steps, gen, secs) in rows.items():
        table.add_row(
            name,
            str(n),
            f"{n / secs:.2f}",
            f"{steps / secs:.1f}",
            f"{gen / secs:.0f}",
            f"{gen / secs / base_rate:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
