"""The persistent interpreter (gymflow/sandbox/session.py): state lives as long as the session, API calls cross
as plain data to the handler only, and every escape a cell tries ends as a failed cell, never a hung or damaged
parent. Escapes run in the modes of tests/test_sandbox.py ("all", "kernel", "nons")."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gymflow.errors import UserError
from gymflow.sandbox import Limits
from gymflow.sandbox.session import MAX_CALLS, CallRefused, Session
from tests.test_sandbox import MODES, REPO, skip_unless_machine_allows, spawned  # noqa: F401 (spawned: every process reaped, autouse)

pytestmark = pytest.mark.slow  # hostile cells against the sandbox's limits: it waits them out

FAST = Limits(cpu_seconds=4, wall_seconds=3, memory_mb=128, case_seconds=0.5, output_kb=4)


class Recorder:
    """A handler that records its calls and refuses api "fail"."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list, dict]] = []

    def __call__(self, app: str, api: str, args: list, kwargs: dict) -> object:
        self.calls.append((app, api, args, kwargs))
        if api == "fail":
            raise CallRefused(f"404 {app}.{api}: no such thing")
        return {"app": app, "echo": args or kwargs}


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    """The walls a session runs behind, as in tests/test_sandbox.py."""
    skip_unless_machine_allows(request.param)
    return request.param


def open_session(mode: str, handler=None, limits: Limits = FAST) -> Session:
    return Session(handler or Recorder(), limits, MODES[mode])


def test_variables_persist_across_cells_and_die_with_the_session() -> None:
    with open_session("all") as s:
        assert s.run("x = 40").error is None
        assert s.run("x += 2\nprint(x)").output == "42\n"
        # each cell runs in a process of its own: functions and classes cross by value, and read the globals of
        # the namespace they were defined in, as it is now
        s.run("import json\ndef f(a):\n    return a + x\nclass K:\n    def m(self):\n        return f(0)")
        assert s.run("x = 1\nprint(f(1), K().m(), json.dumps([x]))").output == "2 1 [1]\n"
        kept = s.run("g = (i for i in range(3))\nh = 5")
        assert kept.output == "[not kept for the next cell, as they cannot be pickled: g]\n"
        assert s.run("print('g' in dir(), h)").output == "False 5\n"
        pid = s.child.proc.pid
    assert s.child is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: the interpreter is gone, not merely idle
    with open_session("all") as fresh:
        cell = fresh.run("print(x)")
    assert cell.error.startswith("Execution failed.") and "NameError" in cell.error


def test_a_session_started_on_a_thread_that_ends_keeps_its_interpreter() -> None:
    """The harness dies with its parent by the kernel's parent-death signal, which fires when the thread that
    forked it ends: a session started on a pool's thread (the engine stepping episodes at once, a server's
    worker) lost its variables, killed by signal 9, once that thread ended."""
    s = open_session("all")
    try:
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(s.run, "x = 41").result().error is None
        # the pool's thread has ended; the interpreter it asked for has not
        cell = s.run("x += 1\nprint(x)")
        assert (cell.output, cell.error) == ("42\n", None)
    finally:
        s.close()


def test_a_parent_holding_many_descriptors_gets_working_sessions() -> None:
    """The harness's pipes keep the parent's descriptor numbers, which pass the sandbox's RLIMIT_NOFILE (64) in a
    process that holds many (an evaluation with dozens of sessions): every cell of such a session failed, "the
    cell's process exited (code 0)", in the default run's apps evaluation."""
    held = [fd for _ in range(40) for fd in os.pipe()]  # the next pipes the session gets are numbered past 80
    try:
        with open_session("all") as s:
            assert s.run("x = apis.app.echo(1)").error is None
            assert s.run("print(x)").output == "{'app': 'app', 'echo': [1]}\n"
    finally:
        for fd in held:
            os.close(fd)


def test_api_calls_cross_as_data_and_refusals_raise_in_the_cell() -> None:
    handler = Recorder()
    with Session(handler, FAST) as s:
        cell = s.run("r = apis.venmo.login('me', password='pw')\nprint(r['echo'])")
        assert cell.error is None and cell.calls == 1
        assert cell.output == "['me']\n"
        assert handler.calls == [("venmo", "login", ["me"], {"password": "pw"})]
        failed = s.run("x = 1\napis.phone.fail(query='a')")
        assert failed.error == (
            "Execution failed. Traceback:\n  line 2, in <module>\n    apis.phone.fail(query='a')\n"
            "Exception: 404 phone.fail: no such thing"
        )
        # not plain data: refused in the child, the handler never sees it
        odd = s.run("apis.phone.send(message=object())")
        assert "TypeError: apis.phone.send: arguments must be plain data" in odd.error
        nan = s.run("apis.phone.send(amount=float('nan'))")
        assert "arguments must be plain data" in nan.error
        assert len(handler.calls) == 2
        # the refusal is an ordinary exception: the cell can catch it and go on
        caught = s.run("try:\n    apis.phone.fail()\nexcept Exception as e:\n    print('caught', e)")
        assert caught.error is None and caught.output == "caught 404 phone.fail: no such thing\n"


def test_output_is_captured_per_cell_and_capped() -> None:
    with open_session("all") as s:
        assert s.run("print('a')").output == "a\n"
        assert s.run("import sys\nprint('b', file=sys.stderr)").output == "b\n"
        long = s.run("print('x' * 10000)")
    assert long.output.startswith("x" * 4096)
    assert long.output.endswith(f"[{10001 - 4096} more characters not shown]")


def test_a_cell_that_prints_without_end_is_stopped_by_its_time_limit_and_the_session_goes_on() -> None:
    with open_session("all") as s:
        # far more than output_kb, each write allowed
        flood = s.run("while True:\n    print('x' * 1_000_000)")
        assert s.run("print(1)").output == "1\n"
    assert flood.error is not None and "TimeoutError" in flood.error
    assert flood.output.startswith("x" * 4096) and "more characters not shown]" in flood.output


def test_a_refused_call_loop_is_bounded() -> None:
    # time enough for 1,000 calls on loaded CPUs: the bound on calls is what stops this cell
    roomy = Limits(cpu_seconds=20, wall_seconds=15, memory_mb=128, case_seconds=10, output_kb=4)
    with open_session("all", limits=roomy) as s:
        cell = s.run(f"for i in range({MAX_CALLS} + 5):\n    r = apis.a.b(i)")
    assert cell.calls == MAX_CALLS
    assert f"too many API calls in one cell (at most {MAX_CALLS})" in cell.error


# ---- escapes ------------------------------------------------------------------------------------------------
WORLD_FILE = REPO / "gymflow" / "envs" / "apps" / "world.py"


@pytest.mark.parametrize(
    "code, refusal",
    [
        (f"print(open({str(WORLD_FILE)!r}).read()[:50])", ("PermissionError", "FileNotFoundError")),
        (f"import os; print(os.listdir({str(REPO)!r}))", ("PermissionError", "FileNotFoundError")),
        ("import gymflow.envs.apps.world", ("ModuleNotFoundError",)),
        ("import socket; s = socket.socket(); s.connect(('127.0.0.1', 9))", ("PermissionError", "OSError")),
        ("import os; os.fork()", ("PermissionError", "BlockingIOError")),
        (
            "import subprocess; subprocess.run(['ls'])",
            ("PermissionError", "FileNotFoundError", "BlockingIOError"),
        ),
        ("x = bytearray(1 << 30)", ("MemoryError", "memory limit")),
        ("open('big', 'wb').write(b'0' * (2 << 20))", ("File too large", "PermissionError")),  # nons: none
    ],
    ids=["world-file", "list-project", "import-world", "socket", "fork", "subprocess", "memory", "file-size"],
)
def test_escapes_fail_as_cells_and_the_interpreter_lives_on(mode: str, code: str, refusal: tuple) -> None:
    handler = Recorder()
    with open_session(mode, handler) as s:
        s.run("kept = 7")
        cell = s.run(code)
        assert cell.error is not None and cell.error.startswith("Execution failed.")
        assert any(word in cell.error for word in refusal), cell.error
        assert s.run("print(kept)").output == "7\n"
    assert handler.calls == []


def test_time_bombs_stop_at_the_limits(mode: str) -> None:
    with open_session(mode, limits=Limits(cpu_seconds=4, wall_seconds=1.5, case_seconds=0.5)) as s:
        s.run("kept = 1")
        python_loop = s.run("while True:\n    pass")
        assert python_loop.error.endswith("TimeoutError: the cell ran out of time")
        assert not python_loop.restarted and s.run("print(kept)").output == "1\n"
        # with SIGALRM blocked nothing inside stops the loop: the harness kills the cell's process, and the
        # variables are as the cell found them
        blocked = s.run(
            "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\nkept = 2\nwhile True:\n"
            "    pass"
        )
        assert (
            not blocked.restarted
            and "ran out of time; the variables are as before this cell" in blocked.error
        )
        assert s.run("print(kept)").output == "1\n"


def test_forged_frames_reach_no_further_than_honest_calls() -> None:
    handler = Recorder()
    with Session(handler, FAST) as s:
        out_fd = "int(__import__('sys').argv[2])"
        garbage = s.run(f"import os; os.write({out_fd}, b'\\x00\\x00\\x00\\x05notjs')")
        assert not garbage.restarted and "the cell wrote a malformed frame" in garbage.error
        # a call frame written by hand is just a call: same handler, same plain data
        forged = s.run(
            "import os, json\nd = json.dumps({'call': ['phone', 'x', [1], {}], 'id': 99}).encode()\n"
            f"os.write({out_fd}, len(d).to_bytes(4, 'big') + d)\nprint('sent')"
        )
        assert forged.error is None and forged.output == "sent\n"
        assert handler.calls == [("phone", "x", [1], {})]
        # a flood of calls whose replies are never read: the parent queues a bounded amount, then kills
        flood = s.run(
            "import os, json\nd = json.dumps({'call': ['a', 'b', ['y' * 60000], {}], 'id': 1}).encode()\n"
            f"fd = {out_fd}\nwhile True:\n    os.write(fd, len(d).to_bytes(4, 'big') + d)"
        )
        assert not flood.restarted and "too many replies unread" in flood.error
        assert s.run("print('alive')").output == "alive\n"


# ---- a turn ends when the harness says so, and nothing a cell started acts after it ------------------------
# The cell shares its process with the harness, so it can write frames on the harness's pipe and find the
# request the harness is serving (its frames' locals). These attacks are the issue's: a forged "done", then
# code that goes on running; timers, signal handlers and hooks that fire in a later turn.
WRITE = "import os, json, sys\ndef write(obj):\n    d = json.dumps(obj).encode()\n    os.write(int(sys.argv[2]), len(d).to_bytes(4, 'big') + d)\n"
DIG = (  # the request the harness is serving, found on its stack; what a forger echoes from it
    "f, req = sys._getframe(), {}\nwhile f is not None:\n"
    "    req = next((v for v in f.f_locals.values() if isinstance(v, dict) and 'cell' in v), req)\n"
    "    f = f.f_back\nextra = {k: v for k, v in req.items() if k != 'cell'}\n"
)
SLOW = Limits(cpu_seconds=8, wall_seconds=4, memory_mb=128, case_seconds=1.5, output_kb=4)


def test_a_forged_done_frame_is_not_the_output() -> None:
    handler = Recorder()
    with Session(handler, FAST) as s:
        s.run("kept = 1")
        cell = s.run(WRITE + DIG + "kept = 2\nwrite({'done': {'output': 'FORGED', 'error': None, **extra}})")
        assert "FORGED" not in cell.output
        assert not cell.restarted and "the cell wrote a malformed frame" in cell.error
        assert s.run("print(kept)").output == "1\n"  # a broken turn leaves the namespace as it found it


AFTER_FORGERY = {
    "returns": "",  # the harness's own done frame follows the forged one
    "calls-later": "import time\ntime.sleep(0.3)\napis.supervisor.complete_task()",
    "calls-at-next-request": "import select\nselect.select([int(sys.argv[1])], [], [])\napis.supervisor.complete_task()",
    "prints-later": "import time\ntime.sleep(0.3)\nprint('LATE')",
}
# a done frame as the cell's harness writes one (an empty state: the next cell starts with no names)
FORGED_DONE = "write({'done': True, 'error': None, 'state': ''})\n"


@pytest.mark.parametrize("then", list(AFTER_FORGERY), ids=list(AFTER_FORGERY))
def test_a_well_forged_done_ends_the_turn_with_what_it_printed_and_nothing_after_it_counts(then: str) -> None:
    handler = Recorder()
    with Session(handler, SLOW) as s:
        forger = WRITE + DIG + "print('printed')\n" + FORGED_DONE
        cell = s.run(forger + "import time\ntime.sleep(0.2)\n" + AFTER_FORGERY[then])
        # the turn ends at the done frame, with what the process wrote until then; the process is killed there
        assert cell.output == "printed\n" and cell.error is None and not cell.restarted
        time.sleep(0.8)  # were the forger's continuation alive, it would act now, between turns
        after = [s.run("print('next')"), s.run("print('ok')")]
        assert [c.output for c in after] == ["next\n", "ok\n"] and not any(c.restarted for c in after)
    assert handler.calls == []


def test_a_forger_that_reads_the_pipe_finds_no_request_to_take() -> None:
    """After a forged done, code that reads the next request off the pipe it was given would, if it shared the
    harness's process, start that turn itself and call APIs in it. Its process holds no pipe to the parent and
    is killed at the done frame, so the next cell is the one sent, and no call is made."""
    handler = Recorder()
    with Session(handler, SLOW) as s:
        s.run(
            WRITE + DIG + FORGED_DONE + "import __main__\nreq = __main__.read_frame(int(sys.argv[1]))\n"
            "write({'start': req['token']})\napis.supervisor.complete_task()"
        )
        assert s.run("print('next')").output == "next\n"
    assert handler.calls == []


ARMED = (
    "import signal, sys, time\nt0 = time.monotonic()\ndef act(*args):\n    apis.supervisor.complete_task()\n"
)
LATER = "def later(*args):\n    if time.monotonic() > t0 + 0.3:\n        apis.supervisor.complete_task()\n"
LATER_HOOK = LATER.replace(
    "        apis.", "        sys.setprofile(None)\n        sys.settrace(None)\n        apis.", 1
)
TIMERS = {  # what arms, then what the next cell does (after a 0.4 s pause) to let it act
    "itimer-real": (
        "signal.signal(signal.SIGALRM, act)\nsignal.setitimer(signal.ITIMER_REAL, 0.2)",
        "time.sleep(2)",
    ),
    "alarm": ("signal.signal(signal.SIGALRM, act)\nsignal.alarm(1)", "time.sleep(2)"),
    "itimer-virtual": (
        "signal.signal(signal.SIGVTALRM, act)\nsignal.setitimer(signal.ITIMER_VIRTUAL, 0.1)",
        "import time\nt = time.process_time()\nwhile time.process_time() < t + 0.3:\n    pass",
    ),
    "itimer-prof": (
        "signal.signal(signal.SIGPROF, act)\nsignal.setitimer(signal.ITIMER_PROF, 0.1)",
        "import time\nt = time.process_time()\nwhile time.process_time() < t + 0.3:\n    pass",
    ),
    "sigio-on-request": (
        "import fcntl, os\nfd = int(sys.argv[1])\nsignal.signal(signal.SIGIO, act)\n"
        "fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())\n"
        "fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)",
        "x = 1",
    ),
    "setprofile": (LATER_HOOK + "sys.setprofile(later)", "len([])"),
    "settrace": (LATER_HOOK + "sys.settrace(later)", "def f():\n    return 1\nf()"),
    "gc-callback": (LATER + "import gc\ngc.callbacks.append(later)", "x = [[] for _ in range(100000)]"),
    "audit-hook": (LATER + "sys.addaudithook(later)", "x = 1"),
    "finalizer": (
        "class Bomb:\n    def __del__(self):\n        act()\nb = Bomb()\nb.me = b\ndel b",
        "x = [[] for _ in range(100000)]",
    ),
}


@pytest.mark.parametrize("arm, trigger", list(TIMERS.values()), ids=list(TIMERS))
def test_nothing_a_cell_arms_acts_in_a_later_turn(arm: str, trigger: str) -> None:
    handler = Recorder()
    with Session(handler, SLOW) as s:
        s.run(ARMED + arm)
        during = len(handler.calls)  # what it did in its own turn (a finalizer may run there) is its own
        time.sleep(0.4)
        later = [s.run(trigger), s.run("print('ok')")]
        assert handler.calls[during:] == []
        assert later[-1].output == "ok\n" and not any(cell.restarted for cell in later)


def test_a_cells_signal_mask_handlers_and_streams_do_not_outlive_it() -> None:
    with open_session("all") as s:
        cell = s.run(
            "import faulthandler, signal, sys, io\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n"
            "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\nfaulthandler.register(signal.SIGALRM, chain=True)\n"
            "sys.stdout = io.StringIO()"
        )
        assert cell.error is None
        assert s.run("print('seen')").output == "seen\n"
        loop = s.run("while True:\n    pass")  # the case timer works again: a timeout, not a killed process
        assert not loop.restarted and loop.error.endswith("TimeoutError: the cell ran out of time")
        assert "Current thread" not in loop.output  # faulthandler's traceback on SIGALRM is gone
        killed = s.run("import os, signal\nos.kill(os.getpid(), signal.SIGUSR1)")
        assert not killed.restarted and "signal 10" in killed.error  # SIGUSR1's default action is back


def test_a_session_runs_one_thread_and_outlives_its_cells() -> None:
    with pytest.raises(UserError, match="processes"):
        Session(Recorder(), Limits(processes=2))
    with pytest.raises(UserError, match="wall_seconds"):
        Session(Recorder(), Limits(wall_seconds=1, case_seconds=0.8))


def test_a_reply_left_half_sent_at_done_is_finished_before_the_next_cell() -> None:
    """A reply bigger than the pipe, to a call whose cell ended without reading it (a frame written by hand, or
    a call that ran out of time), is finished at the next turn, where the harness skips it whole."""
    with Session(lambda *call: "y" * 300_000, FAST) as s:
        cell = s.run(
            WRITE + "x = 1\nwrite({'call': ['a', 'b', [], {}], 'id': 99})\nimport time\ntime.sleep(0.2)"
        )
        assert cell.error is None and cell.calls == 1
        after = s.run("print(x)")
        assert after.output == "1\n" and not after.restarted
