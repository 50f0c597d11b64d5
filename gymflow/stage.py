"""What every stage script shares: one-line errors instead of tracebacks, and metrics files."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gymflow.config import Params
from gymflow.errors import UserError
from gymflow.progress import quiet_hf_progress
from gymflow.store.io import write_text

METRICS_DIR = Path("data/metrics")
T = TypeVar("T")
T = TypeVar("T")


def write_metrics(name: str, metrics: dict[str, Any]) -> Path:
    """data/metrics/<name>.json, which `dvc metrics show` reads."""
    path = METRICS_DIR / f"{name}.json"
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


def run_stage(main: Callable[[], None], resume_note: str = "nothing is kept; run the stage again") -> None:
    """Run a stage's `main`: a user's mistake is one line (exit 2); Ctrl-C prints `resume_note`, what the stage
    keeps and what a rerun does (exit 130, as a shell reports SIGINT)."""
    quiet_hf_progress()  # Hugging Face's bars would fill a log file with carriage-return fragments
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"interrupted: {resume_note}", file=sys.stderr)
        sys.exit(130)


def required(section: T | None, name: str) -> T:
    """A section of params.yaml a stage cannot run without, or a one-line error saying to add it."""
    if section is None:
        raise UserError(f"params.yaml has no `{name}:` section; add one (see the README) to run this stage")
    return section
