"""The committed run travels in git: every metrics and plots file of the default pipeline is out of DVC's cache
(`cache: false`) and tracked, so a fresh clone's `dvc metrics show` and `dvc plots show` show the run that
`dvc.lock` records, with no remote and no warning."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # DVC's pipeline: the committed run, through git and DVC processes

ROOT = Path(__file__).resolve().parents[1]


def declared(kind: str) -> list[tuple[str, object]]:
    """(stage, entry) for each `metrics:` or `plots:` entry of the default pipeline's stages."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return [(name, entry) for name, stage in stages.items() for entry in stage.get("do", stage).get(kind, [])]


def test_every_metrics_and_plots_file_is_kept_out_of_the_cache():
    entries = declared("metrics") + declared("plots")
    assert len(entries) >= 12
    for stage, entry in entries:
        assert isinstance(entry, dict), f"{stage}: {entry} is cached (add `cache: false`)"
        (options,) = entry.values()
        assert options.get("cache") is False, f"{stage}: {entry} is cached"


def test_every_metrics_and_plots_file_the_lock_records_is_in_git():
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    small = [
        out["path"]
        for stage in lock.values()
        for out in stage.get("outs", [])
        if out["path"].startswith(("data/metrics/", "data/plots/", "data/compare/"))
    ]
    tracked = set(
        subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    )
    assert "data/metrics/compare.json" in small and "data/plots/sft.csv" in small
    assert sorted(set(small) - tracked) == []


def test_a_fresh_clone_shows_the_committed_runs_metrics_and_plots(tmp_path):
    """Every metrics file of the default pipeline loads from git alone. SWEET-RL's pipeline (sweet/dvc.yaml) is
    not part of `dvc repro` and has no committed run, so its files are reported missing."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = os.environ | {"DVC_NO_ANALYTICS": "1"}

    def dvc(*args: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "dvc", *args, "--json"], cwd=clone, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    shown = dvc("metrics", "show")[""]["data"]
    default = [
        path
        for stage in yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"].values()
        for out in stage.get("outs", [])
        if (path := out["path"]).startswith("data/metrics/")
    ]
    assert "data/metrics/compare.json" in default
    for path in default:
        assert "data" in shown[path], f"{path}: {shown[path]}"
    assert shown["data/metrics/compare.json"]["data"]["evol2_vs_control"]["maze"]["n"] == 1000
    recorded = {
        out["path"]
        for stage in yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"].values()
        for out in stage.get("outs", [])
    }
    failed = {error.get("source") for error in dvc("plots", "show").get("errors", [])}
    assert "data/plots/sft.csv" in recorded and failed & recorded == set()
