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

import pytest

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


@pytest.mark.slow  # a stage's process
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


class Recorder(io.StringIO):
    """A log file (not a terminal) that notes, for each line, how many episodes had ended when it was written."""

    def __init__(self, ended: list[int]) -> None:
        super().__init__()
        self.ended, self.lines = ended, []

    def write(self, text: str) -> int:
        self.lines += [(self.ended[0], line) for line in text.splitlines() if line.strip()]
        return super().write(text)


class Fixed:
    """A completion backend that always replies the same (the engine's served path, no model needed)."""

    def __init__(self, fmt) -> None:
        self.ids = fmt.encode("Thought: go.\nAction: move up" + fmt.tokenizer.eos_token)

    def complete(self, prompts, max_new_tokens, stop_ids, temperature=1.0, top_p=1.0, seed=None):
        from gymflow.models.sampling import Completion

        return [Completion(list(self.ids), [0.0] * len(self.ids), "stop") for _ in prompts]


@pytest.mark.slow  # a `gymflow serve-env` process
def test_a_served_evaluation_in_one_batch_logs_each_episode_as_it_ends(monkeypatch) -> None:
    """Issue 37, 4.4: one batch of served environments (rollout.env_servers) used to move the bar only when the
    whole batch ended; now a log has a line for each episode that ends, written when it ends."""
    from dataclasses import replace

    import gymflow.progress
    from gymflow.agent.chat import ChatFormat
    from gymflow.envs import make_env
    from gymflow.envs.instructions import build_splits
    from gymflow.envs.maze import Maze
    from gymflow.models.tokenizer import train_tokenizer
    from gymflow.remote.env_client import HttpEnv
    from gymflow.remote.env_server import running
    from gymflow.rollout.engine import SamplingConfig, rollout
    from gymflow.rollout.expert import run_expert

    tasks = build_splits(Maze, 4, 0, seed=0)["train"]
    texts = [m.text for t in tasks for m in run_expert(make_env("maze"), t).messages]
    fmt = ChatFormat(train_tokenizer(texts * 3, 400))
    last_turn = {t.task_id: k + 1 for k, t in enumerate(tasks)}  # episode k ends at turn k + 1
    ended = [0]

    with running("maze", "--n", "4") as url:

        class Ending(HttpEnv):
            def _step(self, action: str):
                step = super()._step(action)
                if self.turns >= last_turn[self.task.task_id]:
                    ended[0] += 1
                    return replace(step, done=True)
                return step

        log = Recorder(ended)
        monkeypatch.setattr(sys, "stderr", log)
        monkeypatch.setattr(gymflow.progress, "LOG_INTERVAL", 0.0)  # a line per change, not every 30 s
        cfg = SamplingConfig(temperature=0.0, max_new_tokens=24, max_length=1024, batch_size=len(tasks))
        episodes = rollout(Fixed(fmt), fmt, [(t, 0) for t in tasks], cfg, 10, make=lambda n: Ending(n, [url]))
    assert [ep.turns for ep in episodes] == [1, 2, 3, 4]
    assert all("\r" not in line for _, line in log.lines)
    for n in range(1, len(tasks)):  # before the last episode ends, a line says how many have
        assert any(at == n and f"{n}/4" in line for at, line in log.lines), log.getvalue()
    assert "rollout maze" in log.lines[0][1] and "4/4" in log.lines[-1][1]


def test_a_postfix_change_prints_a_line_once_the_interval_has_passed() -> None:
    """A batch whose episodes all end together still shows in a log that it plays on: the turn in the postfix."""
    out = io.StringIO()
    b = bar(total=10, desc="rollout", file=out, interval=0)
    for turn in range(1, 4):
        b.set_postfix(turn=turn)
    turns = [line.split("turn=")[-1].rstrip("]") for line in out.getvalue().splitlines()[1:]]
    assert turns == ["1", "2", "3"]
    b.close()


@pytest.mark.slow  # the stage's forked workers
def test_trajectories_log_each_environment_as_it_plays(tmp_path, monkeypatch) -> None:
    """Issue 37, 4.4: AgentTraj's bars (rich) printed only at the end in a log; now every task played is a
    line on stderr, per environment, before the stage ends."""
    import gymflow.progress
    from gymflow.envs.instructions import build_splits
    from gymflow.envs.maze import Maze
    from gymflow.envs.wordle import Wordle
    from gymflow.rollout.agenttraj import gather_trajectories
    from gymflow.rollout.records import RunInfo

    tasks = {
        "maze": build_splits(Maze, 3, 0, seed=0)["train"],
        "wordle": build_splits(Wordle, 2, 0, seed=0)["train"],
    }
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(gymflow.progress, "LOG_INTERVAL", 0.0)
    gather_trajectories(tasks, tmp_path / "r", tmp_path / "j", RunInfo("r", "trajectories", 0, "expert"))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert all(line.strip().startswith(("maze:", "wordle:")) for line in lines), lines  # no cursor moves
    for env, n in (("maze", 3), ("wordle", 2)):
        mine = [line for line in lines if line.strip().startswith(f"{env}:")]
        assert [f"{k}/{n}" in line for k, line in enumerate(mine[: n + 1])] == [True] * (n + 1), lines
