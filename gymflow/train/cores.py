"""Data-parallel training over one machine's CPU cores: the stage's process becomes rank 0 of one process per core.

With bf16's fast matrix products, the rest of a step of the default model (elementwise work, the optimizer,
Python) does not split over a second thread, so SFT trains 1.2x faster as N processes of one thread each than as
one process of N threads; in fp32 under AVX2 kernels both are the same (`benchmarks/sft_processes.py`). The processes
train data-parallel (gloo on 127.0.0.1) exactly as one process does (`gymflow.train.sft`,
tests/test_distributed_train.py). This is `accelerate launch --multi_gpu --num_processes N` without a launcher
process: the stage itself is rank 0, so its progress, errors, Ctrl-C and outputs are the single-process
stage's, and ranks 1..N-1 run its command and die with it (SIGKILL at its death, even a
`kill -9`). A stage already under `accelerate launch` or torchrun (RANK is set) is left as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Literal

import torch

from gymflow.errors import UserError
from gymflow.serving import free_port
from gymflow.workers import die_with_parent


def training_processes(setting: int | Literal["auto"]) -> int:
    """How many training processes `setting` (`sft.processes`) means here: auto is one per usable core on a
    machine without a GPU, and one on a GPU machine (several GPUs: `accelerate launch`, README)."""
    if setting != "auto":
        return setting
    return 1 if torch.cuda.is_available() else len(os.sched_getaffinity(0))


@contextmanager
def over_cores(processes: int, command: list[str]) -> Iterator[None]:
    """Within the block, this process is rank 0 of `processes` one-thread CPU training processes, ranks 1..
    running `command` (this process's own, e.g. `python -m stages.sft`, which enters the same block). Enter it once the stage has checked its inputs (a
    user's mistake is then reported once, by this process). At the block's end the others finish with it; if it
    raises, they are stopped."""
    if processes <= 1 or "RANK" in os.environ:  # one process, or a launcher started this one
        yield
        return
    if torch.cuda.is_available():
        raise UserError(
            f"sft.processes {processes} spreads training over CPU cores, and this machine has a GPU: set it to "
            "auto or 1, or run several GPUs with `accelerate launch --multi_gpu` (README)"
        )
    common = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(processes),
        "LOCAL_WORLD_SIZE": str(processes),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    parent = os.getpid()
    with tempfile.TemporaryFile() as log:  # the other ranks' stderr, shown if one fails
        children = [
            subprocess.Popen(
                command,
                env=os.environ | common | {"RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=lambda: die_with_parent(parent),
            )
            for rank in range(1, processes)
        ]
        os.environ.update(common | {"RANK": "0", "LOCAL_RANK": "0"})
        torch.set_num_threads(1)
        stopping = threading.Event()
        threading.Thread(target=_stop_if_one_fails, args=(children, log, stopping), daemon=True).start()
        try:
            yield
        except BaseException:
            stopping.set()
            for child in children:
                child.kill()
            raise
        for child in children:  # their last step's all-reduce is done: they save nothing and exit
            child.wait()


def _stop_if_one_fails(children: list[subprocess.Popen], log: IO[bytes], stopping: threading.Event) -> None:
    """Rank 0 would otherwise wait for a dead rank's gradients (gloo's timeout is 30 minutes): end the stage
    with that rank's last lines (unless rank 0 is stopping them itself)."""
    for rank, child in enumerate(children, start=1):
        if child.wait() != 0 and not stopping.is_set():
            log.seek(0)
            tail = "\n".join(log.read().decode(errors="replace").splitlines()[-15:])
            print(f"{tail}\nerror: training process {rank} exited with {child.returncode}", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)
