"""DVC from Prefect: the one place the flows run `dvc`, so that `dvc.lock` stays the record of what was built
and DVC, not Prefect, decides what is up to date.

A stage runs here (`dvc repro -s STAGE` in this checkout) or, with `pools`, on a work pool: a flow run of the
`gymflow-stage` deployment (flows/stage.py) of gymflow-gpu for a task tagged `gpu`, of gymflow-cpu otherwise,
on whichever machine's worker takes it. That run gets this checkout's dvc.lock, brings the stage up to date
there (pulling from the DVC remote what it lacks), pushes the stage's outputs and returns its dvc.lock, which
replaces ours. DVC decides what is stale, Prefect where it runs, and the DVC remote carries the data between
machines. Stages run one at a time, so the dvc.lock a run returns is ours plus that stage's entries.

The metrics and plots files are `cache: false` (in git, so a fresh clone shows the committed run), and a DVC
remote never carries such a file: they travel with the lock instead, both ways (`carried`, `place`), so the
machine that runs `control` or `compare` has the metrics of the stages before it, and the pipeline's checkout
gets back the ones its stages wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import get_run_logger, task  # noqa: E402 (after the analytics switches)
from prefect.context import TaskRunContext  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402

from gymflow.errors import UserError  # noqa: E402
from gymflow.store.io import atomic_path, write_text  # noqa: E402

# the work pool of each kind of stage (prefect.yaml deploys the stage flow to both)
POOLS = {"cpu": "gymflow-cpu", "gpu": "gymflow-gpu"}


def dvc(args: list[str], repo: str) -> str:
    """Run `dvc <args>` in the repository, log its output, and raise with its errors if it failed."""
    out = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True)
    get_run_logger().info(out.stdout[-4000:])
    if out.returncode:
        raise RuntimeError(f"dvc {' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return out.stdout


def git_commit(repo: str) -> str | None:
    """The checkout's git commit (None outside git): a stage run on another machine must run the same code."""
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def has_remote(repo: str) -> bool:
    """Whether the project names a default DVC remote (`dvc remote add -d`)."""
    from dvc.repo import Repo

    with Repo(repo) as project:
        return bool(project.config["core"].get("remote"))


def bring_up_to_date(stage: str, remote: bool = True) -> list[list[str]]:
    """The dvc commands that make `stage` current on a machine that may hold none of the data, under the
    pipeline's dvc.lock. Not `-s`: DVC needs the upstream stages' lock entries to see that a dependency it
    lacks here changed (`repro --pull -s` skips such a stage and checks out its stale outputs). With
    `--allow-missing`, an up-to-date stage is skipped without downloading anything, and a stale one pulls just
    its missing dependencies before it runs. Its `persist` outputs are not pulled: it rebuilds them whole.
    Without a `remote` (every worker in one checkout, on one machine) there is nothing to pull or push."""
    if not remote:
        return [["repro", stage]]
    return [["repro", "--pull", "--allow-missing", stage], ["push", stage]]


def uncached_outputs(repo: str) -> set[str]:
    """The `cache: false` outputs of the project's pipelines (dvc.yaml, sweet/dvc.yaml), relative to `repo`:
    the files no DVC remote carries."""
    from dvc.repo import Repo

    root = Path(repo).resolve()
    with Repo(repo) as project:
        return {
            Path(out.fs_path).resolve().relative_to(root).as_posix()
            for out in project.index.outs
            if not out.use_cache
        }


def recorded(lock: str | None) -> set[str]:
    """Every output path a dvc.lock's text records."""
    stages = (yaml.safe_load(lock) or {}).get("stages", {}) if lock else {}
    return {out["path"] for entry in stages.values() for out in entry.get("outs", [])}


def carried(repo: str, lock: str | None) -> dict[str, str]:
    """The `cache: false` outputs that `lock` (a dvc.lock's text) records and that exist here, path -> their
    bytes as UTF-8 text: what travels with the lock between machines (`place` writes them at the other end)."""
    files = {}
    for path in sorted(uncached_outputs(repo) & recorded(lock)):
        file = Path(repo) / path
        if file.is_dir():
            raise UserError(f"{path} is a `cache: false` folder: only files travel with dvc.lock; cache it")
        if file.exists():
            try:
                files[path] = file.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{path} is `cache: false` but not UTF-8 text: cache it") from None
    return files


def place(repo: str, files: dict[str, str]) -> None:
    """Write `files` (`carried` on another machine) here, each whole or not at all; a file already holding
    those bytes is left as it is. Only `cache: false` outputs of this checkout's pipelines are written."""
    allowed = uncached_outputs(repo)
    if stray := sorted(set(files) - allowed):
        raise UserError(f"{stray[0]!r} is not a `cache: false` output of dvc.yaml here: not written")
    for path, text in files.items():
        file, data = Path(repo) / path, text.encode("utf-8")
        if file.is_file() and file.read_bytes() == data:
            continue
        with atomic_path(file) as tmp:
            tmp.write_bytes(data)


def pull_outputs(repo: str, prefix: str) -> None:
    """Pull the outputs under `prefix` (e.g. data/metrics/evaluate) that stages on other machines built, for a
    flow to read; outputs not built yet are skipped. `cache: false` ones came back with the lock (`on_pool`)."""
    from dvc.repo import Repo

    with Repo(repo) as project:
        under = prefix.rstrip("/") + "/"
        outs = [out for out in project.index.outs if (out.def_path + "/").startswith(under) and out.use_cache]
    if outs:
        dvc(["pull", "--allow-missing", *sorted(out.def_path for out in outs)], repo)


def sent(stage: str, repo: str) -> dict[str, object]:
    """The parameters of a stage's run on a pool: the stage, this checkout's dvc.lock and commit, and the
    `cache: false` outputs the lock records (no remote carries them; the run's DVC judges its stage by them)."""
    lock = Path(repo) / "dvc.lock"
    text = lock.read_text() if lock.exists() else None
    return {"name": stage, "lock": text, "commit": git_commit(repo), "files": carried(repo, text)}


def received(repo: str, result: dict[str, object]) -> None:
    """Take what a stage's run returned: its dvc.lock, and the `cache: false` outputs that lock records."""
    place(repo, result["files"])
    write_text(Path(repo) / "dvc.lock", result["lock"])


def on_pool(stage: str, repo: str, kind: str) -> None:
    """Run `stage` as a flow run of the `gymflow-stage/<kind>` deployment and take the dvc.lock and the
    `cache: false` outputs it returns."""
    parameters = sent(stage, repo)
    name = f"{stage} ({kind})"
    run = run_deployment(f"gymflow-stage/{kind}", parameters=parameters, flow_run_name=name, poll_interval=1)
    if not run.state or not run.state.is_completed():
        state = run.state.name if run.state else "no state"
        message = run.state.message if run.state else ""
        raise RuntimeError(f"stage {stage} on {POOLS[kind]} ended {state}: {message}")
    received(repo, run.state.result())


@task(retries=2, retry_delay_seconds=10)
def repro(stage: str, repo: str, pools: bool = False) -> str:
    """One DVC stage (or a foreach group of them), alone (`-s`): its dependencies were run by the tasks before
    it. With `pools`, on the work pool of its kind (gpu if the task is tagged `gpu`, cpu otherwise), where
    `bring_up_to_date` finds those dependencies current in the dvc.lock it is sent."""
    if pools:
        # the tag that holds heavy stages to one GPU slot also routes them to the GPU pool
        on_pool(stage, repo, "gpu" if "gpu" in TaskRunContext.get().task.tags else "cpu")
    else:
        dvc(["repro", "-s", stage], repo)
    return stage
