"""The committed run travels in git (issue 37, 4.3): every metrics and plots file of both pipelines is out of
DVC's cache (`cache: false`), and those of the run dvc.lock records are tracked with the bytes it records, so a
fresh clone's `dvc metrics show` and `dvc plots show` show that run with no remote and no data. (Pool runs carry
these files with the lock: tests/test_dvc_remote.py.)"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dvc.repo import Repo

pytestmark = pytest.mark.slow  # git clones and DVC processes

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("data/metrics/", "data/plots/", "data/compare/default.md")
ENV = os.environ | {"DVC_NO_ANALYTICS": "1"}


def declared(pipeline: str, kind: str) -> list[tuple[str, object]]:
    """(stage, entry) for each `metrics:` or `plots:` entry of a pipeline's stages."""
    stages = yaml.safe_load((ROOT / pipeline).read_text())["stages"]
    return [(name, entry) for name, stage in stages.items() for entry in stage.get("do", stage).get(kind, [])]


def recorded(lock: str) -> dict[str, str]:
    """The metrics, plots and comparison files a dvc.lock records: path -> md5."""
    stages = yaml.safe_load((ROOT / lock).read_text())["stages"]
    outs = [out for stage in stages.values() for out in stage.get("outs", [])]
    return {out["path"]: out["md5"] for out in outs if out["path"].startswith(SMALL)}


@pytest.mark.parametrize("pipeline", ["dvc.yaml", "sweet/dvc.yaml"])
def test_every_metrics_and_plots_file_is_kept_out_of_the_cache(pipeline):
    entries = declared(pipeline, "metrics") + declared(pipeline, "plots")
    assert len(entries) >= 12
    for stage, entry in entries:
        assert isinstance(entry, dict), f"{stage}: {entry} is cached (add `cache: false`)"
        (options,) = entry.values()
        assert options.get("cache") is False, f"{stage}: {entry} is cached"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh clone of this checkout's commit: nothing but what git holds."""
    path = tmp_path_factory.mktemp("fresh") / "clone"
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(path)], check=True)
    subprocess.run(["git", "checkout", "-q", commit.stdout.strip()], cwd=path, check=True)
    assert not (path / "data/models").exists()  # no data but git's
    return path


def dvc(clone: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=clone, capture_output=True, text=True, env=ENV
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_fresh_clone_holds_every_file_of_the_committed_run_as_its_lock_records_it(clone):
    files = recorded("dvc.lock")
    assert len(files) == 24 and "data/metrics/compare.json" in files and "data/plots/sft.csv" in files
    held = {
        path: hashlib.md5((clone / path).read_bytes()).hexdigest()
        for path in files
        if (clone / path).exists()
    }
    assert held == files


def test_a_fresh_clone_shows_the_committed_runs_metrics_with_no_warning(clone):
    default = sorted(path for path in recorded("dvc.lock") if path.startswith("data/metrics/"))
    shown = json.loads(dvc(clone, "metrics", "show", "--json").stdout)[""]["data"]
    for path in default:
        assert "data" in shown[path], f"{path}: {shown[path]}"
    assert shown["data/metrics/compare.json"]["data"]["evol2_vs_control"]["maze"]["n"] == 1000
    sft = json.loads((ROOT / "data/metrics/evaluate/sft.json").read_text())["maze"]["all"]["success"]

    table = dvc(clone, "metrics", "show", *default)  # the default pipeline's, as a person reads them
    assert "failed" not in table.stdout + table.stderr, table.stdout + table.stderr
    assert f"{sft:g}"[:5] in table.stdout and "data/metrics/evaluate/sft.json" in table.stdout

    # every metrics file: the only ones missing are SWEET-RL's (declared in sweet/dvc.yaml; its committed run has
    # no files anywhere to commit), exactly those not in git; once they are there must be no warning at all
    everything = dvc(clone, "metrics", "show")
    missing = {path for path, entry in shown.items() if "data" not in entry}
    with Repo(str(clone)) as repo:
        sweet = {
            o.def_path
            for s in repo.index.stages
            if s.path.endswith("sweet/dvc.yaml")
            for o in s.outs
            if o.metric
        }
    assert missing == {p for p in sweet if not (clone / p).exists()}
    if not missing:
        assert "failed" not in everything.stdout + everything.stderr


def test_a_fresh_clone_draws_the_committed_runs_plots(clone):
    default = {path for path in recorded("dvc.lock") if path.startswith("data/plots/")}
    assert "data/plots/sft.csv" in default and "data/plots/evol.csv" in default
    shown = json.loads(dvc(clone, "plots", "show", "--json").stdout)
    failed = {error.get("source") for error in shown.get("errors", [])}
    assert failed & default == set()
    drawn = json.dumps(shown)
    assert all(path in drawn for path in default)
