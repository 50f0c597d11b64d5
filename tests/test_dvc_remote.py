"""Shared DVC storage: a tiny DVC project pushed to a local-directory remote from one clone is pulled by another
(another machine) without rerunning a stage; the commands a pool's worker runs for a stage
(flows.dvc_tasks.bring_up_to_date) rerun a stage made stale elsewhere and download nothing for an up-to-date
one; the `cache: false` outputs no remote carries travel with the lock between a pipeline and its pool runs
(flows.stage run as a function on each "machine"); and which of the real pipeline's outputs travel which way."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import flows.dvc_tasks
from flows.dvc_tasks import bring_up_to_date, has_remote, pull_outputs, received, sent
from flows.stage import stage
from gymflow.errors import UserError

pytestmark = pytest.mark.slow  # DVC projects, clones and remotes

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
ENV |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

# prepare -> train (heavy in the Prefect test: its name is in flows.pipeline.HEAVY) -> report
MAKE = """import json, sys
from pathlib import Path

import yaml

step = sys.argv[1]
params = yaml.safe_load(open("params.yaml"))
if step == "prepare":
    Path("data/a.txt").write_text(params["text"] + "\\n")
elif step == "train":
    factor = params["factor"]
    Path("data/b").mkdir(exist_ok=True)
    Path("data/b/x.txt").write_text(Path("data/a.txt").read_text() * factor)
    Path("data/metrics").mkdir(exist_ok=True)
    Path("data/metrics/train.json").write_text(json.dumps({"factor": factor}))
elif step == "report":
    Path("data/r.txt").write_text(str(len(Path("data/b/x.txt").read_text())))
"""

PREPARE_AND_TRAIN = """\
  prepare:
    cmd: python make.py prepare
    deps: [make.py]
    params: [text]
    outs: [data/a.txt]
  train:
    cmd: python make.py train
    deps: [make.py, data/a.txt]
    params: [factor]
    outs:
      - data/b:
          persist: true
"""  # both projects' first stages, up to train's metrics

DVC_YAML = f"""stages:
{PREPARE_AND_TRAIN}    metrics: [data/metrics/train.json]
  report:
    cmd: python make.py report
    deps: [make.py, data/b]
    outs: [data/r.txt]
"""


def run(cmd: list[str], cwd: Path) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def dvc(*args: str, cwd: Path) -> str:
    return run([sys.executable, "-m", "dvc", *args], cwd)


def make_project(path: Path, remote: Path | None, dvc_yaml: str = DVC_YAML, make: str = MAKE) -> Path:
    """A git + DVC project at `path` whose default remote is the directory `remote` (if any), committed."""
    path.mkdir()
    (path / "make.py").write_text(make)
    (path / "dvc.yaml").write_text(dvc_yaml)
    (path / "params.yaml").write_text("text: a\nfactor: 2\n")
    (path / "data").mkdir()
    (path / "data/.gitkeep").touch()
    run(["git", "init", "-q"], path)
    dvc("init", "-q", cwd=path)
    if remote:
        dvc("remote", "add", "-d", "storage", str(remote), cwd=path)
    commit(path, "project")
    return path


def commit(path: Path, message: str) -> None:
    run(["git", "add", "-A"], path)
    run(["git", "commit", "-qm", message], path)


def outputs(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file DVC tracks under data/ (not git's .gitignore and .gitkeep): its bytes and modification time."""
    files = [p for p in (path / "data").rglob("*") if p.is_file() and not p.name.startswith(".git")]
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def ran(out: str) -> list[str]:
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The project built and pushed on a first machine, dvc.lock committed (what a second clone gets)."""
    root = tmp_path_factory.mktemp("remote")
    first = make_project(root / "first", root / "storage")
    assert ran(dvc("repro", cwd=first)) == ["prepare", "train", "report"]
    dvc("push", cwd=first)
    commit(first, "built")
    return first


def test_a_second_clone_pulls_the_same_outputs_and_repro_pull_reruns_nothing(built):
    first = {name: data for name, (data, _) in outputs(built).items()}
    assert set(first) == {"data/a.txt", "data/b/x.txt", "data/metrics/train.json", "data/r.txt"}
    for command in (["pull"], ["repro", "--pull"]):  # the two ways a machine gets what another built
        clone = built.parent / "-".join(["clone", *command])
        run(["git", "clone", "-q", str(built), str(clone)], built.parent)
        assert outputs(clone) == {}
        out = dvc(*command, cwd=clone)
        assert {name: data for name, (data, _) in outputs(clone).items()} == first
        assert ran(out) == []
        before = outputs(clone)
        out = dvc("repro", "--pull", cwd=clone)
        assert ran(out) == [] and outputs(clone) == before  # nothing rerun, not a file rewritten
        assert "up to date" in dvc("status", cwd=clone)


def clone(source: Path, name: str) -> Path:
    path = source.parent / name
    run(["git", "clone", "-q", str(source), str(path)], source.parent)
    return path


def test_a_stage_made_stale_elsewhere_reruns_on_a_fresh_machine_and_an_up_to_date_one_downloads_nothing(
    tmp_path,
):
    first = make_project(tmp_path / "first", tmp_path / "storage")
    dvc("repro", cwd=first)
    # the first machine changes `prepare` and reruns it alone: train's dvc.lock entry is now stale
    (first / "params.yaml").write_text("text: A\nfactor: 2\n")
    assert ran(dvc("repro", "-s", "prepare", cwd=first)) == ["prepare"]
    dvc("push", cwd=first)
    commit(first, "prepare changed")

    # DVC's `repro --pull -s` on a machine without data/a.txt cannot see that it changed: it skips train and
    # checks out train's stale outputs (why a pool's worker runs `bring_up_to_date`, which has no -s)
    fooled = clone(first, "fooled")
    assert ran(dvc("repro", "--pull", "-s", "train", cwd=fooled)) == []
    assert (fooled / "data/b/x.txt").read_text() == "a\n" * 2

    worker = clone(first, "worker")
    assert has_remote(str(worker))  # .dvc/config, committed, names the remote
    out = "".join(dvc(*command, cwd=worker) for command in bring_up_to_date("train"))
    assert ran(out) == ["train"]  # prepare is not rerun, report (downstream) is not touched
    assert (worker / "data/b/x.txt").read_text() == "A\n" * 2
    assert sorted(outputs(worker)) == ["data/a.txt", "data/b/x.txt", "data/metrics/train.json"]
    commit(worker, "train rerun")  # the dvc.lock the worker returns, as the next machine gets it

    fresh = clone(worker, "fresh")
    out = "".join(dvc(*command, cwd=fresh) for command in bring_up_to_date("train"))
    assert ran(out) == [] and outputs(fresh) == {}  # up to date: nothing run, nothing downloaded
    dvc("pull", "train", cwd=fresh)  # what the worker pushed
    assert (fresh / "data/b/x.txt").read_text() == "A\n" * 2


def test_the_real_pipelines_outputs_all_travel_between_machines():
    """Every output reaches the other machines: the cached ones through the remote (`persist: true` ones too: they
    only keep DVC's run-cache off their stages), the `cache: false` ones with dvc.lock. Those are exactly the
    metrics and plots files and the comparison tables of both pipelines, small text files in git, and
    `carried` ships every one of them that the committed lock records, byte for byte."""
    import yaml
    from dvc.repo import Repo

    from flows.dvc_tasks import carried, uncached_outputs

    with Repo(str(ROOT)) as project:
        persisted = {out.def_path for out in project.index.outs if out.persist}
        small = {
            out.def_path
            for out in project.index.outs
            if out.metric
            or out.plot
            or out.def_path in ("data/compare/default.md", "data/compare/sweet_actor.md")
        }
    uncached = uncached_outputs(str(ROOT))
    assert uncached == small and len(small) >= 12 + 12  # the default pipeline's and SWEET-RL's
    assert "data/rollouts/trajectories" in persisted and "data/rollouts/rl" in persisted
    lock = (ROOT / "dvc.lock").read_text()
    stages = yaml.safe_load(lock)["stages"]
    recorded = {out["path"]: out["md5"] for entry in stages.values() for out in entry["outs"]}
    files = carried(str(ROOT), lock)
    assert set(files) == uncached & set(recorded) and "data/metrics/compare.json" in files
    assert {path: md5(ROOT / path) for path in files} == {path: recorded[path] for path in files}
    assert all(md5_text(text) == recorded[path] for path, text in files.items())


def md5_text(text: str) -> str:
    import hashlib

    return hashlib.md5(text.encode("utf-8")).hexdigest()


def test_without_a_remote_a_stage_is_reproduced_in_the_one_checkout_with_nothing_pushed(tmp_path):
    project = make_project(tmp_path / "alone", remote=None)
    assert not has_remote(str(project))
    commands = bring_up_to_date("train", has_remote(str(project)))
    assert ran("".join(dvc(*command, cwd=project) for command in commands)) == ["prepare", "train"]
    assert ran("".join(dvc(*command, cwd=project) for command in commands)) == []


# train's metrics are `cache: false` and report reads them (as control, compare and plot_evol read other stages'
# metrics): a machine that runs report has them only if they travel with the lock
UNCACHED = f"""stages:
{PREPARE_AND_TRAIN}    metrics:
      - data/metrics/train.json:
          cache: false
  report:
    cmd: python make.py report
    deps: [make.py, data/metrics/train.json]
    outs: [data/r.txt]
    metrics:
      - data/metrics/report.json:
          cache: false
    plots:
      - data/plots/report.csv:
          cache: false
"""
MAKE_UNCACHED = MAKE.replace(
    """    Path("data/r.txt").write_text(str(len(Path("data/b/x.txt").read_text())))""",
    """    factor = json.loads(Path("data/metrics/train.json").read_text())["factor"]
    Path("data/r.txt").write_text(str(factor * 10))
    Path("data/metrics/report.json").write_text(json.dumps({"report": factor * 10}))
    Path("data/plots").mkdir(exist_ok=True)
    Path("data/plots/report.csv").write_bytes(b"step,loss\\r\\n1,0.5\\r\\n")  # as csv.writer ends lines""",
)


@pytest.fixture
def dvc_log(monkeypatch) -> list[str]:
    """What flows.dvc_tasks.dvc logs (its stdout), outside a Prefect run."""
    lines: list[str] = []

    class Logger:
        def info(self, text: str) -> None:
            lines.append(text)

    monkeypatch.setattr(flows.dvc_tasks, "get_run_logger", Logger)
    return lines


def on_machine(name: str, pipeline: Path, machine: Path, log: list[str], carry: bool = True) -> list[str]:
    """What `on_pool` does for stage `name`, with `machine`'s worker running the stage flow; the stages run."""
    parameters = sent(name, str(pipeline))
    if not carry:
        parameters["files"] = {}  # the lock alone, as before the files travelled with it
    log.clear()
    received(str(pipeline), stage.fn(**parameters, repo=str(machine)))
    return ran("".join(log))


def lock_md5(path: Path) -> dict[str, str]:
    import yaml

    stages = yaml.safe_load((path / "dvc.lock").read_text())["stages"]
    return {out["path"]: out["md5"] for entry in stages.values() for out in entry["outs"]}


def md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


def test_cache_false_outputs_travel_with_the_lock_between_a_pipeline_and_its_pool_runs(tmp_path, dvc_log):
    """prepare and report run on one machine, train on another, the pipeline on a third that runs nothing: report
    reads train's `cache: false` metrics, which no remote carries, so they come with the lock; the pipeline's
    checkout gets back every one, byte for byte what its lock records (CRLF lines too), and after a commit a fresh
    clone's `dvc metrics show` and `dvc plots show` show them with no warning and no remote."""
    pipeline = make_project(tmp_path / "pipeline", tmp_path / "storage", UNCACHED, MAKE_UNCACHED)
    cpu, gpu, bare = (clone(pipeline, name) for name in ("cpu", "gpu", "bare"))
    assert on_machine("prepare", pipeline, cpu, dvc_log) == ["prepare"]
    assert on_machine("train", pipeline, gpu, dvc_log) == ["train"]
    assert (pipeline / "data/metrics/train.json").read_text() == '{"factor": 2}'

    # the lock alone: a machine that has to run report lacks train's metrics, and no remote has them
    with pytest.raises(RuntimeError, match="data/metrics/train.json"):
        on_machine("report", pipeline, bare, dvc_log, carry=False)
    assert on_machine("report", pipeline, cpu, dvc_log) == ["report"]  # train's metrics came with the lock

    recorded = lock_md5(pipeline)
    small = ["data/metrics/train.json", "data/metrics/report.json", "data/plots/report.csv"]
    assert {path: md5(pipeline / path) for path in small} == {path: recorded[path] for path in small}
    assert (pipeline / "data/plots/report.csv").read_bytes() == b"step,loss\r\n1,0.5\r\n"
    assert (
        not (pipeline / "data/b").exists() and not (pipeline / "data/r.txt").exists()
    )  # the remote has them
    assert on_machine("report", pipeline, gpu, dvc_log) == []  # up to date wherever it is sent

    commit(pipeline, "the run")  # the small files are in git, beside the lock
    fresh = clone(pipeline, "fresh")
    shown = subprocess.run(
        [sys.executable, "-m", "dvc", "metrics", "show"], cwd=fresh, env=ENV, capture_output=True, text=True
    )
    assert shown.returncode == 0 and "failed" not in shown.stdout + shown.stderr, shown.stdout + shown.stderr
    assert "data/metrics/report.json" in shown.stdout and "20" in shown.stdout
    plots = subprocess.run(
        [sys.executable, "-m", "dvc", "plots", "show", "--json"],
        cwd=fresh,
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert plots.returncode == 0 and "errors" not in plots.stdout, plots.stdout + plots.stderr


def test_a_pool_run_writes_only_cache_false_outputs_it_is_sent(tmp_path, dvc_log):
    """`files` comes over the network: a path that is not a `cache: false` output of this checkout's dvc.yaml
    stops the run before anything is written, the lock included."""
    project = make_project(tmp_path / "worker", None, UNCACHED, MAKE_UNCACHED)
    for path in ("dvc.yaml", "make.py", "../outside.txt", "data/a.txt", "data/metrics/other.json"):
        with pytest.raises(UserError, match="is not a `cache: false` output of dvc.yaml here: not written"):
            stage.fn(name="prepare", lock="stages: {}\n", files={path: "x"}, repo=str(project))
    assert (project / "make.py").read_text() == MAKE_UNCACHED and not (project / "dvc.lock").exists()
    assert not (tmp_path / "outside.txt").exists() and outputs(project) == {}


def test_pull_outputs_leaves_cache_false_outputs_to_the_lock(tmp_path, dvc_log):
    """A flow reading metrics after pool runs pulls only cached outputs; `cache: false` ones came with the lock
    (before, it stopped: no remote carries them)."""
    project = make_project(tmp_path / "uncached", tmp_path / "storage", UNCACHED, MAKE_UNCACHED)
    pull_outputs(str(project), "data/metrics")  # nothing to pull: no `dvc pull` run, no error
    assert dvc_log == []
    pull_outputs(str(project), "data/a.txt")  # a cached output not built yet: skipped by --allow-missing
    assert outputs(project) == {}
