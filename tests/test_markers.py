"""The test tiers (README, "Run the tests"): a test not marked `slow` starts no process but the sandbox's
interpreter, and tests/conftest.py fails one that does, naming what it started."""

import multiprocessing
import subprocess
import sys

import pytest

from gymflow.sandbox import run_python


def test_a_fast_test_that_starts_a_process_fails_naming_it():
    started = r"test_markers.py::\S+ starts .* -c pass: mark it `slow`"
    with pytest.raises(pytest.fail.Exception, match=started):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_a_fast_test_that_forks_fails():
    worker = multiprocessing.get_context("fork").Process(target=print)
    with pytest.raises(pytest.fail.Exception, match="starts a forked process: mark it `slow`"):
        worker.start()


def test_the_sandbox_may_start_its_interpreter_in_a_fast_test():
    assert run_python("1 + 1").value == 2


@pytest.mark.slow
def test_a_slow_test_may_start_a_process():
    assert subprocess.run([sys.executable, "-c", "print(2)"], capture_output=True, text=True).stdout == "2\n"
