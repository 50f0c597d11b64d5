"""Progress bars that read well in a terminal and in a log file.

On a terminal a bar redraws in place. Written to a file or a pipe (`dvc repro > log`, CI), each redraw would be a
carriage-return fragment, tens of thousands of them per stage: there a bar prints a whole line at most every
`LOG_INTERVAL` seconds instead (and one at the start and the end). Hugging Face's own bars (datasets' `map`,
the Trainer's) have no such mode, so `quiet_hf_progress` turns them off where stderr is not a terminal; the
Trainer then prints its logged losses as lines. Every long stage draws its bars here (rollouts, AgentTraj,
DPO, the critic, SWEET's candidates, best-of-N).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import IO, Any, TypeVar

from tqdm import tqdm

LOG_INTERVAL = float(os.environ.get("GYMFLOW_PROGRESS_INTERVAL", "30"))  # seconds between lines in a log file
T = TypeVar("T")


def is_terminal(stream: IO[str] | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


class _Lines:
    """A stream that turns tqdm's `\\r`-redraws into whole lines: each non-blank fragment becomes one line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        for part in text.replace("\r", "\n").split("\n"):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(tqdm):
    """A bar whose postfix and description changes wait for the next line rather than print one each.

    A postfix change (the rollout engine sets one every turn) prints a line once the interval has passed
    since the last one, even where the count has not moved: a long batch whose episodes all end together
    still shows in a log that it plays on."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)
        if refresh and not self.disable:
            now = self._time()
            if now - self.last_print_t >= self.mininterval:
                self.refresh()
                self.last_print_n, self.last_print_t = self.n, now

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)

    def moveto(self, n: int) -> None:
        """Nothing: a log has no lines to move between (a cursor-up code would be a line of its own), and each bar
        of several (AgentTraj's, one per environment) prints whole lines that name it."""


def bar(
    iterable: Iterable[T] | None = None,
    *,
    file: IO[str] | None = None,
    interval: float | None = None,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar (same arguments) on stderr, or `file`: in place on a terminal, else a line every `interval`
    seconds (default `LOG_INTERVAL`)."""
    stream = sys.stderr if file is None else file
    if is_terminal(stream):
        return tqdm(iterable, file=stream, dynamic_ncols=True, **kwargs)
    wait = LOG_INTERVAL if interval is None else interval
    # miniters=1 with maxinterval=inf: the time between lines is `mininterval`, however uneven the updates
    return _LogBar(
        iterable,
        file=_Lines(stream),
        mininterval=wait,
        maxinterval=float("inf"),
        miniters=1,
        ncols=100,
        **kwargs,
    )


def quiet_hf_progress() -> None:
    """Where stderr is not a terminal, turn off the progress bars of Hugging Face datasets, transformers and the
    Hub: for this process (if they are imported already) and for the processes it starts (environment)."""
    if is_terminal():
        return
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
    if "transformers" in sys.modules:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        import huggingface_hub

        huggingface_hub.utils.disable_progress_bars()
