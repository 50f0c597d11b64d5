"""One DVC stage on the machine that runs this flow: the flow a work pool's worker runs (prefect.yaml deploys
it to gymflow-cpu and gymflow-gpu; `flows.dvc_tasks.repro` sends stages to it when the pipeline runs with
`--pools`).

The run gets the pipeline's dvc.lock and the `cache: false` outputs it records (metrics and plots, which no DVC
remote carries), so DVC here judges the stage against what the other machines built; runs it if it is stale,
after pulling the inputs it lacks from the DVC remote; pushes its outputs; and returns its dvc.lock with the
`cache: false` outputs that lock records, which the pipeline keeps. That result goes to the pools' result storage
(`python -m flows.deploy` points it at storage every machine reaches), where the pipeline reads it.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.dvc_tasks import bring_up_to_date, carried, dvc, git_commit, has_remote, place
from gymflow.errors import UserError
from gymflow.store.io import write_text


@flow(
    name="gymflow-stage",
    persist_result=True,
    result_serializer="json",
    log_prints=True,
)
def stage(
    name: str,
    lock: str | None = None,
    commit: str | None = None,
    repo: str = ".",
    files: dict[str, str] | None = None,
) -> dict[str, object]:
    """Bring stage `name` up to date here: `lock` is the pipeline's dvc.lock (None: keep this checkout's),
    `commit` its git commit, which this checkout must have checked out (the stage's code is a dependency),
    `files` the `cache: false` outputs the lock records (path -> text). Returns {"lock": this dvc.lock after,
    "files": the `cache: false` outputs it records}."""
    here = git_commit(repo)
    if commit and here != commit:
        raise UserError(
            f"this checkout ({Path(repo).resolve()}) is at commit {here}, the pipeline at {commit}: "
            "check out the pipeline's commit on every worker machine"
        )
    place(repo, files or {})
    if lock is not None:
        write_text(Path(repo) / "dvc.lock", lock)
    for command in bring_up_to_date(name, has_remote(repo)):
        dvc(command, repo)
    after = (Path(repo) / "dvc.lock").read_text()
    return {"lock": after, "files": carried(repo, after)}
