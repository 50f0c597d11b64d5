"""A persistent sandboxed Python interpreter for one episode, whose only door to the world is a call handler.

    session = Session(handler, Limits())  # handler(app, api, args, kwargs) -> JSON data, or raises CallRefused
    cell = session.run("x = apis.phone.login(username='...', password='...')\nprint(x)")
    cell.output, cell.error               # what it printed; "Execution failed. Traceback: ..." or None
    session.close()                       # the interpreter and everything it defined are gone

The interpreter is one sandbox process (`gymflow.sandbox.launch`: the same walls as `run_tests`, network,
files, processes, rlimits) that lives from the first cell to `close`: the harness. It runs no candidate code
itself: each cell runs in a process the harness forks for it (the audit hook, seccomp's full program and the
rest of the limits go up there, before the cell), which loads the namespace the previous cell left (pickled by
value with cloudpickle: variables, functions, classes; a name that cannot be pickled, such as a generator, is
dropped with a note in the output), runs the cell, and sends the namespace back. Inside it,
`apis.<app>.<api>(*args, **kwargs)` is a proxy: it sends (app, api, args, kwargs) as a JSON frame, which the
harness passes on, and waits for the reply, which `handler` computes here, in the parent. The world's state,
the task's checks and the handler never enter the sandbox; a cell can only ask, with plain data, and a forged
frame asks no more than an honest call.

A turn: the parent sends {"cell": source, "token": t}, t fresh and random; the harness answers {"start": t},
the cell's calls, then {"done": t, "error": ...} once the cell's process has sent its done frame (or died, or
run out of time) and has been killed. The cell's process holds no pipe to the parent, only its own to the
harness, so it cannot write a frame the parent takes for the harness's, nor read the next request; and nothing
it starts (a timer, a hook, code that goes on after a done frame it wrote early) outlives its turn. The output
is what was written to the process's stdout while the turn was open (no frame carries text). A cell that dies
or runs out of time leaves the namespace as it was before it. Threads are refused (Limits.processes must be 1).

Limits: each cell has `case_seconds` of wall time inside its process (SIGALRM raises into Python code), and
half a second more before the harness kills it (a C-level loop, a blocked signal); `wall_seconds` bounds the
harness here. CPU seconds are the episode's, summed over its cells' processes; memory is a limit of each. A
harness that dies is reported in the cell's error and a fresh one starts at the next cell (the variables lost,
as after a kernel restart).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import pickle
import secrets
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.errors import UserError
from gymflow.sandbox import LAYERS, Child, Limits, _death, _take_frames, launch, refusal
from gymflow.sandbox.child import GRACE

MAX_CALLS = 1_000  # API calls one cell may make; later ones are refused (a loop over a paginated list fits)
MAX_FRAMES = 1 << 16  # frames one read may carry (64 KiB of the smallest); more is a forger's flood
MAX_PENDING = 8 << 20  # reply bytes queued for a child that does not read them; past it the child is killed
MAX_DRAIN = 2 << 20  # output read after "done": what was written before it is in a pipe (1 MiB at most)

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
        if limits.processes != 1:  # then the kernel refuses threads (seccomp, or RLIMIT_NPROC of its uid)
            raise UserError(
                f"sandbox session: Limits.processes must be 1, got {limits.processes}: a thread or process that "
                "a cell started would go on running after its turn"
            )
        if limits.wall_seconds <= limits.case_seconds + GRACE:  # else the harness dies before its cell does
            raise UserError(
                f"sandbox session: Limits.wall_seconds ({limits.wall_seconds}) must exceed case_seconds + "
                f"{GRACE} ({limits.case_seconds + GRACE}): the harness kills a cell that long after it started"
            )
        self.handler, self.limits, self.want = handler, limits, want
        self.child: Child | None = None
        self.layers: tuple[str, ...] = ()
        self.buffer = bytearray()  # frames from the child not yet taken
        self.pending = bytearray()  # bytes for the child not yet sent: a reply its cell stopped waiting for

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None
        self.buffer.clear()
        self.pending.clear()

    def run(self, source: str) -> Cell:
        """Run `source` in the episode's namespace; a cell that kills the interpreter, or breaks the turn
        protocol, reports why, and the next cell gets a fresh interpreter."""
        if self.child is None:
            started = self._start()
            if started is not None:
                return Cell("", f"Execution failed. Traceback:\nRuntimeError: {started}", restarted=True)
        child = self.child
        assert child is not None
        turn = _Turn(secrets.token_hex(16), _Output(self.limits.output_kb * 1024))
        why = _between_cells(child, self.buffer) or self._serve(child, source, turn)
        if why is None:
            return Cell(turn.output.text(), turn.error, turn.calls)
        self.close()
        death = _death(child.proc.returncode) if why == "exited" else why
        return Cell(
            turn.output.text(),
            f"Execution failed. Traceback:\nRuntimeError: the interpreter was stopped ({death}); "
            "its variables are gone and a new one starts with the next cell",
            turn.calls,
            restarted=True,
        )

    # ---- internals --------------------------------------------------------------------------------------
    def _start(self) -> str | None:
        """Launch the child and read its first frame (the walls that held); why it failed, or None."""
        child = launch(self.limits, self.want, mode="session")
        body = pickle.dumps({"setup": child.setup | {"pickler": _pickler_source()}})
        try:
            os.write(child.in_w, len(body).to_bytes(4, "big") + body)  # about 40 KB: fits the pipe
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
        os.set_blocking(child.proc.stdout.fileno(), False)  # read to the end of what is there at "done"
        self.layers = tuple(str(name) for name in first["layers"])
        self.child = child
        return None

    def _serve(self, child: Child, source: str, turn: _Turn) -> str | None:
        """Send the cell, answer its calls and collect its output until its done frame; why the interpreter
        must stop, or None."""
        pending = self.pending  # after the rest of a reply sent in an earlier turn, which the harness skips
        pending += _frame({"cell": source, "token": turn.token})
        deadline = time.monotonic() + self.limits.wall_seconds
        stdout = child.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(child.out_r, selectors.EVENT_READ)
            selector.register(stdout, selectors.EVENT_READ)
            while not turn.done:
                _want_write(selector, child.in_w, bool(pending))
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                for key, _ in selector.select(left):
                    if key.fd == child.in_w:
                        why = _send(child.in_w, pending)
                    elif key.fd == stdout:
                        why, chunk = None, _read(stdout)
                        if chunk == b"":  # the process is gone; its frame pipe will say so
                            selector.unregister(stdout)
                        elif chunk:
                            turn.output.feed(chunk)
                    else:
                        why = self._read_frames(child.out_r, turn, pending)
                    if why is not None:
                        return why
                    if turn.done:
                        break
        if self.buffer:
            return "it wrote after its turn ended"
        return _drain(stdout, turn.output)

    def _read_frames(self, fd: int, turn: _Turn, pending: bytearray) -> str | None:
        """Take the frames that arrived; why the interpreter must stop, or None."""
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return "exited"
        self.buffer += chunk
        frames: list[dict[str, Any]] = []
        corrupted = _take_frames(self.buffer, frames, MAX_FRAMES)
        for frame in frames:  # those before a corrupt one still count, in order
            why = self._take(frame, turn, pending)
            if why is not None:
                return why
        return corrupted

    def _take(self, frame: dict[str, Any], turn: _Turn, pending: bytearray) -> str | None:
        """One frame of the turn: the harness's start, then calls (answered into `pending`), then its done.
        Anything else, or anything out of that order, stops the interpreter."""
        if turn.done:
            return "it wrote after its turn ended"
        if not turn.started:
            if frame != {"start": turn.token}:
                return "it wrote outside its turn"
            turn.started = True
            return None
        if "done" in frame:
            error = frame.get("error")
            if frame.keys() != {"done", "error"} or frame["done"] != turn.token:
                return "result channel corrupted"
            if error is not None and not isinstance(error, str):
                return "result channel corrupted"
            turn.done, turn.error = True, error
            return None
        reply = self._answer(frame, turn.calls)
        if reply is None:
            return "result channel corrupted"
        turn.calls += reply.pop("handled")
        pending += _frame(reply)
        return "too many unread replies" if len(pending) > MAX_PENDING else None

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


class _Output:
    """What a turn wrote to fd 1 (its prints and native writes), decoded as it arrives: the first `cap`
    characters kept, the rest counted."""

    def __init__(self, cap: int) -> None:
        self.cap, self.parts, self.kept, self.dropped = cap, [], 0, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self.decoder.decode(data, final)
        room = max(self.cap - self.kept, 0)
        self.parts.append(text[:room])
        self.kept += min(len(text), room)
        self.dropped += max(len(text) - room, 0)

    def text(self) -> str:
        self.feed(b"", final=True)
        out = "".join(self.parts)
        return out + (f"\n[{self.dropped} more characters not shown]" if self.dropped else "")


@dataclass
class _Turn:
    """One cell's turn as the parent sees it. Its token is fresh, so a frame written for an earlier turn (a
    forger's, or the harness's own late done) never fits this one."""

    token: str
    output: _Output
    started: bool = False
    done: bool = False
    error: str | None = None
    calls: int = 0


def _between_cells(child: Child, buffer: bytearray) -> str | None:
    """Why the interpreter cannot take a cell: it died, or wrote something after its last turn ended (code that
    outlived a forged done, a timer); None while it is quiet, as the harness is between cells."""
    fds = [child.out_r, child.proc.stdout.fileno()]
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        ready = [key.fd for key, _ in selector.select(0)]
    if any(_read(fd) == b"" for fd in ready):
        return "exited"
    return "it wrote between cells" if ready or buffer else None


def _read(fd: int) -> bytes | None:
    """What `fd` holds now, b"" at its end, None if nothing is there (a non-blocking pipe)."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None


def _drain(fd: int, output: _Output) -> str | None:
    """Read what the cell wrote to fd 1 before its done frame: all of it is in the pipe by then. More than a
    pipe holds means it is still writing after its turn."""
    for _ in range(MAX_DRAIN >> 16):
        chunk = _read(fd)
        if not chunk:
            return None
        output.feed(chunk)
    return "it wrote after its turn ended"


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


@functools.cache
def _pickler_source() -> str:
    """cloudpickle's source, which the harness loads (it sees the standard library only): a cell's namespace
    crosses to the next cell's process pickled by value, functions and classes included."""
    import cloudpickle.cloudpickle

    return Path(cloudpickle.cloudpickle.__file__).read_text()


def _frame(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    return len(data).to_bytes(4, "big") + data


def _readable(fd: int, deadline: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(max(0.0, deadline - time.monotonic())))
