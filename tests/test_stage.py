"""`run_stage`: Ctrl-C is exit 130 with the stage's resume note wherever it lands, even inside a DuckDB query
(which turns the KeyboardInterrupt into its own error); any other error stays a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Python process per case

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import os, signal, sys, threading, time
import duckdb
from gymflow.stage import run_stage

def main():
    case = os.environ["CASE"]
    if case == "fail":
        raise RuntimeError("a bug")
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    if case == "duckdb":
        duckdb.sql("SELECT sum(i * i % 7) FROM range(100000000000) t(i)").fetchall()  # the signal lands inside
    else:
        time.sleep(60)

run_stage(main, resume_note="kept: nothing")
"""


def stage(case: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=os.environ | {"CASE": case},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ctrl_c_inside_a_duckdb_query_is_an_interrupt_with_the_resume_note():
    done = stage("duckdb")
    assert done.returncode == 130, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("interrupted") and line.endswith("kept: nothing")


def test_ctrl_c_in_python_is_an_interrupt():
    done = stage("sleep")
    assert (done.returncode, done.stderr) == (130, "interrupted: kept: nothing\n")


def test_an_error_without_ctrl_c_is_a_traceback():
    done = stage("fail")
    assert done.returncode == 1 and "Traceback" in done.stderr and "RuntimeError: a bug" in done.stderr
