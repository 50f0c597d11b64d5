"""What gymflow's HTTP servers share (`gymflow serve-model`, `gymflow serve-env`): binding the port with a
one-line error, reading a JSON body whose size is bounded before it is parsed, and starting one as a process
of its own that is up and answering (`started`: tests, benchmarks, stages that need a server for a while)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import requests
from starlette.requests import Request

from gymflow.errors import UserError
from gymflow.workers import die_with_parent


class BadRequest(Exception):
    """A request this server will not serve: answered with `status` (400 unless said) and the message."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


async def read_json(request: Request, max_bytes: int) -> object:
    """The body as JSON, read up to `max_bytes` (413 beyond, before reading on when the length is declared);
    400 when it is not JSON. A client that disconnects raises starlette's `ClientDisconnect`."""
    declared = request.headers.get("content-length", "")
    too_large = BadRequest(f"the request body is larger than {max_bytes} bytes", status=413)
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):  # bad JSON or UTF-8, a 5000-digit number, nesting too deep
        raise BadRequest("the body is not valid JSON") from None


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port`, or a one-line UserError (bad port, busy port, unknown host)."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port must be between 1 and 65535 (got {port})")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: rebind after a restart
        sock.bind(address)
    except OSError as e:
        reason = e.strerror or str(e)
        raise UserError(
            f"cannot listen on {host}:{port}: {reason}; choose another --port or --host"
        ) from None
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now (a server may still lose it to another process before
    it binds)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def started(
    cmd: Sequence[str], health: str, log: Path | None = None, timeout: float = 60.0
) -> Iterator[subprocess.Popen]:
    """`cmd` (a server) in a process of its own that dies with this one, once GET `health` answers 200; stopped
    (SIGTERM, then SIGKILL) on exit. A server that exits or does not answer in `timeout` s is a RuntimeError
    carrying the last lines of `log` (its output)."""
    out = log.open("w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_us)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd[:4])} exited with {proc.returncode}{_tail(log)}")
            try:
                if requests.get(health, timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{' '.join(cmd[:4])} did not answer {health} in {timeout:g} s{_tail(log)}"
                )
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


def _die_with_us() -> None:
    die_with_parent(os.getppid())


def _tail(log: Path | None) -> str:
    return ":\n" + "\n".join(log.read_text().splitlines()[-20:]) if log and log.exists() else ""
