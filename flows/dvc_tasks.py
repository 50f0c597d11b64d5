"""DVC from Prefect: the one place the flows run `dvc`, so that `dvc.lock` stays the record of what was built
and DVC, not Prefect, decides what is up to date."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import get_run_logger, task  # noqa: E402 (after the analytics switches)


def dvc(args: list[str], repo: str) -> str:
    """Run `dvc <args>` in the repository, log its output, and raise with its errors if it failed."""
    out = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True)
    get_run_logger().info(out.stdout[-4000:])
    if out.returncode:
        raise RuntimeError(f"dvc {' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return out.stdout


@task(retries=2, retry_delay_seconds=10)
def repro(stage: str, repo: str) -> str:
    """One DVC stage (or a foreach group of them), alone (`-s`): its dependencies were run by the tasks before it."""
    dvc(["repro", "-s", stage], repo)
    return stage
