"""Prefect work pools end to end, on 127.0.0.1 only: a local `prefect server`, the pools and deployments made by
`python -m flows.deploy`, a process worker per pool each in its own clone of a tiny DVC project (two machines
sharing a local-directory DVC remote), and the pipeline deployment run with `pools`: the light stage runs on
gymflow-cpu, the heavy one on gymflow-gpu (in the other clone, its input pulled from the remote), the pipeline
gets back the dvc.lock and, with it, the evaluation metrics (`cache: false`), and a stage sent to a machine
without its data but with an up-to-date dvc.lock is not rerun."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from flows.dvc_tasks import git_commit
from gymflow.errors import UserError
from gymflow.serving import free_port
from tests.test_dvc_remote import ENV, ROOT, commit, make_project, outputs, run

pytestmark = pytest.mark.slow  # a Prefect server, its workers and DVC

# the stages are named after the real pipeline's, so flows.pipeline.HEAVY routes them: evaluate@sft is heavy
MAKE = """import json, sys
from pathlib import Path

step = sys.argv[1]
if step == "trajectories":
    Path("data/trajectories.txt").write_text("2\\n")
elif step == "evaluate":
    policy = sys.argv[2]
    tasks = int(Path("data/trajectories.txt").read_text())
    Path(f"data/rollouts/evaluate/{policy}").mkdir(parents=True, exist_ok=True)
    Path(f"data/rollouts/evaluate/{policy}/episodes.txt").write_text("win\\nloss\\n")
    Path("data/metrics/evaluate").mkdir(parents=True, exist_ok=True)
    metrics = {"maze": {"all": {"success": 1 / tasks}}}
    Path(f"data/metrics/evaluate/{policy}.json").write_text(json.dumps(metrics))
"""

DVC_YAML = """stages:
  trajectories:
    cmd: python make.py trajectories
    deps: [make.py]
    outs: [data/trajectories.txt]
  evaluate:
    foreach: [sft]
    do:
      cmd: python make.py evaluate ${item}
      deps: [make.py, data/trajectories.txt]
      outs:
        - data/rollouts/evaluate/${item}:
            persist: true
      metrics:
        - data/metrics/evaluate/${item}.json:
            cache: false  # as the pipeline's metrics: in git, travelling with the lock, not through the remote
"""

STAGES = ["trajectories", "evaluate@sft"]


def start(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """A service in a process group of its own (a worker's flow runs are its children), output to `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for(url: str, process: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, f"server exited:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} not up after {seconds} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """Two clones of a tiny project holding the flows and prefect.yaml: the cpu machine's and the gpu one's."""
    root = tmp_path_factory.mktemp("machines")
    src = make_project(root / "src", root / "storage", dvc_yaml=DVC_YAML, make=MAKE)
    shutil.copytree(ROOT / "flows", src / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "prefect.yaml", src)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.pop("evol")  # no AgentEvol iterations here
    (src / "params.yaml").write_text(yaml.safe_dump(params))
    commit(src, "flows")
    for name in ("cpu", "gpu"):
        run(["git", "clone", "-q", str(src), name], root)
    return root / "cpu", root / "gpu"


@pytest.fixture(scope="module")
def prefect(machines, tmp_path_factory):
    """A Prefect server, the pools and deployments, and a worker per pool in its machine's clone; all stopped
    at the end, whatever happened."""
    home = tmp_path_factory.mktemp("prefect")
    url = f"http://127.0.0.1:{free_port()}/api"
    env = {
        **ENV,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env |= {
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    port = url.split(":")[2].split("/")[0]
    server_cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", port]
    services = [start([*server_cmd, "--no-ui", "--analytics-off"], home, env, home / "server.log")]
    try:
        wait_for(f"{url}/health", services[0], home / "server.log")
        cpu, gpu = machines
        deploy = subprocess.run(
            [sys.executable, "-m", "flows.deploy", "--results", str(home / "results")],
            cwd=cpu,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
        for pool, clone in (("gymflow-cpu", cpu), ("gymflow-gpu", gpu)):
            worker = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"]
            services.append(start(worker, clone, {**env, "GYMFLOW_REPO": str(clone)}, home / f"{pool}.log"))
        yield url, home
    finally:
        for service in reversed(services):
            stop(service)


def run_deployment_here(url: str, name: str, parameters: dict):
    """Run deployment `name` on the test's server; its flow run once finished."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}):
        return run_deployment(name, parameters=parameters, timeout=240, poll_interval=1)


def read(url: str, call):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        return call(client)


def logs(home: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(home.glob("*.log")))


def lock_outs(clone: Path) -> dict[str, list]:
    stages = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    return {name: [(o["path"], o["md5"]) for o in entry["outs"]] for name, entry in stages.items()}


def test_the_pipeline_deployment_runs_each_stage_on_its_pool_and_gets_back_the_lock_and_metrics(
    machines, prefect
):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    url, home = prefect
    cpu, gpu = machines
    pipeline = run_deployment_here(url, "gymflow-pipeline/pools", {"stages": STAGES, "rl": []})
    assert pipeline.state.is_completed(), f"{pipeline.state}\n{logs(home)}"

    def stage_runs(client):
        children = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[pipeline.id]))
        return client.read_flow_runs(flow_run_filter=children)

    runs = {r.name: r for r in read(url, stage_runs) if r.deployment_id}  # not the evol subflow
    assert set(runs) == {"trajectories (cpu)", "evaluate@sft (gpu)"}
    assert runs["trajectories (cpu)"].work_pool_name == "gymflow-cpu"
    assert runs["evaluate@sft (gpu)"].work_pool_name == "gymflow-gpu"
    assert all(r.state.is_completed() for r in runs.values())
    assert list((home / "results").iterdir())  # the dvc.lock came back through the pools' result storage

    # the heavy stage ran in the gpu clone, on the input the cpu clone built (pulled from the remote) ...
    built_on_gpu = outputs(gpu)
    assert set(built_on_gpu) == {
        "data/trajectories.txt",
        "data/rollouts/evaluate/sft/episodes.txt",
        "data/metrics/evaluate/sft.json",
    }
    # ... and the cpu clone, where the pipeline runs, holds its dvc.lock and metrics (`cache: false`: they came
    # back with the lock, no remote carries them), not its rollouts
    assert lock_outs(cpu) == lock_outs(gpu) and set(lock_outs(cpu)) == {"trajectories", "evaluate@sft"}
    assert set(outputs(cpu)) == {"data/trajectories.txt", "data/metrics/evaluate/sft.json"}
    assert json.loads((cpu / "data/metrics/evaluate/sft.json").read_text())["maze"]["all"]["success"] == 0.5

    def table(client):
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        return client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["agenteval"]))
        )

    (artifact,) = read(url, table)
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    assert rows == [{"policy": "sft", "env": "maze", "success": 0.5}]

    # DVC judges a stage by the dvc.lock it is sent, not by the data at hand: evaluate@sft sent to the cpu
    # machine, which lacks its rollouts, is up to date there: nothing run, nothing downloaded, the lock unchanged
    lock, before = (cpu / "dvc.lock").read_text(), outputs(cpu)
    metrics = (cpu / "data/metrics/evaluate/sft.json").read_text()
    parameters = {"name": "evaluate@sft", "lock": lock, "commit": git_commit(str(cpu))}
    parameters["files"] = {"data/metrics/evaluate/sft.json": metrics}
    again = run_deployment_here(url, "gymflow-stage/cpu", parameters)
    assert again.state.is_completed(), f"{again.state}\n{logs(home)}"
    returned = read(url, lambda client: again.state.result())
    assert returned == {"lock": lock, "files": {"data/metrics/evaluate/sft.json": metrics}}
    assert outputs(cpu) == before


def test_a_worker_whose_checkout_is_at_another_commit_refuses_the_stage(tmp_path):
    from flows.stage import stage

    project = make_project(tmp_path / "behind", None, dvc_yaml=DVC_YAML, make=MAKE)
    with pytest.raises(UserError, match="is at commit [0-9a-f]{40}, the pipeline at 0{40}: check out"):
        stage.fn(name="trajectories", lock="stages: {}\n", commit="0" * 40, repo=str(project))
    assert not (project / "dvc.lock").exists()  # the lock it was sent is not written either
