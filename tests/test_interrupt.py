"""Interrupted stages and reruns (issue 25, 1.3 and 1.4).

A stage killed (`kill -9`) or stopped (Ctrl-C) at seeded random moments and then run again ends with the
outputs of a run that was never stopped: the same bytes in every file, metrics included but for their
timings. A rerun with the same inputs writes the same bytes; no worker outlives its stage; a partial
checkpoint does not break a rerun.

Stages run as child processes of a fork server that imported them once (`launch`): a fresh
`python -m stages.sft` spends ~15 s of two busy cores importing torch and transformers before its few
seconds of work. The worker test runs the real command line.
"""

import contextlib
import json
import multiprocessing
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from test_pipeline import ENV, copy_code, tiny_params

pytestmark = pytest.mark.slow  # runs stages as processes and kills them

ENVS = ["maze", "wordle"]
# Wall-clock figures in the metrics: the only values an interrupted run may change.
TIMINGS = {
    "wall_seconds",
    "train_tokens_per_s",
    "rollout_s",
    "update_s",
    "episodes_per_s",
    "steps_per_s",
    "tokens_per_s",
}


@dataclass(frozen=True)
class Stage:
    argv: tuple[str, ...]  # python -m stages.<argv[0]> <argv[1:]>
    outs: tuple[str, ...]  # what dvc.yaml declares it writes (metrics and plots included)
    kept: str  # what its Ctrl-C note says it keeps
    persist: tuple[str, ...] = ()  # the outs `dvc repro` keeps for a rerun; it deletes the others first
    scratch: tuple[str, ...] = ()  # what it keeps between runs beside its outs (checkpoints)
    progress: str = ""  # a glob that matches once it has kept work a rerun resumes from ("": none)


STAGES = {
    "instructions": Stage(
        ("instructions",), ("data/instructions", "data/metrics/instructions.json"), "nothing is kept"
    ),
    "trajectories": Stage(
        ("trajectories",),
        ("data/rollouts/trajectories", "data/agenttraj", "data/metrics/trajectories.json"),
        "finished environments are kept",
        persist=("data/rollouts/trajectories", "data/agenttraj"),
    ),  # no progress: both environments end together, so its moments are drawn from the start
    "init_model": Stage(
        ("init_model",), ("data/models/init", "data/metrics/init_model.json"), "nothing is kept"
    ),
    "sft": Stage(
        ("sft",),
        ("data/models/sft", "data/plots/sft.csv", "data/metrics/sft.json"),
        "the last checkpoint (data/models/sft.checkpoints) is kept",
        scratch=("data/models/sft.checkpoints",),
        progress="data/models/sft.checkpoints/*/checkpoint-*",
    ),
    "rl": Stage(
        ("rl",),
        ("data/models/rl", "data/rollouts/rl", "data/plots/rl.csv", "data/metrics/rl.json"),
        "finished iterations are kept (data/models/rl.checkpoints)",
        persist=("data/rollouts/rl",),
        scratch=("data/models/rl.checkpoints",),
        progress="data/models/rl.checkpoints/*/state.pt",
    ),
    "evaluate": Stage(
        ("evaluate", "sft"),
        ("data/rollouts/evaluate/sft", "data/metrics/evaluate/sft.json"),
        "finished environments are kept",
        scratch=("data/rollouts/evaluate/.sft.speed", "data/rollouts/evaluate/.sft.shadow"),
        progress="data/rollouts/evaluate/.sft.shadow/*.episodes.parquet",
    ),
    "explore": Stage(
        ("explore", "evol1"),
        ("data/rollouts/explore/evol1", "data/metrics/explore/evol1.json"),
        "finished environments are kept",
        scratch=("data/rollouts/explore/.evol1.speed", "data/rollouts/explore/.evol1.shadow"),
    ),
    "learn": Stage(  # AgentEvol's learning step: SFT's trainer on the kept episodes and the SFT data
        ("learn", "evol1"),
        ("data/evol/evol1.kept.parquet", "data/models/evol1", "data/plots/learn/evol1.csv")
        + ("data/metrics/learn/evol1.json",),
        "the last checkpoint (data/models/<iteration>.checkpoints) is kept",
        scratch=("data/models/evol1.checkpoints",),
        progress="data/models/evol1.checkpoints/*/checkpoint-*",
    ),
}

# Per stage, the signals of the interrupted runs before the one that finishes ("KILL INT": killed, then
# the rerun stopped too); each case draws its moments from a seed of its own.
PLAN = {
    "instructions": ["KILL", "INT"],
    "trajectories": ["KILL", "KILL", "KILL", "INT", "INT"],
    "init_model": ["KILL"],
    "sft": ["KILL", "KILL", "KILL", "INT", "INT", "KILL INT"],
    "rl": ["KILL", "KILL", "KILL", "INT", "INT", "INT KILL"],
    "evaluate": ["KILL", "KILL", "INT"],
    "explore": ["KILL"],
    "learn": ["KILL", "INT"],
}
CASES = [
    pytest.param(stage, signals.split(), seed, id=f"{stage}-{signals.replace(' ', '-')}-{seed}")
    for seed, (stage, signals) in enumerate((stage, s) for stage, plan in PLAN.items() for s in plan)
]


def params() -> dict:
    """The smoke run's parameters on two environments, with SFT and RL long enough to interrupt: SFT (and
    AgentEvol's learning) takes 12 steps, a checkpoint every 2 and a log every 3; RL 5 PPO iterations (its
    value head is state to resume too)."""
    p = tiny_params()
    p["envs"] = ENVS
    p.pop("sweet")  # SWEET-RL's pipeline (sweet/dvc.yaml) is not part of this run
    p["instructions"]["train"] = dict.fromkeys(ENVS, 3)
    p["instructions"]["eval"] = dict.fromkeys(ENVS, 2)
    p["trajectories"]["tasks"] = dict.fromkeys(ENVS, 2)
    p["sft"] |= {"envs": {"maze": 12}, "log_every": 3}
    p["evaluate"] |= {"envs": ENVS, "k": 1}
    p["evol"]["tasks"] = {"maze": None}
    switches = {"value_warmup": 1, "epochs": 1, "minibatches": 1}
    p["rl"] |= {"algorithm": "ppo", "switches": switches, "iterations": 5, "horizon": [{"turns": 3}]}
    return p


def _stage_main(cwd: str, argv: tuple[str, ...], log: str, started) -> None:
    """A child process that runs `python -m stages.<argv[0]> <argv[1:]>` in `cwd`, output to `log`; sets
    `started` once a signal reaches the stage rather than this set-up."""
    torch.set_num_threads(1)  # the tiny models gain nothing from two threads on cores other tests share
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = [f"stages/{argv[0]}.py", *argv[1:]]
    sys.modules.pop(f"stages.{argv[0]}", None)  # preloaded: run afresh as __main__, as `python -m` does
    started.set()
    runpy.run_module(f"stages.{argv[0]}", run_name="__main__", alter_sys=True)


def launch(repo: Path, stage: str) -> multiprocessing.Process:
    """Start `stage` in `repo`, forked from a server that imported every stage once."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "transformers", "trl", *(f"stages.{s}" for s in STAGES)])
    started = ctx.Event()
    args = (str(repo), STAGES[stage].argv, str(repo / "stage.log"), started)
    proc = ctx.Process(target=_stage_main, args=args)
    proc.start()
    assert started.wait(120), "the stage did not start"
    return proc


def progressed(proc: multiprocessing.Process, repo: Path, stage: str) -> float:
    """Wait until the stage has kept work to resume from (or ended); the time then."""
    pattern, deadline = STAGES[stage].progress, time.monotonic() + 900
    while pattern and proc.exitcode is None and not any(repo.glob(pattern)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return time.monotonic()


def finish(repo: Path, stage: str) -> tuple[float, float]:
    """Run `stage` in `repo` to the end: the seconds after which it had kept work to resume from, and the
    seconds it took."""
    start = time.monotonic()
    proc = launch(repo, stage)
    kept = progressed(proc, repo, stage) - start
    assert _join(proc, 900), f"{stage} ran for 15 minutes"
    assert proc.exitcode == 0, f"{stage} failed:\n{(repo / 'stage.log').read_text()[-3000:]}"
    return kept, time.monotonic() - start


def outputs(repo: Path, stage: str) -> dict[str, object]:
    """Every file of the stage's outs: its bytes, or for a metrics file its values but the timings'."""
    found: dict[str, object] = {}
    for out in STAGES[stage].outs:
        path = repo / out
        for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            name = str(f.relative_to(repo))
            found[name] = _untimed(json.loads(f.read_text())) if "metrics/" in name else f.read_bytes()
    return found


def _untimed(metrics: object) -> object:
    """Metrics with every timing's value left out, its key kept (a resumed run still reports it)."""
    if isinstance(metrics, dict):
        return {k: "timing" if k in TIMINGS else _untimed(v) for k, v in metrics.items()}
    return metrics


def differences(repo: Path, stage: str, expected: dict[str, object]) -> list[str]:
    got = outputs(repo, stage)
    return sorted(name for name in got.keys() | expected.keys() if got.get(name) != expected.get(name))


def remove(repo: Path, paths: tuple[str, ...]) -> None:
    for path in (repo / p for p in paths):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The stages run once, never interrupted, in order: (the repository, each stage's outputs and seconds)."""
    repo = tmp_path_factory.mktemp("reference")
    copy_code(repo)
    (repo / "params.yaml").write_text(yaml.safe_dump(params()))
    seconds = {stage: finish(repo, stage) for stage in STAGES}
    return repo, {stage: outputs(repo, stage) for stage in STAGES}, seconds


def before(reference, tmp_path: Path, stage: str) -> Path:
    """A copy of the reference repository as it was before `stage` ran."""
    repo = tmp_path / "repo"
    shutil.copytree(reference[0], repo)
    remove(repo, (*STAGES[stage].outs, *STAGES[stage].scratch, "stage.log"))
    return repo


def interrupt(repo: Path, stage: str, sig: str, after: float) -> int | None:
    """Run `stage` and send it SIG<sig> `after` seconds past the moment it had kept work (`progressed`); its
    exit code, or None if it ended first (noted in its log). A Ctrl-C that lands while the stage forks a
    worker is lost (Python drops an exception raised in its at-fork hooks), so the stage may still end well."""
    proc = launch(repo, stage)
    progressed(proc, repo, stage)
    proc.join(after)
    with contextlib.suppress(ProcessLookupError):  # it may end between the check and the signal
        if proc.exitcode is None:
            os.kill(proc.pid, getattr(signal, f"SIG{sig}"))
    stopped = _join(proc, 60)
    with (repo / "stage.log").open("a") as f:
        f.write(f"\n[test: SIG{sig} {after:.2f} s on: exit code {proc.exitcode}]\n")
    assert stopped, f"{stage} went on for a minute after SIG{sig}"
    return proc.exitcode or None


def _join(proc: multiprocessing.Process, seconds: float) -> bool:
    """Wait for `proc` to end; past `seconds`, kill it. Whether it ended by itself."""
    proc.join(seconds)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        return False
    return True


@pytest.mark.parametrize(("stage", "signals", "seed"), CASES)
def test_an_interrupted_stage_reruns_to_the_outputs_of_an_uninterrupted_run(
    reference, tmp_path, stage, signals, seed
):
    _, expected, seconds = reference
    repo, saved = before(reference, tmp_path, stage), tmp_path / "saved"
    rng = random.Random(seed)
    kept, total = seconds[stage]
    dropped = tuple(o for o in STAGES[stage].outs if o not in STAGES[stage].persist)
    for sig in signals:  # a moment in the part of the run after it kept work (if it keeps any before the end)
        share = rng.uniform(0.0, 1.0)
        shutil.copytree(repo, saved)
        # The reference's times were measured under another load: a run that ends first is replayed, sooner.
        while (code := interrupt(repo, stage, sig, share * (total - kept))) is None:
            assert share > 0.01, (repo / "stage.log").read_text()[-3000:]
            share /= 2
            shutil.rmtree(repo)
            shutil.copytree(saved, repo)
        shutil.rmtree(saved)
        log = (repo / "stage.log").read_text()
        assert code == (130 if sig == "INT" else -signal.SIGKILL), log[-3000:]
        if sig == "INT":  # the note follows a progress bar's last state on its line
            note = log[log.rindex("interrupted: ") :].splitlines()[0]
            assert note.startswith(f"interrupted: {STAGES[stage].kept}; run the stage again")
        if rng.random() < 0.5:
            remove(repo, dropped)  # as `dvc repro` does before it reruns the stage
    finish(repo, stage)
    assert differences(repo, stage, expected[stage]) == []


@pytest.mark.parametrize("stage", ["instructions", "trajectories", "init_model"])
def test_a_rerun_with_the_same_inputs_writes_the_same_bytes(reference, tmp_path, stage):
    repo = before(reference, tmp_path, stage)
    finish(repo, stage)
    assert differences(repo, stage, reference[1][stage]) == []


def processes() -> dict[tuple[int, str], tuple[int, str]]:
    """Every live process (Linux /proc): (pid, start time) -> (parent pid, command name)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has ended; only its parent's wait is missing
            found[(int(stat.parent.name), fields[19])] = (int(fields[1]), name)
    return found


def descendants(pid: int) -> dict[tuple[int, str], str]:
    """The live processes below `pid`: (pid, start time) -> command name."""
    table, found, frontier = processes(), {}, {pid}
    while frontier:
        below = {key: name for key, (parent, name) in table.items() if parent in frontier}
        frontier = {p for p, _ in below} - {p for p, _ in found}
        found |= below
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_no_trajectories_worker_outlives_a_kill_of_its_stage(reference, tmp_path):
    """The real command line, killed once its workers and their progress queue's manager run: every process
    below the stage ends with it (before: three of them played on and wrote), and a rerun completes it."""
    repo = before(reference, tmp_path, "trajectories")
    with (repo / "stage.log").open("w") as log:
        cmd = [sys.executable, "-m", "stages.trajectories"]
        proc = subprocess.Popen(cmd, cwd=repo, env=ENV, stdout=log, stderr=log)
    deadline = time.monotonic() + 180
    while len(below := descendants(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None and len(below) >= 3, (below, (repo / "stage.log").read_text()[-3000:])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while (left := below.keys() & processes().keys()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, {below[key] for key in left}
    finish(repo, "trajectories")
    assert differences(repo, "trajectories", reference[1]["trajectories"]) == []


def test_a_partial_checkpoint_does_not_break_a_rerun(reference, tmp_path):
    """Checkpoints left as a kill mid-write leaves them (before they were staged, or while staged): SFT's
    without trainer_state.json, RL's state file truncated, and the temporary files. The rerun starts afresh
    and ends where an uninterrupted run does."""
    for stage in ["sft", "rl"]:
        repo = before(reference, tmp_path / stage, stage)
        assert interrupt(repo, stage, "KILL", 0.0), f"{stage} ended before its first checkpoint"
        checkpoint = max(repo.glob(STAGES[stage].progress))
        if stage == "sft":
            (checkpoint / "trainer_state.json").unlink()
            staged = checkpoint.parent / ".incomplete" / "checkpoint-99"
            staged.mkdir(parents=True)
            (staged / "model.safetensors").write_bytes(b"half")
        else:
            checkpoint.write_bytes(checkpoint.read_bytes()[:100])
            (checkpoint.parent / ".state.pt.x.tmp").write_bytes(b"half")
        finish(repo, stage)
        assert differences(repo, stage, reference[1][stage]) == []
        assert not (repo / STAGES[stage].scratch[0]).exists()  # removed with the run's end
