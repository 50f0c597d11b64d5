"""Progress bars: whole lines, now and then, in a log file; redrawn in place on a terminal."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import struct
import subprocess
import sys
import termios
import textwrap

from gymflow.progress import bar


def test_log_file_gets_few_whole_lines() -> None:
    out = io.StringIO()  # not a terminal
    b = bar(total=5000, desc="rollout", unit="ep", file=out, interval=3600)
    for _ in range(5000):
        b.update()
        b.set_postfix(tok_s="123")  # would force a redraw per call in plain tqdm
    b.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 2  # the start and the end: nothing in between, an hour apart
    assert lines[0].startswith("rollout:   0%")
    assert "5000/5000" in lines[-1] and "tok_s=123" in lines[-1]


def test_iterable_bar_in_a_log_file() -> None:
    out = io.StringIO()
    assert sum(bar(range(100), desc="steps", file=out, interval=3600)) == sum(range(100))
    assert "\r" not in out.getvalue()
    assert "100/100" in out.getvalue().splitlines()[-1]


def test_terminal_bar_redraws_in_place() -> None:
    leader, follower = os.openpty()
    fcntl.ioctl(
        follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0)
    )  # a terminal 100 columns wide
    os.set_blocking(leader, False)
    chunks = []
    with os.fdopen(follower, "w") as tty:
        b = bar(total=50, desc="rollout", file=tty, mininterval=0)
        for _ in range(50):
            b.update()
            tty.flush()
            with contextlib.suppress(BlockingIOError):
                chunks.append(os.read(leader, 65536))  # read as it goes: a pty's buffer is small
        b.close()
        tty.flush()
        with contextlib.suppress(BlockingIOError):
            chunks.append(os.read(leader, 65536))
    os.close(leader)
    text = b"".join(chunks).decode()
    assert text.count("\r") > 10  # every update redraws the same line
    assert "50/50" in text


STAGE = """
import datasets
from gymflow.progress import bar
from gymflow.stage import run_stage

def main():
    rows = datasets.Dataset.from_dict({"x": list(range(3000))})
    rows.map(lambda r: {"y": r["x"] * 2}, batch_size=10)  # datasets draws a bar for this
    for _ in bar(range(1000), desc="our bar"):
        pass

run_stage(main)
"""


def test_stage_log_has_no_carriage_returns(tmp_path) -> None:
    log = tmp_path / "stage.log"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DISABLE_PROGRESS_BARS")}
    with log.open("w") as f:
        subprocess.run(
            [sys.executable, "-c", textwrap.dedent(STAGE)], stderr=f, env=env, check=True, timeout=120
        )
    text = log.read_text()
    assert "\r" not in text
    assert "Map" not in text  # datasets' bar is off in a log file
    lines = [line for line in text.splitlines() if "our bar" in line]
    assert len(lines) == 2 and "1000/1000" in lines[-1]
