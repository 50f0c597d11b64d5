"""What the comparison flows share: DVC experiments run one at a time, and their stored metrics read back.

Each variant x seed is one `dvc exp run --temp -n NAME -S ...`; stages whose inputs did not change come from
DVC's cache, so an experiment costs only what its settings change. `finished` reads every completed
experiment of every commit from `dvc exp show --json -A`, so a comparison resumes where it stopped.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact

from flows.dvc_tasks import dvc
from gymflow import paths
from gymflow.store.io import write_text

EVALUATIONS = f"{paths.METRICS}/evaluate/"  # the evaluations' metrics files, as `dvc exp show` names them


@task(tags=["gpu"], retries=1)
def experiment(name: str, overrides: list[str], repo: str, targets: tuple[str, ...] = ()) -> str:
    """One `dvc exp run --temp` of the default pipeline, or of `targets` (e.g. sweet/dvc.yaml)."""
    dvc(["exp", "run", "--temp", "-n", name, *[arg for o in overrides for arg in ("-S", o)], *targets], repo)
    return name


def finished(repo: str, head_name: str, prefix: str = EVALUATIONS) -> dict[str, dict[str, dict]]:
    """The completed experiments of every commit, from `dvc exp show --json -A` (see `completed`)."""

    def output(*cmd: str) -> str:
        return subprocess.run(cmd, cwd=repo, capture_output=True, text=True).stdout

    shown = json.loads(output(sys.executable, "-m", "dvc", "exp", "show", "--json", "-A") or "[]")
    return completed(shown, output("git", "rev-parse", "HEAD").strip(), head_name, prefix)


def completed(
    shown: list[dict], head: str, head_name: str, prefix: str = EVALUATIONS
) -> dict[str, dict[str, dict]]:
    """Experiment name -> metrics file (its path after `prefix`, no .json) -> the metrics it stored (those under `prefix`: by default the
    evaluations, one per policy), skipping queued, running and failed experiments; a later commit's run of a
    name wins. The commit `head` itself (params.yaml as committed) is the experiment `head_name`."""
    found = {}
    for baseline in reversed(shown):  # dvc lists the newest commit first
        revs = [baseline | {"name": head_name}] if baseline["rev"] == head else []
        for exp in baseline.get("experiments") or []:
            if (exp.get("executor") or {}).get("state", "success") == "success":
                revs += exp["revs"]
        for rev in revs:
            metrics = (rev.get("data") or {}).get("metrics") or {}
            found[rev["name"]] = {
                path.removeprefix(prefix).removesuffix(".json"): m["data"]
                for path, m in metrics.items()
                if path.startswith(prefix) and "data" in m
            }
    return found


def overrides(params: dict, settings: dict[str, object]) -> list[str]:
    """`dvc exp run -S` arguments that set each dotted key of `settings` over `params` (params.yaml as loaded).
    DVC merges a dict given with -S into the one in params.yaml, so a dict replaces one key at a time, at any
    depth: the keys `settings` drops are removed (`~key`), the others set, new ones added (`+key`)."""
    out = []
    for key, value in settings.items():
        found, current = _lookup(params, key)
        if isinstance(value, dict) and isinstance(current, dict):
            out += [f"~{key}.{k}" for k in current if k not in value]
            out += overrides(params, {f"{key}.{k}": v for k, v in value.items()})
        else:
            out.append(f"{key}={hydra(value)}" if found else f"+{key}={hydra(value)}")
    return out


def _lookup(params: dict, key: str) -> tuple[bool, object]:
    """Whether dotted `key` is in `params`, and its value there."""
    current: object = params
    for part in key.split("."):
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def hydra(value: object) -> str:
    """A value as a Hydra override writes it: null, booleans in lower case, lists and dicts in flow style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(hydra(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra(v)}" for k, v in value.items()) + "}"
    return str(value)


def cell(values: list[float]) -> str:
    """A mean over seeds, with the range when there is more than one."""
    spread = f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""
    return f"{statistics.mean(values):.2f}{spread}"


def publish(repo: str, name: str, markdown: str, description: str) -> str:
    """A comparison's tables: printed, written to data/compare/<name>.md and posted as a Prefect artifact."""
    write_text(Path(repo) / paths.comparison(name), markdown + "\n")
    key = name.replace("_", "-")  # Prefect: lowercase letters, digits and dashes only
    create_markdown_artifact(key=f"{key}-compare", markdown=markdown, description=description)
    print(markdown)
    return markdown
