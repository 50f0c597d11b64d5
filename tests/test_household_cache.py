"""The household game cache is bounded (issue 37): a client of `gymflow serve-env household` that names many
seeds cannot fill the disk, the least recently used games go first, a game another process uses or plays is
never taken from it, and the pipeline's own household sets fit the default bound."""

import multiprocessing
import os
import queue
import time
from itertools import islice
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

import gymflow.envs.household as household
from gymflow.envs.household import (
    CACHE_MB_VAR,
    DEFAULT_CACHE_MB,
    Household,
    cache_limit,
    cache_root,
    evict,
    game_file,
)
from gymflow.errors import UserError
from gymflow.remote.env_server import create_app

ROOT = Path(__file__).resolve().parents[1]
HOUR = 3600


@pytest.fixture(scope="module")
def tasks():
    """Nine household tasks (seeds of their own), made once: making one costs a TextWorld game."""
    return list(islice(Household.generate("train", 11), 9))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty game cache of this test's own (its folder)."""
    monkeypatch.setenv("GYMFLOW_CACHE", str(tmp_path))
    return cache_root()


def settings(task) -> dict[str, int]:
    return {k: int(task.hidden[k]) for k in ("quest_length", "rooms", "objects")}


def games(root: Path) -> dict[str, os.stat_result]:
    """The cached games: .z8 name -> its stat."""
    return {p.name: p.stat() for p in root.glob("*.z8")}


def disk(root: Path) -> int:
    """Bytes of every file the cache holds but the theme (a few KB, written once)."""
    return sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.parent.name.startswith("theme")
    )


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def play(env: Household, task) -> float:
    env.reset(task)
    for action in task.hidden["walkthrough"]:
        env.step(action)
    return env.reward


@pytest.mark.parametrize(
    ("value", "mib"),
    [("", DEFAULT_CACHE_MB), ("512", 512), (" 0.5 ", 0.5), ("0", 0), ("1e3", 1000)],
)
def test_the_bound_is_read_from_its_variable(monkeypatch, value, mib):
    monkeypatch.setenv(CACHE_MB_VAR, value)
    assert cache_limit() == int(mib * 2**20)


@pytest.mark.parametrize("value", ["-1", "abc", "inf", "nan", "1 GB", "10" * 400])
def test_a_bad_bound_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(CACHE_MB_VAR, value)
    with pytest.raises(UserError, match=f"^{CACHE_MB_VAR}=.* is not a size: .*MiB") as err:
        cache_limit()
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


@pytest.mark.slow  # TextWorld compiles with Inform 7's processes
def test_a_client_naming_many_seeds_keeps_the_disk_bounded_and_the_game_it_plays_cached(
    tasks, cache, monkeypatch
):
    """Through the server's app: nine games sent with a bound of three; the one the client keeps resetting
    between them is compiled once (same inode) and the disk use never passes the bound."""
    monkeypatch.setattr(household, "IN_USE_SECONDS", 0.0)  # every game but the newest may go at once
    monkeypatch.setenv(CACHE_MB_VAR, "1.5")  # a game is 400-440 KB: three fit, never four
    limit = cache_limit()
    app = TestClient(create_app("household", []), raise_server_exceptions=False)
    kept, *others = tasks
    sid = app.post("/create", json={"task": kept.to_row()}).json()["id"]
    first = game_file(kept.seed, settings(kept))
    inode = first.stat().st_ino
    for n, task in enumerate(others, 1):
        other = app.post("/create", json={"task": task.to_row()})
        assert other.status_code == 200, other.text
        app.post("/close", json={"id": other.json()["id"]})
        assert disk(cache) <= limit, f"{disk(cache):,} bytes after {n + 1} games"
        res = app.post("/reset", json={"id": sid, "task": kept.to_row()})
        assert res.status_code == 200, res.text
        assert first.stat().st_ino == inode  # served from the cache, never compiled again
    assert len(games(cache)) == 3 and first.name in games(cache)
    assert disk(cache) <= limit
    for action in kept.hidden["walkthrough"]:
        out = app.post("/step", json={"id": sid, "action": action}).json()
    assert out["done"] and out["reward"] == 1.0


@pytest.mark.slow  # TextWorld compiles with Inform 7's processes
def test_least_recently_used_goes_first_and_a_game_in_use_never(tasks, cache, monkeypatch):
    monkeypatch.setenv(CACHE_MB_VAR, "0")  # nothing may stay but what is in use
    a, b, c, d = (game_file(t.seed, settings(t)) for t in tasks[:4])  # each compile evicts: all are in use
    assert set(games(cache)) == {a.name, b.name, c.name, d.name}
    for path, hours in ((a, 3), (b, 1), (c, 2)):
        age(path, hours * HOUR)
    leftover = cache / "0123456789abcdef0123.json"  # a .json whose .z8 never arrived (a killed build)
    leftover.write_text("{}")
    age(leftover, HOUR)
    killed = cache / ".build-killed"  # a compile killed midway
    killed.mkdir()
    (killed / "game.json").write_text("{}")
    age(killed, 2 * HOUR)
    size = {p: p.stat().st_size + p.with_suffix(".json").stat().st_size for p in (a, b, c, d)}
    assert evict(cache, sum(size.values()) - size[a]) == sum(size.values()) - size[a]
    assert a.name not in games(cache) and not a.with_suffix(".json").exists()  # the oldest use went
    assert not leftover.exists() and not killed.exists()
    game_file(tasks[1].seed, settings(tasks[1]))  # b used again: now the newest
    evict(cache, 0)
    assert set(games(cache)) == {b.name, d.name}  # c (2 hours) went; b and d were used in the last 30 s
    assert disk(cache) == sum(s.st_size for s in games(cache).values()) + sum(
        p.stat().st_size for p in cache.glob("*.json")
    )


@pytest.mark.slow  # TextWorld compiles with Inform 7's processes
def test_a_game_evicted_while_played_plays_on_and_one_evicted_before_its_copy_is_compiled_again(
    tasks, cache, monkeypatch
):
    task = tasks[0]
    env = Household()
    env.reset(task)
    for path in cache.glob("*.*"):
        age(path, HOUR)
    assert evict(cache, 0) == 0 and not games(cache)
    for action in task.hidden["walkthrough"]:  # the game was read at reset
        step = env.step(action)
    assert step.done and env.reward == 1.0

    copy, taken = household.private_copy, []

    def evicted_first(path):
        """Another process evicts the game between `game_file` and the copy, once."""
        if not taken:
            taken.append(path)
            evict_now(path)
        return copy(path)

    monkeypatch.setattr(household, "private_copy", evicted_first)
    assert play(env, task) == 1.0 and taken
    assert taken[0].exists()  # compiled again
    env.close()


def evict_now(path: Path) -> None:
    """What `evict` does to a game: the .z8, then its .json."""
    path.unlink()
    path.with_suffix(".json").unlink()


def _evicted_between_start_and_reset(task, out) -> None:
    """Play `task` while another process evicts its game after `textworld.start` and before `reset` (Jericho
    opens the story file at both); put the reward, or the error."""
    import textworld

    start, cached = textworld.start, game_file(task.seed, settings(task))

    def start_then_evict(*args, **kwargs):
        game = start(*args, **kwargs)
        if cached.exists():
            evict_now(cached)
        return game

    textworld.start = start_then_evict
    try:
        out.put(play(Household(), task))
    except BaseException as err:
        out.put(repr(err))


@pytest.mark.slow  # a TextWorld compile
def test_a_game_evicted_between_its_start_and_its_reset_still_plays(tasks, cache):
    """Jericho's C code exits the whole process (an env server with it) when the story file is gone at reset;
    a reset plays from a copy of its own. In a child process, so that a regression fails the test, not pytest."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_evicted_between_start_and_reset, args=(tasks[2], out), daemon=True)
    child.start()
    child.join(timeout=120)
    child.kill()
    assert child.exitcode == 0, f"the child exited with {child.exitcode}"
    assert out.get(timeout=5) == 1.0
    assert not games(cache)  # it was evicted indeed


def _churn(order: list[int], tasks, out) -> None:
    """A worker of a stage's pool: reset and win each task of `order`, beside others that evict."""
    household.IN_USE_SECONDS = 0.0  # evict even what another process has just looked up
    env = Household()
    try:
        out.put([play(env, tasks[i]) for i in order])
    except BaseException as err:  # the failure, for the test to show
        out.put(repr(err))
    finally:
        env.close()


@pytest.mark.slow  # worker processes and TextWorld compiles
def test_processes_that_build_load_and_evict_together_all_play_their_games(tasks, cache, monkeypatch):
    """Three processes share a cache bounded to two games and evicting at once: every reset still loads a whole
    game of its own task (the walkthrough wins), and the cache ends within its bound."""
    monkeypatch.setenv(CACHE_MB_VAR, "0.85")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    orders = [[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 3, 2], [1, 3, 0, 2, 1, 3]]
    procs = [ctx.Process(target=_churn, args=(o, tasks, out), daemon=True) for o in orders]
    for p in procs:
        p.start()
    try:  # a worker that dies puts nothing: wait for the others, then name it
        results = [out.get(timeout=300) for _ in procs]
    except queue.Empty:
        results = [f"exit code {p.exitcode}" for p in procs if p.exitcode]
    finally:
        for p in procs:
            p.join(timeout=30)
            p.kill()  # never left for pytest's exit to wait on
    assert results == [[1.0] * 6] * 3, results
    monkeypatch.setattr(household, "IN_USE_SECONDS", 0.0)
    assert disk(cache) <= cache_limit() + 3 * 450_000  # at most one game per process past it, in flight
    assert evict(cache, cache_limit()) <= cache_limit()


@pytest.mark.slow  # a TextWorld compile
def test_the_pipelines_household_sets_fit_the_default_bound(tasks, cache, monkeypatch):
    """Every household game params.yaml's train and eval sets name stays cached under the default bound, with
    room for four times as many (the sets' games are filled in as sparse files as large as the largest game of
    any level, plus one real compile; none is evicted)."""
    monkeypatch.delenv(CACHE_MB_VAR, raising=False)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())["instructions"]
    n = params["train"]["household"] + params["eval"]["household"]
    levels = {t.difficulty: t for t in tasks}
    assert set(levels) == set(household.LEVELS)
    largest = max(
        (p.stat().st_size, p.with_suffix(".json").stat().st_size)
        for p in (game_file(t.seed, settings(t)) for t in levels.values())
    )
    assert n * sum(largest) * 4 <= cache_limit()
    for i in range(n):
        for suffix, size in zip((".z8", ".json"), largest, strict=True):
            path = cache / f"pipeline-game-{i:04d}{suffix}"
            with open(path, "wb") as f:
                f.truncate(size)
            age(path, HOUR + i)
    before = games(cache)
    game_file(tasks[-1].seed, settings(tasks[-1]))  # a compile: evicts if the cache is past its bound
    assert set(before) <= set(games(cache))
    assert evict(cache, cache_limit()) == disk(cache)


def test_serve_env_household_refuses_a_bad_bound_before_it_serves(monkeypatch, tmp_path, capsys):
    from gymflow.cli import main

    monkeypatch.setenv(CACHE_MB_VAR, "-5")
    with pytest.raises(SystemExit) as stop:
        main(["--data", str(tmp_path), "serve-env", "household"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {CACHE_MB_VAR}=-5 is not a size")
