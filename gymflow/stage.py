"""What every stage script shares: one-line errors instead of tracebacks, and metrics files."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from gymflow import paths
from gymflow.config import Params
from gymflow.errors import UserError
from gymflow.progress import quiet_hf_progress
from gymflow.store.io import write_text

ITERATION = {
    "ITERATION": "the AgentEvol iteration, one of evol.iterations in params.yaml"
}  # its stages' argument
T = TypeVar("T")


def write_metrics(name: str, metrics: dict[str, Any]) -> Path:
    """data/metrics/<name>.json, which `dvc metrics show` reads."""
    path = paths.metrics(name)
    write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return path


def main_process() -> bool:
    """Whether this process writes a stage's outputs: the only one, or the first of those `accelerate launch` (or
    torchrun) started, which set RANK."""
    return os.environ.get("RANK", "0") == "0"


def iteration_arg(params: Params, stage: str) -> str:
    """The AgentEvol iteration named on a stage's command line, checked against `evol.iterations`."""
    if params.evol is None or params.sft is None:
        raise UserError("params.yaml needs `sft:` and `evol:` sections for AgentEvol (see the README)")
    names = list(params.evol.iterations)
    if len(sys.argv) != 2 or sys.argv[1] not in names:
        raise UserError(
            f"usage: python -m stages.{stage} ITERATION, with ITERATION one of evol.iterations {names}"
        )
    return sys.argv[1]


def run_stage(
    main: Callable[[], None],
    resume_note: str = "nothing is kept; run the stage again",
    arguments: dict[str, str] | None = None,
) -> None:
    """Run a stage's `main`: a user's mistake is one line (exit 2); Ctrl-C prints `resume_note`, what the stage
    keeps and what a rerun does (exit 130, as a shell reports SIGINT). `--help` describes the stage and its
    `arguments` (name: help; `NAME ...` takes any number) and runs nothing."""
    stage_parser(main, arguments or {}).parse_args()
    quiet_hf_progress()  # Hugging Face's bars would fill a log file with carriage-return fragments
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, as Python's own handler does

    main_thread = threading.current_thread() is threading.main_thread()  # only there can Python set a handler
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        # Code that polls for signals inside C may turn the KeyboardInterrupt into its own error (a DuckDB query
        # raises "Query interrupted"): after a Ctrl-C, any error is the interrupt.
        if not interrupted:
            raise
        print(f"interrupted ({type(e).__name__}: {e}): {resume_note}", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print(f"interrupted: {resume_note}", file=sys.stderr)
        sys.exit(130)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)


def stage_parser(main: Callable[[], None], arguments: dict[str, str]) -> argparse.ArgumentParser:
    """The stage's command line, for `--help` and unknown options: its module's docstring and its positional
    arguments, each optional here, since the stage checks their values against params.yaml itself (its message
    lists the names there are)."""
    module = sys.modules[main.__module__]
    spec = getattr(module, "__spec__", None)
    parser = argparse.ArgumentParser(
        prog=f"python -m {spec.name}" if spec else None,
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, text in arguments.items():
        dest, _, many = name.partition(" ")
        parser.add_argument(dest, nargs="*" if many else "?", help=text)
    return parser


def chosen(options: Collection[str], what: str) -> str:
    """The stage's one argument, which of `options` it runs for (the first when none is given), or a one-line
    error naming them."""
    name = sys.argv[1] if len(sys.argv) > 1 else next(iter(options))
    if name not in options:
        raise UserError(f"no {what} for {name!r}: name one of {', '.join(options)}")
    return name


def required(section: T | None, name: str) -> T:
    """A section of params.yaml a stage cannot run without, or a one-line error saying to add it."""
    if section is None:
        raise UserError(f"params.yaml has no `{name}:` section; add one (see the README) to run this stage")
    return section
