"""Worker processes that never outlive the stage that started them.

A `kill -9` of a stage kills only the stage: without help, its pool workers would keep playing and write
outputs into a folder whose owner is gone. Every process a stage starts runs `die_with_parent` first.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.managers import SyncManager

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal this process gets when its parent dies
# Workers forked by the stage are its children, which the kernel can tie to it; a fork server's children
# (Python 3.14's default on Linux) would be the server's, and a server outlives a killed stage. Elsewhere
# spawn, the platform's default.
CONTEXT = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def die_with_parent(parent: int) -> None:
    """Process initializer: end this process when `parent` (the stage) dies, and leave Ctrl-C to the stage.

    On Linux the kernel sends SIGKILL at the parent's death (prctl PR_SET_PDEATHSIG); elsewhere, or if that
    call fails, a thread checks once a second that the parent is still ours. The check right after also
    covers a parent that died before the call took effect.
    """
    # A terminal's Ctrl-C reaches the whole process group; the stage decides, and stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = False
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers die with the stage; on an error or Ctrl-C in the stage they are killed
    at once (their unfinished jobs are lost anyway) instead of running their jobs to the end."""
    pool = ProcessPoolExecutor(workers, CONTEXT, initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        # Python 3.14 has pool.kill_workers(); before it, the processes are only reachable here.
        for process in list((pool._processes or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@contextmanager
def manager() -> Iterator[SyncManager]:
    """`multiprocessing.Manager()` (shared queues for progress) whose server process dies with the stage."""
    mgr = SyncManager(ctx=CONTEXT)
    mgr.start(die_with_parent, (os.getpid(),))
    with mgr:
        yield mgr
