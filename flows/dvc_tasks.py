"""DVC from Prefect: the one place the flows run `dvc`, so that `dvc.lock` stays the record of what was built
and DVC, not Prefect, decides what is up to date.

A stage runs here (`dvc repro -s STAGE` in this checkout) or, with `pools`, on a work pool: a flow run of the
`gymflow-stage` deployment (flows/stage.py) of gymflow-gpu for a task tagged `gpu`, of gymflow-cpu otherwise,
on whichever machine's worker takes it. That run gets this checkout's dvc.lock, brings the stage up to date
there (pulling from the DVC remote what it lacks), pushes the stage's outputs and returns its dvc.lock, which
replaces ours. DVC decides what is stale, Prefect where it runs, and the DVC remote carries the data between
machines. Stages run one at a time, so the dvc.lock a run returns is ours plus that stage's entries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import get_run_logger, task  # noqa: E402 (after the analytics switches)
from prefect.context import TaskRunContext  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402

from gymflow.errors import UserError  # noqa: E402
from gymflow.store.io import write_text  # noqa: E402

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


def pull_outputs(repo: str, prefix: str) -> None:
    """Pull the outputs under `prefix` (e.g. data/metrics/evaluate) that stages on other machines built, for a
    flow to read; outputs not built yet are skipped. An output no remote carries (`cache: false`) must have
    been built here."""
    from dvc.repo import Repo

    with Repo(repo) as project:
        under = prefix.rstrip("/") + "/"
        outs = [out for out in project.index.outs if (out.def_path + "/").startswith(under)]
        stranded = [out.def_path for out in outs if not out.use_cache and not out.exists]
    if stranded:
        raise UserError(
            f"{stranded[0]} is `cache: false` in dvc.yaml, so no DVC remote carries it from the machine that "
            "built it: remove `cache: false` from it to read it in a run with --pools"
        )
    if outs:
        dvc(["pull", "--allow-missing", *sorted(out.def_path for out in outs)], repo)


def on_pool(stage: str, repo: str, kind: str) -> None:
    """Run `stage` as a flow run of the `gymflow-stage/<kind>` deployment and take the dvc.lock it returns."""
    lock = Path(repo) / "dvc.lock"
    sent = lock.read_text() if lock.exists() else None
    parameters = {"name": stage, "lock": sent, "commit": git_commit(repo)}
    name = f"{stage} ({kind})"
    run = run_deployment(f"gymflow-stage/{kind}", parameters=parameters, flow_run_name=name, poll_interval=1)
    if not run.state or not run.state.is_completed():
        state = run.state.name if run.state else "no state"
        message = run.state.message if run.state else ""
        raise RuntimeError(f"stage {stage} on {POOLS[kind]} ended {state}: {message}")
    write_text(lock, run.state.result())


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
