"""`sft.processes`: the stage's process as rank 0 of one training process per core (gymflow/train/cores.py). That
two such processes train as one does is tests/test_distributed_train.py's; here, how many there are, and that
the others never outlive or outwait rank 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gymflow.errors import UserError
from gymflow.train import cores
from gymflow.train.cores import over_cores, training_processes

REPO = Path(__file__).resolve().parents[1]


def test_auto_is_one_process_per_usable_core_without_a_gpu_and_one_with(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert training_processes("auto") == 3 and training_processes(1) == 1 and training_processes(4) == 4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert training_processes("auto") == 1


def test_one_process_starts_nothing_and_sets_nothing(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(cores.subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    with over_cores(1, ["unused"]):
        assert "RANK" not in os.environ and "WORLD_SIZE" not in os.environ


def test_a_launched_process_is_left_as_its_launcher_made_it(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(cores.subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    with over_cores(2, ["unused"]):
        assert os.environ["RANK"] == "1"


def test_cores_on_a_gpu_machine_is_a_user_error_that_names_the_fix(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UserError, match="sft.processes 2 .*accelerate launch"), over_cores(2, ["unused"]):
        pass


SCRIPT = """
import os, sys, time
from pathlib import Path
from gymflow.train.cores import over_cores

out = Path(sys.argv[1])
with over_cores(2, [sys.executable, *sys.argv]):
    rank = os.environ["RANK"]
    (out / f"pid{rank}").write_text(str(os.getpid()))
    if rank == "1" and sys.argv[2] == "fail":
        print("rank 1 cannot go on", file=sys.stderr)
        raise SystemExit(3)
    time.sleep(300)
"""


def _start(tmp_path: Path, how: str) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = os.environ | {"PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("RANK", None)
    return subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), how], env=env, stderr=subprocess.PIPE, text=True
    )


def _pid(path: Path) -> int:
    for _ in range(600):
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path.name} was never written")


@pytest.mark.slow  # two Python processes
def test_a_rank_that_fails_ends_rank_0_with_its_message(tmp_path):
    proc = _start(tmp_path, "fail")
    _, err = proc.communicate(timeout=120)  # rank 0 sleeps 300 s unless it is told
    assert proc.returncode == 1
    assert "rank 1 cannot go on" in err and "error: training process 1 exited with 3" in err


@pytest.mark.slow  # two Python processes
def test_the_other_ranks_die_with_rank_0_even_killed(tmp_path):
    proc = _start(tmp_path, "sleep")
    _pid(tmp_path / "pid0")
    other = _pid(tmp_path / "pid1")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for _ in range(200):
        try:
            os.kill(other, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{other}/stat") as stat:  # reaped by init, or a zombie until it is
            if stat.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        os.kill(other, signal.SIGKILL)
        pytest.fail("rank 1 outlived rank 0")
