"""Run untrusted Python (model-written code) in a separate, walled-in process; compare its answers here.

    from gymflow.sandbox import Limits, matches, run_tests
    out = run_tests(source, "price", [[3, "gold"], [0, "basic"]], Limits(cpu_seconds=2))
    passed = [matches(reference(*args), case) for args, case in zip(cases, out.value)] if out.ok else []

Each call starts a fresh `python -I -S` (isolated: no site-packages, no environment, no project path) in a new
session, stdin on /dev/null, cwd a private temporary directory removed afterwards. Its harness
(gymflow/sandbox/child.py) puts up these walls before any candidate code runs, each where the kernel allows:

- netns: a new network namespace (as root; otherwise a new user namespace with it): no interface is up, so
  connect() fails with "Network is unreachable" even from native code.
- chroot (root only): a new mount namespace and a chroot into a tmpfs holding read-only /usr and the
  interpreter, /dev/null|zero|urandom|random, a /proc mounted hidepid=2 and a private /tmp (the cwd, sized
  4 x file_mb). The project, the parent's files and every other directory do not exist for the child.
- rlimits: CPU seconds (SIGXCPU), address space, file size (a bigger write fails with EFBIG), processes and
  threads, 64 open files, no core dumps.
- uid (root only): the child drops to a uid and gid of its own (0x70000000 + its pid), so RLIMIT_NPROC binds,
  other processes cannot be signalled or traced, /proc/<parent> is unreadable, and file permissions hold.
  Without chroot it is skipped when the interpreter lives where other users cannot read it (e.g. /root/.pyenv).
- landlock (Linux >= 5.13, no root needed): the process may read only the interpreter, the system libraries
  and its directory, and write only its directory (and only under chroot, whose tmpfs bounds the total; on the
  host's disk nothing would) and /dev/null; no TCP (ABI 4), no signals or abstract sockets reaching outside
  (ABI 6), no ptrace of (or /proc/<pid>/cwd, environ, mem of) processes outside.
- seccomp (no root needed): EPERM for socket(), exec, fork and clone (threads only if processes > 1), ptrace,
  signals and pidfds aimed at any other process, io_uring, file modes, owners, times and xattrs, device nodes,
  and namespace, mount, module, clock and key calls (`child.SYSCALLS`); a foreign syscall ABI kills it.
- nonewprivs: no setuid binary can give privileges back.
- audit: a sys.addaudithook hook refusing process creation, sockets, ctypes, signals to other processes,
  writes outside the private directory and reads outside it and the standard library.

The audit hook is no wall: its function and the harness's globals are Python objects the candidate can reach
(gc.get_objects(), `import __main__`) and rewrite, after which ctypes imports. It only makes refusals early and
readable. The walls are the kernel layers, and the harness runs no candidate code unless they cover each kind
of escape (`child.CONTAINMENT`): the network (netns or seccomp), files (chroot or landlock), and processes and
signals (uid or seccomp). Where they do not (a kernel without Landlock or seccomp and no namespaces), every
call raises a one-line UserError saying what to enable; GYMFLOW_SANDBOX=trusted runs code the user vouches
for behind whatever walls there are. `layers()` says which hold on a machine.
Still visible without namespaces: names and metadata (os.stat, os.readlink) of host paths, not their contents;
the child's own pid and its parent's number. Not covered: cgroup memory accounting (RLIMIT_AS bounds the
address space, not page cache or tmpfs beyond the chroot's size).

Answers come back over a pipe of their own as length-prefixed JSON frames written by the harness, never over
stdout, and the parent decodes them as plain data only (no pickle, no objects whose __eq__ could lie). The
candidate runs in the harness's process, so it can find that pipe and write frames itself; that forges
nothing it could not return honestly, because expected values and the reference never enter the child: a
pass needs the right value, whoever writes it. Malformed or extra frames end the run as "result channel
corrupted".

Timing: every request (loading the source, each case) has `case_seconds` of wall time, enforced in the child
by SIGALRM, which stops Python-level loops and fails only that case. Whatever kills the process instead (the
CPU or wall limit, a C-level loop, a crash, os._exit) fails the case in flight; the remaining cases then run
in a fresh process, at most `restarts` times per call, so one call costs at most (restarts + 1) x wall_seconds.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.errors import UserError
from gymflow.sandbox.child import CONTAINMENT, MAX_FRAME, encode

__all__ = ["Limits", "Outcome", "encode", "layers", "matches", "run_python", "run_tests"]

# Every layer, attempted in this order; rlimits always hold, the others where the kernel allows.
LAYERS = ("nonewprivs", "netns", "chroot", "rlimits", "uid", "landlock", "seccomp", "audit")
TRUSTED = "GYMFLOW_SANDBOX"  # =trusted: run code even where the kernel layers cannot contain it
UID_BASE = 0x70000000  # above systemd's container range, below 2**31 even with pid_max at its 2**22 ceiling
HARNESS = Path(__file__).with_name("child.py")


@dataclass(frozen=True)
class Limits:
    """What one sandbox process may use. The defaults suit unit tests of small functions."""

    cpu_seconds: float = 2.0
    """CPU time of the process (RLIMIT_CPU, rounded up to whole seconds): "cpu limit" past it."""
    wall_seconds: float = 5.0
    """Wall time of the process; then its whole process group is killed: "timeout"."""
    memory_mb: int = 256
    """Address space (RLIMIT_AS); the interpreter itself takes about 15 MB. Past it: "memory limit"."""
    file_mb: int = 1
    """Largest file it may write (RLIMIT_FSIZE); a longer write fails with OSError (EFBIG)."""
    processes: int = 1
    """Processes and threads of its uid (RLIMIT_NPROC); 1 is itself only: no fork, no thread."""
    case_seconds: float = 0.5
    """Wall time of each request (the source, each case); a Python-level loop past it fails that case only."""
    output_kb: int = 64
    """stdout and stderr kept; a program printing more is killed ("output limit")."""

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "case_seconds"):
            if not getattr(self, name) > 0:
                raise UserError(f"sandbox limits: {name} must be > 0, got {getattr(self, name)}")
        if self.memory_mb < 64:
            raise UserError(
                f"sandbox limits: memory_mb must be >= 64 (the interpreter needs it), got {self.memory_mb}"
            )
        for name in ("file_mb", "processes", "output_kb"):
            if getattr(self, name) < 1:
                raise UserError(f"sandbox limits: {name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Outcome:
    """What a sandboxed run gave back."""

    ok: bool
    """The source ran (and defined the function asked for); per-case failures do not clear it."""
    value: Any
    """run_python: the returned value (repr text if not JSON data); run_tests: one dict per case. None if not ok."""
    stdout: str
    """stdout and stderr together, cut at Limits.output_kb."""
    error: str | None
    """One line when not ok: "timeout", "cpu limit", "memory limit", "killed by signal 9", "NameError: ..."."""
    layers: tuple[str, ...] = ()
    """The walls that held (see the module docstring), for diagnostics."""


def matches(expected: Any, case: dict[str, Any]) -> bool:
    """Whether a case's answer equals `expected`, a value computed here (never in the child).

    Python's == on plain JSON data (so 1 == 1.0 == True, as an `assert f(x) == y` test would say), equality
    of canonical reprs otherwise (a tuple is not a list; set and dict order do not matter)."""
    if "error" in case:
        return False
    try:
        return encode(expected) == case
    except (ValueError, RecursionError):
        return False


def run_tests(
    source: str, function: str, cases: list[list[Any]], limits: Limits = Limits(), restarts: int = 2
) -> Outcome:
    """Run `source`, then `function(*args)` for each args list of `cases`, all in one sandbox process.

    `value` holds, per case, {"value": v} (plain JSON data), {"repr": text, "type": name} (anything else) or
    {"error": "Name: message"}; compare with `matches`. A case that kills its process fails itself, and the
    rest run in a fresh one, at most `restarts` times; then the rest fail as "not run: no restarts left".
    """
    return _run_tests(source, function, cases, limits, restarts, LAYERS)


def run_python(
    source: str, call: str | None = None, args: list[Any] | None = None, limits: Limits = Limits()
) -> Outcome:
    """Run `source`; `value` is `call(*args)` if `call` is given, else the value of its last line if that is an
    expression (as in a notebook cell). A value that is not plain JSON data comes back as its repr."""
    if call is not None:
        out = _run_tests(source, call, [list(args or [])], limits, 0, LAYERS)
        if not out.ok:
            return out
        case = out.value[0]
        if "error" in case:
            return Outcome(False, None, out.stdout, case["error"], out.layers)
        return Outcome(True, case.get("value", case.get("repr")), out.stdout, None, out.layers)
    answers, stdout, death, walls = _spawn([{"op": "exec", "source": source, "value": True}], limits, LAYERS)
    if not answers:
        return Outcome(False, None, stdout, death, walls)
    answer = answers[0]
    if "error" in answer:
        return Outcome(False, None, stdout, answer["error"], walls)
    return Outcome(True, answer.get("value", answer.get("repr")), stdout, None, walls)


@functools.cache
def layers() -> tuple[str, ...]:
    """The walls a sandbox gets on this machine, e.g. ("nonewprivs", "netns", "chroot", "rlimits", "uid",
    "landlock", "seccomp", "audit"), whether or not they contain it."""
    return _spawn([{"op": "exec", "source": "0"}], Limits(), LAYERS, trusted=True)[3]


def _trusted() -> bool:
    """Whether the user opted in to running code the machine's kernel layers cannot contain."""
    value = os.environ.get(TRUSTED, "")
    if value not in ("", "trusted"):
        raise UserError(f"{TRUSTED}={value!r}: the only value is 'trusted' (or leave it unset)")
    return value == "trusted"


def refusal(walls: tuple[str, ...], missing: list[str]) -> UserError:
    """The one line a caller gets where the sandbox refuses to run code: why, and what to enable."""
    needs = "; ".join(f"{kind}: {' or '.join(CONTAINMENT[kind])}" for kind in missing)
    return UserError(
        f"sandbox: refusing to run model-written code: no kernel layer stops its {', '.join(missing)} escapes "
        f"here (walls: {', '.join(walls) or 'none'}; the audit hook alone is no wall). Enable {needs} "
        f"(Landlock and seccomp: Linux >= 5.13 unprivileged; netns, chroot, uid: root), or set {TRUSTED}=trusted "
        "to run code you trust anyway"
    )


def _run_tests(
    source: str, function: str, cases: list[list[Any]], limits: Limits, restarts: int, want: tuple[str, ...]
) -> Outcome:
    """run_tests attempting only the layers in `want`, so tests can check each defence without the others."""
    load = {"op": "exec", "source": source, "function": function}
    results: list[dict[str, Any]] = []
    stdout, walls = "", ()
    for attempt in range(restarts + 1):
        todo = cases[len(results) :]
        calls = [{"op": "call", "function": function, "args": list(args)} for args in todo]
        answers, out, death, walls = _spawn([load, *calls], limits, want)
        stdout = (stdout + out)[: limits.output_kb * 1024]
        if not answers or "error" in answers[0]:
            error = answers[0]["error"] if answers else death
            if attempt == 0:
                return Outcome(False, None, stdout, error, walls)
            results += [{"error": f"not run: {error}"}] * len(todo)  # the source ran before; not now
            break
        results += answers[1:]
        if len(results) == len(cases):
            break
        results.append({"error": death})  # the case in flight when the process died
        if len(results) == len(cases):
            break
    results += [{"error": "not run: no restarts left"}] * (len(cases) - len(results))
    return Outcome(True, results, stdout, None, walls)


def _python() -> str:
    """The real interpreter, not the venv's link to it: its path must not lead into the project."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@functools.cache
def _harness() -> str:
    return HARNESS.read_text()


@dataclass
class Child:
    """A started sandbox process (gymflow.sandbox.session drives one for a whole episode)."""

    proc: subprocess.Popen
    in_w: int  # requests to the child
    out_r: int  # its frames back
    scratch: Path  # its private directory and chroot, removed by `close`
    setup: dict[str, Any]

    def close(self) -> None:
        for fd in (self.in_w, self.out_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.in_w = self.out_r = -1
        _kill(self.proc)
        shutil.rmtree(self.scratch, ignore_errors=True)


SCRATCH_PREFIX = "gymflow-sandbox-"  # then the pid of the process that launched it


@functools.cache  # once per process: what earlier processes left is there before this one starts
def _sweep_dead_scratch() -> None:
    """Remove scratch directories whose launching process is gone: one killed before `Child.close` ran (SIGKILL,
    a lost machine) leaves its directory behind, and /tmp fills over many runs. Only this user's, only dead pids."""
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        with contextlib.suppress(OSError, ValueError):
            if path.is_symlink() or path.lstat().st_uid != os.getuid() or _alive(int(pid)):
                continue
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def launch(
    limits: Limits, want: tuple[str, ...] = LAYERS, mode: str = "requests", trusted: bool | None = None
) -> Child:
    """Start the harness (child.py) in `mode`; the caller sends its payload (`setup` and the requests). Unless
    `trusted` (default: the GYMFLOW_SANDBOX variable), the harness runs no candidate code where the kernel
    layers do not contain it, and answers with the kinds of escape left open."""
    trusted = _trusted() if trusted is None else trusted
    _sweep_dead_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    home, root = scratch / "home", scratch / "root"
    home.mkdir()
    root.mkdir()
    scratch.chmod(0o711)  # a dropped uid without chroot must reach home/ through it
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        proc = _from_a_lasting_thread(
            subprocess.Popen,
            [_python(), "-I", "-S", "-B", "-u", "-X", "utf8", "-c", _harness(), str(in_r), str(out_w), mode],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=home,
            env={},
            close_fds=True,
            pass_fds=(in_r, out_w),
            start_new_session=True,
        )
    except BaseException:
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    os.close(in_r)
    os.close(out_w)
    child = Child(proc, in_w, out_r, scratch, {})
    try:
        uid = UID_BASE + proc.pid if os.geteuid() == 0 else None
        if uid is not None:
            os.chown(home, uid, uid)
            home.chmod(0o700)
    except BaseException:
        child.close()
        raise
    child.setup = {
        "uid": uid,
        "root": str(root),
        "tmp_mb": max(8, 4 * limits.file_mb),
        "parent": os.getpid(),
        "layers": want,
        "trusted": trusted,
        "seconds": limits.case_seconds,
        "limits": {
            "cpu": math.ceil(limits.cpu_seconds),
            "memory": limits.memory_mb << 20,
            "file": limits.file_mb << 20,
            "processes": limits.processes,
        },
    }
    return child


_starter: ThreadPoolExecutor | None = None  # this process's thread that starts sandbox processes
_starter_lock = threading.Lock()


def _from_a_lasting_thread(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` called on a thread that lasts as long as this process (the main thread, or one
    started for it). The harness asks the kernel to kill it when its parent dies, and the kernel sends that
    signal when the *thread* that forked it ends: an apps interpreter started on a pool's thread (the engine
    stepping episodes at once, a server's worker) died with that thread, between two cells."""
    global _starter
    if threading.current_thread() is threading.main_thread():
        return fn(*args, **kwargs)
    with _starter_lock:
        if _starter is None:
            _starter = ThreadPoolExecutor(1, thread_name_prefix="gymflow-sandbox-starter")
    return _starter.submit(lambda: fn(*args, **kwargs)).result()  # a frame of this module (tests' fast tier)


def _forget_starter() -> None:
    """In a forked child: the parent's starter thread is not there, so the child starts its own."""
    global _starter, _starter_lock
    _starter, _starter_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_starter)


def _spawn(
    requests: list[dict[str, Any]], limits: Limits, want: tuple[str, ...], trusted: bool | None = None
) -> tuple[list[dict[str, Any]], str, str, tuple[str, ...]]:
    """Run one sandbox process over `requests`; return its answers (fewer if it died), its output, why it died
    (meaningful only if answers are missing) and the layers that held. Raises `refusal` where the walls do not
    contain candidate code (and it is not trusted)."""
    child = launch(limits, want, trusted=trusted)
    proc = child.proc
    try:
        payload = pickle.dumps({"setup": child.setup, "requests": requests})
        in_w, child.in_w = child.in_w, -1  # _talk closes it
        frames, output, killed = _talk(proc, payload, in_w, child.out_r, limits, 1 + len(requests))
    finally:
        child.close()
    walls: tuple[str, ...] = ()
    if frames and isinstance(frames[0].get("layers"), list):  # written before any candidate code runs
        walls = tuple(str(name) for name in frames[0]["layers"])
        if frames[0].get("refused"):
            raise refusal(walls, [str(kind) for kind in frames[0]["refused"]])
        frames = frames[1:]
    elif frames:
        killed = "result channel corrupted"
    if (
        killed == "result channel corrupted"
        or len(frames) > len(requests)
        or not all(map(_is_answer, frames))
    ):
        frames, killed = [], "result channel corrupted"  # a forger's process gives nothing back
    death = killed or _death(proc.returncode if proc is not None else None)
    if not walls and not frames and not killed:
        death = f"sandbox did not start ({death}): {' '.join(output.split())[-200:]}"
    return frames, output, death, walls


def _talk(
    proc: subprocess.Popen, payload: bytes, in_w: int, out_r: int, limits: Limits, most: int
) -> tuple[list[dict[str, Any]], str, str | None]:
    """Feed the request (closing `in_w`), read output and up to `most` frames until both pipes close, the wall
    limit passes or a cap is exceeded. Returns the frames, the output (cut), and why to kill the process, if so."""
    deadline = time.monotonic() + limits.wall_seconds
    cap = limits.output_kb * 1024
    stdout_fd = proc.stdout.fileno()
    os.set_blocking(in_w, False)  # a child that never reads must not hang the parent
    selector = selectors.DefaultSelector()
    selector.register(in_w, selectors.EVENT_WRITE)
    selector.register(stdout_fd, selectors.EVENT_READ)
    selector.register(out_r, selectors.EVENT_READ)
    output, printed, buffer, frames, sent = bytearray(), 0, bytearray(), [], 0
    killed = None
    try:
        while killed is None and (stdout_fd in selector.get_map() or out_r in selector.get_map()):
            left = deadline - time.monotonic()
            if left <= 0:
                killed = "timeout"
                break
            for key, _ in selector.select(left):
                if key.fd == in_w:
                    try:
                        sent += os.write(in_w, payload[sent : sent + (1 << 16)])
                    except BlockingIOError:  # the pipe filled between select and write
                        continue
                    except BrokenPipeError:  # it died before reading; its exit status will say why
                        sent = len(payload)
                    if sent >= len(payload):
                        selector.unregister(in_w)
                        os.close(in_w)
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                elif key.fd == stdout_fd:
                    printed += len(chunk)
                    output += chunk[: max(0, cap - len(output))]
                    if printed > cap:
                        killed = "output limit"
                else:
                    buffer += chunk
                    killed = _take_frames(buffer, frames, most)
                if killed:
                    break
    finally:
        if in_w in selector.get_map():
            os.close(in_w)
        selector.close()
    return frames, output.decode("utf-8", "replace"), killed


def _take_frames(buffer: bytearray, frames: list[dict[str, Any]], most: int) -> str | None:
    """Move the complete frames at the head of `buffer` into `frames`; "result channel corrupted" if one is
    oversized or not a JSON object, or there are more than `most` (so a forger cannot fill this memory)."""
    while len(buffer) >= 4:
        size = int.from_bytes(buffer[:4], "big")
        if size > MAX_FRAME or len(frames) >= most:
            return "result channel corrupted"
        if len(buffer) < 4 + size:
            return None
        try:
            frame = json.loads(bytes(buffer[4 : 4 + size]))
        except (ValueError, RecursionError):
            frame = None
        if not isinstance(frame, dict):
            return "result channel corrupted"
        frames.append(frame)
        del buffer[: 4 + size]
    return None


def _is_answer(frame: dict[str, Any]) -> bool:
    """The shapes the harness writes: {}, {"value": v}, {"repr": str, "type": str}, {"error": str}."""
    keys = set(frame)
    if keys in (set(), {"value"}):
        return True
    if keys == {"repr", "type"}:
        return isinstance(frame["repr"], str) and isinstance(frame["type"], str)
    return keys == {"error"} and isinstance(frame["error"], str)


def _death(returncode: int | None) -> str:
    if returncode is None:
        return "killed"
    if returncode == -signal.SIGXCPU:
        return "cpu limit"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the whole process group while the leader is unreaped (its id cannot be reused yet), then reap."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
