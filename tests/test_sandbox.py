"""The sandbox (gymflow/sandbox): each escape of issues 26 and 37 ends as a failed case, never a hung or damaged
run.

Escapes run in up to three modes: "all" (what callers get), "kernel" (namespaces, chroot, rlimits and the uid
drop, without Landlock, seccomp or the audit hook) and "nons" (Landlock, seccomp and rlimits, without
namespaces, the uid drop or the audit hook: a machine that allows no namespaces, after the candidate rewrote
the hook's state), so a test fails when either set of kernel walls alone stops holding. The audit hook alone
(rlimits and the hook) is refused by default. A mode is skipped where the machine does not allow its layers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gymflow import sandbox
from gymflow.errors import UserError
from gymflow.sandbox import LAYERS, UID_BASE, Limits, matches, run_python, run_tests

pytestmark = pytest.mark.slow  # hostile code against the sandbox's limits: it waits them out

REPO = Path(__file__).resolve().parents[1]
MODES = {
    "all": LAYERS,
    "kernel": ("nonewprivs", "netns", "chroot", "rlimits", "uid"),
    "nons": ("nonewprivs", "rlimits", "landlock", "seccomp"),
}
NEEDS = {"all": set(), "kernel": {"netns", "chroot", "uid"}, "nons": {"landlock", "seccomp"}}
FAST = Limits(cpu_seconds=1, wall_seconds=5, case_seconds=0.3)


def skip_unless_machine_allows(mode: str) -> None:
    if not NEEDS[mode] <= set(sandbox.layers()):
        pytest.skip(f"this machine gives the sandbox only {sandbox.layers()}")


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    skip_unless_machine_allows(request.param)
    return request.param


@pytest.fixture(autouse=True)
def spawned(monkeypatch: pytest.MonkeyPatch):
    """Record every sandbox process and scratch directory; after the test, none may survive."""
    pids: list[int] = []
    scratch: list[str] = []
    real_popen, real_mkdtemp = subprocess.Popen, sandbox.tempfile.mkdtemp

    class Recording(real_popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pids.append(self.pid)

    def mkdtemp(*args, **kwargs):
        scratch.append(real_mkdtemp(*args, **kwargs))
        return scratch[-1]

    monkeypatch.setattr(sandbox.subprocess, "Popen", Recording)
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", mkdtemp)
    yield pids
    assert _survivors(pids) == [], "a sandbox process (or one it started) outlived its call"
    assert [path for path in scratch if os.path.exists(path)] == []


def _survivors(pids: list[int]) -> list[int]:
    """Processes in the session or process group of a sandbox, or running as a sandbox's uid, that still run
    a second after the call (a SIGKILLed process on a loaded machine dies when next scheduled; a zombie runs
    nothing)."""
    for _ in range(10):
        found = _alive(pids)
        if not found:
            return []
        time.sleep(0.1)
    return found


def _alive(pids: list[int]) -> list[int]:
    ours = set(pids)
    uids = {UID_BASE + pid for pid in pids}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, IndexError):
            continue  # it ended while we looked
        if stat[0] not in "ZX" and (int(stat[2]) in ours or int(stat[3]) in ours or uid in uids):
            found.append(int(entry.name))
    return found


def fn(body: str, params: str = "") -> str:
    """The source of `def f(params):` with `body` indented under it."""
    return f"def f({params}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def run(source: str, cases: list[list], mode: str = "all", limits: Limits = FAST, restarts: int = 2):
    return sandbox._run_tests(source, "f", cases, limits, restarts, MODES[mode])


# ---------------------------------------------------------------------------------------------- behaviour


def test_a_correct_function_passes_and_a_wrong_one_fails() -> None:
    def reference(price: float, tier: str) -> float:
        return round(price * {"gold": 0.8, "silver": 0.9}.get(tier, 1.0), 2)

    cases = [[100, "gold"], [100, "silver"], [59.99, "basic"], [0, "gold"]]
    right = fn("return round(price * {'gold': 0.8, 'silver': 0.9}.get(tier, 1.0), 2)", "price, tier")
    wrong = fn("return round(price * {'gold': 0.8}.get(tier, 1.0), 2)", "price, tier")
    out = run_tests(right, "f", cases)
    assert out.ok and out.error is None
    assert [matches(reference(*args), case) for args, case in zip(cases, out.value, strict=True)] == [
        True
    ] * 4
    out = run_tests(wrong, "f", cases)
    passed = [matches(reference(*args), case) for args, case in zip(cases, out.value, strict=True)]
    assert passed == [True, False, True, True]  # silver is the rule it missed


def test_an_exception_fails_only_its_case() -> None:
    out = run(fn("return 10 // (x - 2)", "x"), [[1], [2], [3]])
    assert out.value == [
        {"value": -10},
        {"error": "ZeroDivisionError: integer division or modulo by zero"},
        {"value": 10},
    ]


def test_a_syntax_error_is_one_line() -> None:
    out = run("def f(x):\n    return (x +\n", [[1]])
    assert not out.ok and out.value is None
    assert out.error.startswith("SyntaxError: ") and "\n" not in out.error
    assert run("x = 1\n", [[1]]).error == "NameError: the code defines no function 'f'"


def test_run_python_gives_the_last_expression_or_the_call() -> None:
    assert run_python("x = 6\nx * 7").value == 42
    assert run_python("print('hi')\n{3, 1, 2}").value == "{1, 2, 3}"  # not JSON data: its repr
    out = run_python("def g(a, b):\n    return {'sum': a + b}", "g", [2, 3])
    assert out.ok and out.value == {"sum": 5}
    out = run_python("def g():\n    raise KeyError('k')", "g", [])
    assert not out.ok and out.error == "KeyError: 'k'"
    assert run_python("import sys\nsys.exit(4)").error == "SystemExit: 4"


def test_encode_compares_like_python_and_never_runs_candidate_equality() -> None:
    assert matches(1, {"value": 1.0}) and matches(True, {"value": 1})  # as `assert f(x) == y` would say
    assert not matches((1, 2), {"value": [1, 2]})  # a tuple is not a list
    assert matches({3, 1, 2}, sandbox.encode({2, 3, 1}))
    assert matches({2: "b", 1: "a"}, sandbox.encode({1: "a", 2: "b"}))
    assert not matches(1, {"error": "timeout"})
    cheat = run(fn("class Yes:\n    def __eq__(self, other):\n        return True\nreturn Yes()"), [[]])
    assert not matches(5, cheat.value[0]) and cheat.value[0]["type"] == "candidate.f.<locals>.Yes"


def test_limits_are_checked() -> None:
    with pytest.raises(UserError, match="cpu_seconds"):
        Limits(cpu_seconds=0)
    with pytest.raises(UserError, match="memory_mb"):
        Limits(memory_mb=16)


def test_two_sandboxes_run_at_once() -> None:
    source = fn("import os, time\ntime.sleep(0.1)\nreturn [x, os.getuid()]", "x")
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda k: run_tests(source, "f", [[k], [k + 1]]), [10, 20]))
    assert [[case["value"][0] for case in out.value] for out in outs] == [[10, 11], [20, 21]]
    if "uid" in sandbox.layers():  # each sandbox has a uid of its own: neither can signal the other
        assert outs[0].value[0]["value"][1] != outs[1].value[0]["value"][1]


# -------------------------------------------------------------------------------------------- time, memory


def test_an_infinite_loop_fails_only_its_case() -> None:
    out = run(fn("while x == 1:\n    pass\nreturn x", "x"), [[0], [1], [2]])
    assert out.value == [{"value": 0}, {"error": "timeout"}, {"value": 2}]
    assert run("while True:\n    pass\n", [[1]]).error == "timeout"


def test_loops_the_timer_cannot_stop_end_at_the_cpu_limit_and_the_rest_run_anew() -> None:
    swallow = "while x == 1:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"
    out = run(fn(swallow + "if x == 2:\n    sum(range(10**12))\nreturn x", "x"), [[0], [1], [2], [3]])
    assert out.value == [{"value": 0}, {"error": "cpu limit"}, {"error": "cpu limit"}, {"value": 3}]
    out = run(fn("sum(range(10**12))", "x"), [[0], [1]], restarts=0)
    assert out.value == [{"error": "cpu limit"}, {"error": "not run: no restarts left"}]


def test_memory_bombs_fail_their_case_and_the_process_goes_on() -> None:
    body = """
    if x == 0:
        return len(bytearray(10**10))
    if x == 1:
        grow = []
        while True:
            grow.append(" " * 10**6)
    return x
    """
    roomy = Limits(
        cpu_seconds=5, wall_seconds=20, case_seconds=5
    )  # filling 256 MB takes a while on a busy machine
    assert run(fn(body, "x"), [[0], [1], [2]], limits=roomy).value == [{"error": "memory limit"}] * 2 + [
        {"value": 2}
    ]


def test_a_file_bigger_than_file_mb_fails() -> None:
    body = "with open('out.bin', 'wb') as f:\n    return f.write(b'x' * int(mb * 2**20))"
    out = run(fn(body, "mb"), [[2], [0.5]])
    assert out.value[0] == {"error": "OSError: [Errno 27] File too large"} and out.value[1] == {
        "value": 2**19
    }


def test_a_flood_of_output_is_cut_and_its_case_fails() -> None:
    out = run(
        fn(
            "if x == 0:\n    for _ in range(10):\n        print('x' * 10**7)\nif x == 1:\n    while True:\n        print('spam')\nreturn x",
            "x",
        ),
        [[0], [1], [2]],
    )
    assert out.value == [{"error": "output limit"}, {"error": "output limit"}, {"value": 2}]
    assert len(out.stdout) == FAST.output_kb * 1024


def test_exits_and_signals_fail_their_case_with_a_clear_error() -> None:
    body = """
    import os, signal, sys
    if x == 0:
        sys.exit(3)
    if x == 1:
        os._exit(0)
    if x == 2:
        signal.raise_signal(signal.SIGKILL)
    return x
    """
    out = run(fn(body, "x"), [[0], [1], [2], [3]], restarts=3)
    assert out.value == [
        {"error": "SystemExit: 3"},
        {"error": "exited with status 0"},
        {"error": "killed by signal 9"},
        {"value": 3},
    ]


# ------------------------------------------------------------------------------------------------- escapes


def test_fork_bombs_are_refused(mode: str) -> None:
    body = """
    import os
    if x == 0:
        while True:
            if os.fork() == 0:
                os._exit(0)
    if x == 1:
        import subprocess
        subprocess.run(["sh", "-c", "sleep 30 &"])
    if x == 2:
        import multiprocessing
        child = multiprocessing.Process(target=print)
        child.start()
        child.join()
    if x == 3 and os.system("sleep 30 &") != 0:
        return "refused"
    return "forked"
    """
    out = run(fn(body, "x"), [[0], [1], [2], [3]], mode)
    assert out.ok and {"value": "forked"} not in out.value  # and `spawned` finds no process left


def test_native_fork_and_setuid_meet_the_kernel_layers() -> None:
    if not {"netns", "chroot", "uid"} <= set(sandbox.layers()):
        pytest.skip(f"this machine gives the sandbox only {sandbox.layers()}")
    body = (
        "import ctypes\nlibc = ctypes.CDLL(None)\nreturn [libc.fork(), libc.setuid(0), libc.chroot(b'/usr')]"
    )
    assert run(fn(body), [[]], "kernel").value == [{"value": [-1, -1, -1]}]  # ctypes runs: no audit hook here


def test_writes_outside_its_directory_fail_and_leave_files_untouched(mode: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    in_project = REPO / f"sandbox-probe-{uuid.uuid4().hex}.txt"
    in_tmp = Path(f"/tmp/sandbox-probe-{uuid.uuid4().hex}")
    body = f"""
    import os, shutil
    if x == 0:
        open({str(victim)!r}, "w").write("gone")
    if x == 1:
        open({str(in_project)!r}, "w").write("new")
    if x == 2:
        os.remove({str(victim)!r})
    if x == 3:
        os.rename({str(victim)!r}, {str(victim)!r} + ".moved")
    if x == 4:
        os.chmod({str(victim)!r}, 0)
    if x == 5:
        shutil.rmtree({str(tmp_path)!r})
    if x == 6:
        open({str(in_tmp)!r}, "w").write("new")  # under chroot, the private /tmp: allowed, and not the host's
    return "done"
    """
    try:
        out = run(fn(body, "x"), [[k] for k in range(7)], mode)
    finally:
        in_project.unlink(missing_ok=True)
        in_tmp.unlink(missing_ok=True)
    assert all("error" in case for case in out.value[:6]), out.value
    assert victim.read_text() == "keep" and victim.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]
    assert not in_project.exists() and not in_tmp.exists()


def test_sockets_are_refused_and_the_listener_sees_nothing(mode: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        body = f"""
        import socket
        if x == 0:
            socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
        if x == 1:
            s = socket.socket()
            s.settimeout(1)
            s.connect(("127.0.0.1", {port}))
        if x == 2:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", {port}))
        return "connected"
        """
        out = run(fn(body, "x"), [[0], [1], [2]], mode)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert all("error" in case for case in out.value), out.value
    if (
        mode == "all"
    ):  # the hook refuses socket() first; seccomp refuses it too; a netns leaves it nowhere to go
        assert out.value[1]["error"] == "PermissionError: sandbox: socket.__new__ refused"


PROBE = fn(
    """
    import os
    found, read = [], []
    def look(name, data):
        read.append(name)
        if b"gymflow-secret-" in data:
            found.append(name)
    look("os.environ", repr(dict(os.environ)).encode())
    parent = os.getppid()
    for what in ("environ", "cmdline"):
        try:
            look(what, open(f"/proc/{parent}/{what}", "rb").read())
        except OSError:
            pass
    try:
        regions = [line.split()[0].split("-") for line in open(f"/proc/{parent}/maps")]
        with open(f"/proc/{parent}/mem", "rb") as mem:
            for low, high in regions:
                try:
                    mem.seek(int(low, 16))
                    look("mem", mem.read(min(int(high, 16) - int(low, 16), 1 << 24)))
                except (OSError, ValueError, OverflowError):  # unreadable region, or past a signed offset
                    pass
    except OSError:
        pass
    for fd in range(64):
        for read_fd in (lambda: os.pread(fd, 1 << 16, 0), lambda: os.read(fd, 1 << 16)):
            try:
                look(f"fd {fd}", read_fd())
                break
            except OSError:
                pass
    return {"found": found, "read": sorted(set(read))}
    """
)

PARENT = """
import json, os, sys
from gymflow import sandbox
from gymflow.sandbox import Limits
secret, want, probe = sys.argv[1], tuple(sys.argv[2].split(",")), sys.argv[3]
assert secret in open("/proc/self/environ").read() and secret in open("/proc/self/cmdline").read()
held = open(os.environ["SECRET_FILE"])  # an open, inheritable descriptor on a file holding the secret
os.set_inheritable(held.fileno(), True)
reference = {"expected": secret}  # and the secret in this process's memory
out = sandbox._run_tests(probe, "f", [[]], Limits(cpu_seconds=5, wall_seconds=20, case_seconds=10), 0, want)
print(json.dumps({"value": out.value, "stdout": out.stdout, "error": out.error}))
"""


def _probe_parent(layers: tuple[str, ...], tmp_path: Path, trusted: bool = False) -> tuple[str, dict]:
    """Start a parent holding a secret in its environment, argv, memory and an open descriptor; return the
    secret and what the probe, sandboxed by that parent, found."""
    secret = f"gymflow-secret-{uuid.uuid4().hex}"
    secret_file = tmp_path / "reference.txt"
    secret_file.write_text(secret)
    env = {**os.environ, "GYMFLOW_TEST_SECRET": secret, "SECRET_FILE": str(secret_file)}
    env.pop(sandbox.TRUSTED, None)
    if trusted:
        env[sandbox.TRUSTED] = "trusted"
    shown = subprocess.run(
        [sys.executable, "-c", PARENT, secret, ",".join(layers), PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert secret not in shown
    return secret, json.loads(shown)["value"][0]["value"]


def test_the_parents_secrets_are_out_of_reach(mode: str, tmp_path: Path) -> None:
    _, probed = _probe_parent(MODES[mode], tmp_path)
    assert probed["found"] == [] and "os.environ" in probed["read"]  # it ran, and found nothing


def test_the_probe_finds_secrets_the_walls_do_not_hide(tmp_path: Path) -> None:
    """Without the hook and as the same user as the parent, the probe above does find the secret: it tests."""
    if os.geteuid() != 0:
        pytest.skip("the control needs the parent's /proc entries readable, as root")
    _, probed = _probe_parent(("rlimits",), tmp_path, trusted=True)  # refused unless trusted: see below
    assert {"environ", "cmdline", "mem"} <= set(probed["found"])


def test_printing_or_writing_forged_results_does_not_pass(mode: str) -> None:
    body = """
    import json, os, sys
    forged = json.dumps({"value": 42}).encode()
    frame = len(forged).to_bytes(4, "big") + forged
    print(json.dumps({"value": 42}), "PASS", flush=True)
    sys.stdout.buffer.write(frame)
    sys.stdout.flush()
    for fd in range(3, 64):  # the result pipe is among them: whatever lands there spoils the whole run
        try:
            os.write(fd, frame * 3)
        except OSError:
            pass
    return 41
    """
    out = run(fn(body, "x"), [[0], [1]], mode)
    assert not (out.ok and any(matches(42, case) for case in out.value))
    assert out.error == "result channel corrupted"


# ------------------------------------------------------------------------- the hook is not a wall (issue 37)

DISABLE_HOOK = """
import __main__, gc
__main__.REFUSED_EVENTS = ("no-such-event.",)
__main__.REFUSED_IMPORTS = frozenset()
__main__.MUTATING_EVENTS = {}
for obj in gc.get_objects():
    if callable(obj) and getattr(obj, "__name__", "") == "hook" and getattr(obj, "__closure__", None):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
            if name == "inside":
                cell.cell_contents = lambda path, roots: True
            if name == "me":
                cell.cell_contents = -1
"""


def test_rewriting_the_hooks_state_escapes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37's escape: the hook's closure and the harness's globals are Python state the candidate reaches.
    After rewriting them, ctypes imports, and every host-facing act still fails, with or without namespaces."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    host_file = REPO / "pyproject.toml"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            listener.setblocking(False)
            port = listener.getsockname()[1]
            body = f"""
            import os, signal
            if x == 0:
                return open({str(host_file)!r}).read(64)
            if x == 1:
                open({str(victim)!r}, "w").write("gone")
                return "wrote"
            if x == 2:
                import socket
                socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
                return "connected"
            if x == 3:
                import subprocess
                return subprocess.run(["id"], capture_output=True).stdout.decode()
            if x == 4:
                os.kill({sleeper.pid}, signal.SIGTERM)
                return "signalled"
            if x == 5:
                signal.pidfd_send_signal(os.pidfd_open({sleeper.pid}), signal.SIGTERM)
                return "signalled"
            if x == 6:
                return os.readlink(f"/proc/{{os.getppid()}}/cwd")
            if x == 7:
                return open(f"/proc/{{os.getppid()}}/environ", "rb").read(64).decode()
            if x == 8:
                import ctypes
                libc = ctypes.CDLL(None)
                return [libc.fork(), libc.socket(2, 1, 0), libc.kill({sleeper.pid}, 15)]
            if x == 9:
                import threading
                t = threading.Thread(target=print)
                t.start()
                return "thread"
            return "ran"
            """
            for mode in ("all", "nons"):
                if not NEEDS[mode] <= set(sandbox.layers()):
                    continue
                want = MODES[mode] + ("audit",) if mode == "nons" else MODES[mode]
                out = sandbox._run_tests(
                    DISABLE_HOOK + fn(body, "x"), "f", [[k] for k in range(11)], FAST, 11, want
                )
                assert out.ok and out.value[10] == {"value": "ran"}, (mode, out)  # the rewrite itself worked
                held = out.value[:10]
                assert all("error" in case for case in held[:8]), (mode, held)
                assert held[8] == {"value": [-1, -1, -1]}, (mode, held)  # ctypes loads; the kernel says no
                assert "error" in held[9], (mode, held)  # processes=1: no thread either
            with pytest.raises(BlockingIOError):
                listener.accept()
            # The control: behind the hook alone (trusted), the same rewrite reads the host and its parent
            monkeypatch.setenv(sandbox.TRUSTED, "trusted")
            out = sandbox._run_tests(
                DISABLE_HOOK + fn(body, "x"), "f", [[0], [6]], FAST, 0, ("rlimits", "audit")
            )
            assert out.value == [{"value": host_file.read_text()[:64]}, {"value": os.getcwd()}]
        assert sleeper.poll() is None, "the sandbox signalled a process outside it"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert victim.read_text() == "keep"


def test_the_hook_alone_is_refused_unless_the_code_is_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel layers cannot contain code (here: only rlimits and the hook), nothing runs by default:
    one line says why and what to enable; GYMFLOW_SANDBOX=trusted runs code the user vouches for."""
    hook_only = ("rlimits", "audit")
    monkeypatch.delenv(sandbox.TRUSTED, raising=False)
    marker = "print('ran')\ndef f():\n    return 1\n"
    with pytest.raises(UserError) as refused:
        sandbox._run_tests(marker, "f", [[]], FAST, 0, hook_only)
    line = str(refused.value)
    assert "\n" not in line and "network, files, processes and signals" in line
    assert "landlock" in line and "seccomp" in line and "GYMFLOW_SANDBOX=trusted" in line
    from gymflow.sandbox.session import Session

    with pytest.raises(UserError, match="refusing to run"):
        Session(lambda *a: None, FAST, hook_only).run("print('ran')")
    monkeypatch.setenv(sandbox.TRUSTED, "trusted")
    out = sandbox._run_tests(marker, "f", [[]], FAST, 0, hook_only)
    assert out.value == [{"value": 1}] and out.stdout == "ran\n"
    monkeypatch.setenv(sandbox.TRUSTED, "yes")
    with pytest.raises(UserError, match="the only value is 'trusted'"):
        sandbox._run_tests(marker, "f", [[]], FAST, 0, hook_only)


def _bpf(program: bytes, arch: int, nr: int, arg0: int) -> int:
    """A classic-BPF interpreter for the instructions seccomp_program uses, over one seccomp_data."""
    import struct

    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


def test_the_seccomp_program_gives_the_verdicts_worked_out_by_hand() -> None:
    from gymflow.sandbox.child import SYSCALLS, seccomp_program

    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    x86, pid = SYSCALLS["x86_64"][0], 4242
    for threads in (False, True):
        prog = seccomp_program("x86_64", pid, threads)
        verdict = lambda nr, arg0=0, prog=prog: _bpf(prog, x86, nr, arg0)  # noqa: E731
        assert verdict(0) == allow and verdict(1) == allow  # read, write
        assert verdict(41) == eperm and verdict(59) == eperm and verdict(57) == eperm  # socket, execve, fork
        assert verdict(90) == eperm and verdict(272) == eperm  # chmod, unshare
        assert verdict(62, pid) == allow and verdict(62, 0) == allow and verdict(62, pid + 1) == eperm  # kill
        assert verdict(62, (-pid) & (2**64 - 1)) == eperm  # a process group, even its own
        assert verdict(234, pid) == allow and verdict(234, 1) == eperm  # tgkill
        assert verdict(435) == enosys  # clone3: glibc falls back to clone
        assert verdict(56, 0x11) == eperm  # clone for fork (SIGCHLD)
        assert verdict(56, 0x3D0F00) == (allow if threads else eperm)  # clone for a pthread (CLONE_THREAD)
        assert verdict(0x40000000 + 41) == kill  # the x32 ABI
        assert _bpf(prog, SYSCALLS["aarch64"][0], 0, 0) == kill  # a foreign architecture
    arm = seccomp_program("aarch64", pid, False)
    assert _bpf(arm, SYSCALLS["aarch64"][0], 198, 0) == eperm  # socket on aarch64
    assert _bpf(arm, SYSCALLS["aarch64"][0], 129, pid) == allow  # kill of itself
    # a session's harness forks and kills its cells' processes; everything else stays refused
    harness = seccomp_program("x86_64", pid, False, harness=True)
    verdict = lambda nr, arg0=0: _bpf(harness, x86, nr, arg0)  # noqa: E731
    assert verdict(56, 0x11) == allow and verdict(62, pid + 1) == allow  # clone for fork, kill of a cell
    assert verdict(41) == eperm and verdict(59) == eperm and verdict(101) == eperm  # socket, execve, ptrace
    assert verdict(435) == enosys and verdict(0x40000000 + 41) == kill


def test_a_killed_processs_scratch_is_swept_and_a_live_ones_kept(tmp_path, monkeypatch):
    """A process killed before `Child.close` leaves its scratch directory; the next launch removes it, but never
    one whose process still runs."""
    monkeypatch.setattr(sandbox.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead, live = (
        tmp_path / f"gymflow-sandbox-{gone.pid}-ab_c",
        tmp_path / f"gymflow-sandbox-{os.getpid()}-xyz",
    )
    other = tmp_path / "gymflow-sandbox-k2j3h4"  # no pid in the name: not ours to judge
    for path in (dead, live, other):
        (path / "home").mkdir(parents=True)
    sandbox._sweep_dead_scratch.__wrapped__()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
