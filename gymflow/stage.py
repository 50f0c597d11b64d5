"""What every stage script shares: one-line errors instead of tracebacks, and metrics files."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gymflow.errors import UserError
from gymflow.store.io import write_text

METRICS_DIR = Path("data/metrics")


def write_metrics(name: str, metrics: dict[str, Any]) -> Path:
    """data/metrics/<name>.json, which `dvc metrics show` reads."""
    path = METRICS_DIR / f"{name}.json"
    write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return path


def run_stage(main: Callable[[], None]) -> None:
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: finished environments are kept; run the stage again to resume", file=sys.stderr)
        sys.exit(130)
