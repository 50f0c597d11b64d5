"""The Prefect UI after a small pipeline run, in headless Chromium: the flow run, its stage task runs and the
AgentEval artifact are what a user of the pipeline looks at (README: the pipeline is used through the UI).

A local `prefect server start` (UI on, analytics off, PREFECT_HOME in tmp) records a run of `flows.pipeline`
on a tiny repository (tests/test_pipeline.py's params): the stages `params` and `instructions` through
`dvc repro -s`, AgentEvol replaced by an empty subflow (its stages train models: tests/test_pipeline.py runs
them), and the evaluation metrics written beforehand, so that the run posts the `agenteval` table. Screenshots
go to the test's tmp dir and tests/output/screens/ (ignored by git).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from gymflow.serving import free_port, started
from tests.browser import EC, By, WebDriverWait, chrome, keep_screens  # skips without Chromium or selenium
from tests.test_pipeline import tiny_params  # its smoke-run params.yaml: 3 train and 2 eval tasks per env

pytestmark = pytest.mark.slow  # a Prefect server, DVC and Chromium

ROOT = Path(__file__).resolve().parents[1]

METRICS = {
    "maze": {"all": {"success": 0.5, "reward": 0.625}},
    "wordle": {"all": {"success": 0.0, "reward": 0.25}},
}
STAGES = ["params", "instructions"]
RUN = """
import sys
from prefect import flow
import flows.pipeline


@flow(name="gymflow-evol")
def no_evol(repo: str = ".", pools: bool = False) -> list:
    return []


flows.pipeline.evol = no_evol  # AgentEvol trains models: not this test's subject
flows.pipeline.pipeline(repo=sys.argv[1], stages=sys.argv[2:], rl=[])
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The URL of a Prefect server that has recorded one pipeline run, and its API's answers about it."""
    tmp = tmp_path_factory.mktemp("prefect_ui")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    settings = {
        "PREFECT_HOME": str(tmp / "home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_UI_API_URL": api,
        "PREFECT_SERVER_UI_ENABLED": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
        "DVC_NO_ANALYTICS": "1",
        "PYTHONPATH": str(ROOT),  # flows/ as a package
    }
    env = {**os.environ, **settings}
    repo = tmp / "repo"
    repo.mkdir()
    for name in ["dvc.yaml", "stages", "gymflow"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
    run(["git", "init", "-q"], repo, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], repo, env)
    metrics = repo / "data/metrics/evaluate/sft.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps(METRICS))
    cmd = ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with pytest.MonkeyPatch.context() as mp:  # `started` passes this process's environment on to the server
        for name, value in settings.items():
            mp.setenv(name, value)
        with started(cmd, f"{api}/health", tmp / "server.log", timeout=120):
            run([sys.executable, "-c", RUN, str(repo), *STAGES], ROOT, env)
            flow_runs = requests.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
            artifacts = requests.post(f"{api}/artifacts/filter", json={}, timeout=10).json()
            yield f"http://127.0.0.1:{port}", flow_runs, artifacts


@pytest.fixture(scope="module")
def browser():
    yield from chrome(1400, 1000)


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> Path:
    yield from keep_screens(tmp_path_factory.mktemp("prefect_screens"))


def shows(driver, text: str, timeout: float = 30) -> None:
    """Wait until the page (a JS app that renders after its API calls) shows `text`."""
    WebDriverWait(driver, timeout).until(EC.text_to_be_present_in_element((By.TAG_NAME, "body"), text))


def tab(driver, name: str) -> None:
    """Open a tab of a run's page (the UI's tabs are `li.p-tab` with ids: task-runs, artifacts, ...)."""
    WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.CSS_SELECTOR, f"li.p-tab#{name}"))).click()


def pipeline_run(flow_runs: list[dict]) -> dict:
    (found,) = [r for r in flow_runs if not r.get("parent_task_run_id")]
    return found


def test_the_runs_page_lists_the_pipeline_run(server, browser, screens):
    url, flow_runs, _ = server
    run_ = pipeline_run(flow_runs)
    assert run_["state_type"] == "COMPLETED"
    browser.get(url + "/runs")
    shows(browser, run_["name"])
    shows(browser, "gymflow-pipeline")
    shows(browser, f"{len(STAGES)} Task runs")
    browser.save_screenshot(str(screens / "prefect_runs.png"))


def test_the_flow_run_page_shows_each_stage_as_a_task_run(server, browser, screens):
    url, flow_runs, _ = server
    run_ = pipeline_run(flow_runs)
    browser.get(f"{url}/runs/flow-run/{run_['id']}")
    shows(browser, run_["name"])
    shows(browser, "Running stage 'params'")  # the log, the page's first tab
    tab(browser, "task-runs")
    for stage in STAGES:
        shows(browser, f"repro-{stage}-")
    browser.save_screenshot(str(screens / "prefect_flow_run_tasks.png"))
    tab(browser, "subflow-runs")
    shows(browser, "gymflow-evol")


def test_the_agenteval_artifact_shows_the_evaluation_table(server, browser, screens):
    url, flow_runs, artifacts = server
    (artifact,) = [a for a in artifacts if a["key"] == "agenteval"]
    assert artifact["flow_run_id"] == pipeline_run(flow_runs)["id"]
    browser.get(f"{url}/runs/flow-run/{artifact['flow_run_id']}")
    tab(browser, "artifacts")
    shows(browser, "agenteval")
    browser.save_screenshot(str(screens / "prefect_flow_run_artifacts.png"))
    browser.get(f"{url}/artifacts/artifact/{artifact['id']}")
    shows(browser, "AgentEval: held-out results per policy")
    cells = WebDriverWait(browser, 30).until(
        lambda d: [c.text for c in d.find_elements(By.CSS_SELECTOR, "td")] or None
    )
    for value in ("sft", "maze", "wordle", "0.5", "0.625"):
        assert value in cells
    browser.save_screenshot(str(screens / "prefect_agenteval.png"))
