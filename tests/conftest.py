"""Fixtures shared by the SWEET-RL tests (critic, Best-of-N, actor pairs, DPO), Ctrl-C as a user sends it, and the
fast tier's rule: a test not marked `slow` starts no process but the sandbox's."""

import multiprocessing
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gymflow.sandbox
from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.colbench import ColBench
from gymflow.models.build import build_model
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.expert import run_expert

# A shell starts a background job of a script with SIGINT ignored, and processes started from it inherit that:
# then the stages and `gymflow sql` the Ctrl-C tests interrupt would never see the signal. Ctrl-C as a terminal
# sends it is what those tests check, so the suite restores Python's own handler before it starts any process.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The fast tier (`pytest -m "not slow"`) starts no process of its own (pytest-xdist's workers aside). A test not
# marked `slow` that starts a process (DVC, Chromium, Ray, a JVM, `gymflow`, a forked worker...) fails, naming what
# it started; the sandbox's interpreter, in which colbench and apps grade code, is the one exception (README, "Run
# the tests").
SANDBOX = Path(gymflow.sandbox.__file__).parent
_fast: pytest.Item | None = None  # the test running now, if it is not marked slow


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _fast
    _fast = None if item.get_closest_marker("slow") else item
    yield
    _fast = None


def _refuse(what: str) -> None:
    """Fail the running fast test for starting `what`, unless the sandbox starts it (a few frames up)."""
    frame, depth = sys._getframe(2), 0
    while frame is not None and depth < 6:
        if SANDBOX in Path(frame.f_code.co_filename).parents:
            return
        frame, depth = frame.f_back, depth + 1
    pytest.fail(f"{_fast.nodeid} starts {what[:200]}: mark it `slow` (README, Run the tests)", pytrace=False)


# The openai client's headers read platform.platform(), which runs `uname -p` once per process: here, in no test.
platform.processor()
_popen_init, _fork = subprocess.Popen.__init__, os.fork


def _popen_unless_fast(self, args, *rest, **kwargs):
    if _fast is not None:
        _refuse(" ".join(map(str, args)) if isinstance(args, list | tuple) else str(args))
    _popen_init(self, args, *rest, **kwargs)


def _fork_unless_fast():
    if _fast is not None:
        _refuse("a forked process")
    return _fork()


if not hasattr(subprocess.Popen.__init__, "fast_tier"):  # once, though test_vllm imports this file again
    _popen_unless_fast.fast_tier = True
    subprocess.Popen.__init__ = _popen_unless_fast
    os.fork = _fork_unless_fast


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The fast tier (`pytest -m "not slow"`) runs on every core through pytest-xdist, unless `-n` says otherwise
    (`-n 0`: in this process): under 2 minutes on two cores of the slower Xeon. Set before xdist reads `-n`."""
    fast = config.option.markexpr.replace(" ", "") == "notslow"
    if fast and getattr(config.option, "numprocesses", 0) is None and "PYTEST_XDIST_WORKER" not in os.environ:
        config.option.numprocesses = os.cpu_count() or 1


def pytest_sessionfinish(session, exitstatus):
    """Kill, naming them, the worker processes a test left running and not daemonic: Python's exit waits for
    those forever. CI ran past its 90 minutes after pytest had printed its summary (2026-11-28), most likely
    waiting on a household worker whose game Jericho's C code had found gone and was exiting from."""
    left = [p for p in multiprocessing.active_children() if not p.daemon]
    for p in left:
        p.kill()
        p.join(5)
    if left:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in left)
        print(f"\nkilled processes tests left running: {names}", file=sys.stderr)


# Under pytest-xdist each worker gets its share of the cores as torch threads: with two threads each, two workers
# on two cores took 146 s against 112 s (serial: 196 s).
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))

TINY = ModelConfig(hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=2, max_length=2048)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: the tiny models gain nothing from two on cores other tests share (sampling was 100x
    slower on two oversubscribed ones)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def fmt(request):
    """The chat format of a tokenizer trained on the expert episodes and hidden texts of the requesting test
    module's colbench `TASKS` (a module with a `fmt` of its own uses that)."""
    tasks = request.module.TASKS
    env = make_env("colbench")
    texts = [m.text for t in tasks for m in run_expert(env, t).messages] + [
        ColBench.hidden_text(t) for t in tasks
    ]
    return ChatFormat(train_tokenizer(texts * 3, 500))


@pytest.fixture(scope="module")
def policy(fmt):
    """A tiny random policy over `fmt`'s vocabulary."""
    return build_model(TINY, fmt.tokenizer).eval()
