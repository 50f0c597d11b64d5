"""A persistent sandboxed Python interpreter for one episode, whose only door to the world is a call handler.

    session = Session(handler, Limits())  # handler(app, api, args, kwargs) -> JSON data, or raises CallRefused
    cell = session.run("x = apis.phone.login(username='...', password='...')\nprint(x)")
    cell.output, cell.error               # what it printed; "Execution failed. Traceback: ..." or None
    session.close()                       # the interpreter and everything it defined are gone

The interpreter is one sandbox process (`gymflow.sandbox.launch`: the same walls as `run_tests`, network,
files, processes, rlimits, audit hook) that lives from the first cell to `close`, so variables persist across
turns. Inside it, `apis.<app>.<api>(*args, **kwargs)` is a proxy: it sends (app, api, args, kwargs) as a JSON
frame and waits for the reply, which `handler` computes here, in the parent. The world's state, the task's
checks and the handler never enter the child; it can only ask, with plain data, and a forged frame asks no more
than an honest call.

Limits: each cell has `case_seconds` of wall time inside the child (SIGALRM raises into Python code), and
`wall_seconds` here, after which the process is killed (a C-level loop, a blocked signal); CPU seconds and
memory are rlimits of the whole episode's process. A killed or dead interpreter is reported in the cell's error
and a fresh one starts at the next cell (its variables lost, as after a kernel restart).
"""

from __future__ import annotations

import json
import os
import pickle
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymflow.sandbox import LAYERS, Child, Limits, _death, _take_frames, launch, refusal

MAX_CALLS = 1_000  # API calls one cell may make; later ones are refused (a loop over a paginated list fits)
MAX_FRAMES = 1 << 16  # frames one read may carry (64 KiB of the smallest); more is a forger's flood
MAX_PENDING = 8 << 20  # reply bytes queued for a child that does not read them; past it the child is killed

Handler = Callable[[str, str, list[Any], dict[str, Any]], Any]


class CallRefused(Exception):
    """Raised by a handler for an API call that fails as documented; the message reaches the cell as an
    Exception, the way AppWorld's APIs raise."""


@dataclass(frozen=True)
class Cell:
    """What running one cell gave back."""

    output: str  # what it printed (stdout and stderr), cut at Limits.output_kb
    error: (
        str | None
    )  # "Execution failed. Traceback: ..." (the cell raised or the interpreter died), else None
    calls: int = 0  # API calls the cell made
    restarted: bool = False  # the interpreter died with this cell; the next one starts afresh


class Session:
    """One episode's interpreter. Not thread-safe; `close` it (or use it as a context manager)."""

    def __init__(self, handler: Handler, limits: Limits, want: tuple[str, ...] = LAYERS) -> None:
        self.handler, self.limits, self.want = handler, limits, want
        self.child: Child | None = None
        self.layers: tuple[str, ...] = ()
        self.buffer = bytearray()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None
        self.buffer.clear()

    def run(self, source: str) -> Cell:
        """Run `source` in the episode's namespace; a cell that kills the interpreter reports why."""
        if self.child is None:
            started = self._start()
            if started is not None:
                return Cell("", f"Execution failed. Traceback:\nRuntimeError: {started}", restarted=True)
        child = self.child
        assert child is not None
        pending = bytearray(_frame({"cell": source}))
        deadline = time.monotonic() + self.limits.wall_seconds
        cap = self.limits.output_kb * 1024
        output, calls, why = bytearray(), 0, None
        selector = selectors.DefaultSelector()
        selector.register(child.out_r, selectors.EVENT_READ)
        selector.register(child.proc.stdout.fileno(), selectors.EVENT_READ)
        try:
            while why is None:
                _want_write(selector, child.in_w, bool(pending))
                left = deadline - time.monotonic()
                if left <= 0:
                    why = "timeout"
                    break
                for key, _ in selector.select(left):
                    if key.fd == child.in_w:
                        why = _send(child.in_w, pending)
                    elif key.fd == child.out_r:
                        chunk = os.read(child.out_r, 1 << 16)
                        if not chunk:
                            why = "exited"
                            break
                        self.buffer += chunk
                        frames: list[dict[str, Any]] = []
                        corrupted = _take_frames(self.buffer, frames, MAX_FRAMES)
                        for frame in frames:  # those before a corrupt one still count, in order
                            if "done" in frame and _is_done(frame["done"]):
                                printed = output.decode("utf-8", "replace")
                                self.buffer.clear()  # anything after the answer is forged
                                return Cell(frame["done"]["output"] + printed, frame["done"]["error"], calls)
                            reply = self._answer(frame, calls)
                            if reply is None:
                                corrupted = "result channel corrupted"
                                break
                            calls += reply.pop("handled")
                            pending += _frame(reply)
                            if len(pending) > MAX_PENDING:
                                corrupted = "too many unread replies"
                                break
                        why = corrupted
                    else:  # what native code wrote to fd 1 past the capture of sys.stdout
                        chunk = os.read(key.fd, 1 << 16)
                        if not chunk:
                            selector.unregister(key.fd)
                        output += chunk[: max(0, cap - len(output))]
                    if why is not None:
                        break
        finally:
            selector.close()
        self.close()
        death = _death(child.proc.returncode) if why == "exited" else why
        return Cell(
            output.decode("utf-8", "replace"),
            f"Execution failed. Traceback:\nRuntimeError: the interpreter was stopped ({death}); "
            "its variables are gone and a new one starts with the next cell",
            calls,
            restarted=True,
        )

    # ---- internals --------------------------------------------------------------------------------------
    def _start(self) -> str | None:
        """Launch the child and read its first frame (the walls that held); why it failed, or None."""
        child = launch(self.limits, self.want, mode="session")
        body = pickle.dumps({"setup": child.setup})
        try:
            os.write(child.in_w, len(body).to_bytes(4, "big") + body)  # small: fits the pipe
            deadline = time.monotonic() + self.limits.wall_seconds
            frames: list[dict[str, Any]] = []
            while not frames:
                if time.monotonic() > deadline or not _readable(child.out_r, deadline):
                    raise OSError("timeout")
                chunk = os.read(child.out_r, 1 << 16)
                if not chunk:
                    raise OSError("it exited")
                self.buffer += chunk
                if _take_frames(self.buffer, frames, 1):
                    raise OSError("a malformed first frame")
            first = frames[0]
            if not isinstance(first.get("layers"), list):
                raise OSError("a malformed first frame")
            if first.get("refused"):
                child.close()
                self.buffer.clear()
                raise refusal(tuple(map(str, first["layers"])), [str(kind) for kind in first["refused"]])
        except OSError as e:
            child.close()
            self.buffer.clear()
            return f"the sandbox did not start ({e})"
        os.set_blocking(child.in_w, False)
        self.layers = tuple(str(name) for name in first["layers"])
        self.child = child
        return None

    def _answer(self, frame: dict[str, Any], calls: int) -> dict[str, Any] | None:
        """The reply to one call frame, and whether the handler took it ("handled"); None if the frame is not a
        well-formed call."""
        call, seq = frame.get("call"), frame.get("id")
        if not (isinstance(call, list) and len(call) == 4 and isinstance(seq, int)):
            return None
        app, api, args, kwargs = call
        if not (isinstance(app, str) and isinstance(api, str) and isinstance(args, list)):
            return None
        if not (isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
            return None
        if calls >= MAX_CALLS:
            return {"id": seq, "error": f"too many API calls in one cell (at most {MAX_CALLS})", "handled": 0}
        try:
            value = self.handler(app, api, args, kwargs)
        except CallRefused as e:
            return {"id": seq, "error": str(e), "handled": 1}
        return {"id": seq, "value": value, "handled": 1}


def _want_write(selector: selectors.BaseSelector, fd: int, on: bool) -> None:
    registered = fd in selector.get_map()
    if on and not registered:
        selector.register(fd, selectors.EVENT_WRITE)
    elif registered and not on:
        selector.unregister(fd)


def _send(fd: int, pending: bytearray) -> str | None:
    """Write what the child can take now; "exited" if it is gone."""
    try:
        sent = os.write(fd, pending[: 1 << 16])
    except BlockingIOError:
        return None
    except BrokenPipeError:
        return "exited"
    del pending[:sent]
    return None


def _frame(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    return len(data).to_bytes(4, "big") + data


def _is_done(done: Any) -> bool:
    return (
        isinstance(done, dict)
        and isinstance(done.get("output"), str)
        and (done.get("error") is None or isinstance(done.get("error"), str))
    )


def _readable(fd: int, deadline: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(max(0.0, deadline - time.monotonic())))
