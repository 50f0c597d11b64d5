"""Set up Prefect for running stages on other machines: the `gymflow-results` block where flow runs keep their
results (a stage run returns its dvc.lock and `cache: false` outputs through it), the process work pools gymflow-cpu and gymflow-gpu whose
runs use that block, and the deployments of prefect.yaml (the stage flow on each pool, the pipeline with
`pools` on gymflow-cpu). Safe to rerun: the block, the pools' settings and the deployments are updated.

    python -m flows.deploy --results s3://my-bucket/gymflow/prefect     # storage every machine reaches
    python -m flows.deploy --results /shared/gymflow/prefect            # or a folder they all mount

The block and the pools are made with Prefect's Python API (its CLI cannot fill in a block); the deployments
are prefect.yaml's, whose pull step reads GYMFLOW_REPO on the worker's machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from urllib.parse import urlsplit

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
from prefect.exceptions import ObjectNotFound
from prefect.filesystems import LocalFileSystem, RemoteFileSystem
from prefect.workers.process import ProcessWorker

from flows.dvc_tasks import POOLS

RESULTS = "gymflow-results"


def save_results_block(url: str) -> str:
    """The results block saved: fsspec storage for a URL (s3://... needs s3fs, which `dvc[s3]` installs), a
    local folder for a path. Its slug (`<block type>/gymflow-results`) returned."""
    block = RemoteFileSystem(basepath=url) if urlsplit(url).scheme else LocalFileSystem(basepath=url)
    block.save(RESULTS, overwrite=True)
    return f"{block.get_block_type_slug()}/{RESULTS}"


def set_up_pools(results: str) -> None:
    """Create or update the process pools; their flow runs keep results in the block `results` by default."""
    template = ProcessWorker.get_default_base_job_template()
    template["variables"]["properties"]["env"]["default"] = {"PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": results}
    with get_client(sync_client=True) as client:
        for name in POOLS.values():
            try:
                client.read_work_pool(name)
                client.update_work_pool(name, WorkPoolUpdate(base_job_template=template))
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type="process", base_job_template=template))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results", required=True, help="where flow runs keep results: an fsspec URL or a path"
    )
    parser.add_argument("--repo", default=".", help="the checkout holding prefect.yaml")
    args = parser.parse_args(argv)
    results = save_results_block(args.results)
    set_up_pools(results)
    print(f"work pools {', '.join(POOLS.values())}: results in {results} ({args.results})")
    deploy = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"]
    sys.exit(subprocess.run(deploy, cwd=args.repo).returncode)


if __name__ == "__main__":
    main()
