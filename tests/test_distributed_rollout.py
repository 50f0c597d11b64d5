"""Rollouts placed elsewhere: environments on `gymflow serve-env` servers, episodes on Ray workers. Where an
episode plays must not change what is stored: the same ids, log-probabilities and rewards."""

import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psutil
import pytest
import torch

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.envs.textcraft import TextCraft
from gymflow.errors import UserError
from gymflow.eval.same_episodes import compare
from gymflow.models.build import build_model
from gymflow.models.openai_client import CompletionClient
from gymflow.models.tokenizer import train_tokenizer
from gymflow.remote.env_client import EnvMaker, HttpEnv
from gymflow.remote.env_server import running
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.distributed import Placement, play_jobs
from gymflow.rollout.engine import EarlyStop, SamplingConfig, rollout
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.serving import free_port, started

MAZES = build_splits(Maze, 6, 0, seed=0)["train"]
CRAFT = build_splits(TextCraft, 0, 2, seed=0)["eval"]
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=24, max_length=1024, batch_size=2)
SAMPLED = SamplingConfig(temperature=1.0, max_new_tokens=24, max_length=1024, batch_size=2)


@pytest.fixture(scope="module")
def fmt():
    texts = [m.text for t in MAZES + CRAFT for m in run_expert(make_env(t.env), t).messages]
    return ChatFormat(train_tokenizer(texts * 3, 400))


@pytest.fixture(scope="module")
def model(fmt):
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=2, heads=4, kv_heads=2, max_length=1024)
    return build_model(cfg, fmt.tokenizer).eval()


@pytest.fixture(scope="module")
def maze_servers():
    with running("maze", "--n", "2") as a, running("maze", "--n", "2") as b:
        yield [a, b]


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    yield
    ray.shutdown()


@contextmanager
def served(model_dir):
    """`gymflow serve-model model_dir` on a free loopback port: its URL and its process (psutil)."""
    port = free_port()
    cmd = [sys.executable, "-m", "gymflow", "serve-model", str(model_dir), "--port", str(port)]
    url = f"http://127.0.0.1:{port}/v1"
    with started(cmd, f"{url}/models") as proc:
        yield url, psutil.Process(proc.pid)


def same(a, b, logprob_tol=0.0):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.task.task_id, x.sample, x.reward, x.turns, x.end_reason) == (
            y.task.task_id,
            y.sample,
            y.reward,
            y.turns,
            y.end_reason,
        )
        assert [m.text for m in x.messages] == [m.text for m in y.messages]
        assert [m.token_ids for m in x.messages] == [m.token_ids for m in y.messages]
        for m, n in zip(x.messages, y.messages, strict=True):
            if m.logprobs:
                assert torch.allclose(torch.tensor(m.logprobs), torch.tensor(n.logprobs), atol=logprob_tol)


@pytest.mark.slow  # `gymflow serve-env` processes
def test_served_environments_give_the_episodes_of_in_process_ones(model, fmt, maze_servers, one_thread):
    jobs = [(t, k) for t in MAZES[:3] for k in range(2)]
    local = rollout(model, fmt, jobs, SAMPLED, horizon=4, generator=torch.Generator().manual_seed(3))
    made = EnvMaker({"maze": maze_servers})
    remote = rollout(model, fmt, jobs, SAMPLED, 4, torch.Generator().manual_seed(3), make=made)
    same(local, remote)
    assert made.made["maze"] == 2  # one environment per episode of a batch, reused batch after batch


@pytest.mark.slow  # `gymflow serve-env` processes
def test_a_server_dying_mid_run_ends_its_episodes_as_error_and_the_rest_play_on(model, fmt, one_thread):
    jobs = [(MAZES[0], 0), (CRAFT[0], 0), (MAZES[1], 0), (CRAFT[1], 0)]
    with ExitStack() as server:
        url = server.enter_context(running("maze", "--n", "2"))
        steps = {"n": 0}

        class Dying(HttpEnv):
            def _step(self, action):
                steps["n"] += 1
                if steps["n"] == 3:  # the server goes at the first maze's third turn
                    server.close()
                return super()._step(action)

        def make(name):
            return Dying(name, [url], retries=0) if name == "maze" else make_env(name)

        episodes = rollout(model, fmt, jobs, GREEDY, horizon=4, make=make)
    reasons = {(e.task.env, e.task.task_id): e.end_reason for e in episodes}
    assert [reasons[(t.env, t.task_id)] for t, _ in jobs] == ["error", "turn_limit", "error", "turn_limit"]
    broken = episodes[0]
    assert broken.success is False and "environment unavailable" in broken.messages[-1].text
    assert broken.turns == 3 and broken.messages[-2].role == "assistant"  # the unplayed reply is kept
    assert episodes[2].turns == 0 and len(episodes[2].messages) == 2  # its reset found no server


JOIN_WITH_A_STALE_RECORD = """
import ray
from gymflow.rollout.distributed import Placement, join_ray
join_ray(Placement("ray", workers=1))
print(ray.cluster_resources().get("CPU"))
ray.shutdown()
"""


@pytest.mark.slow  # Ray
def test_a_stage_without_an_address_starts_its_own_ray_whatever_an_old_cluster_left():
    """A cluster killed without `ray stop` leaves its address in <temp>/ray/ray_current_cluster, which a plain
    `ray.init()` joins (and refuses when given num_cpus): a CI machine had one, and every Ray test failed."""
    with tempfile.TemporaryDirectory(dir="/tmp") as temp:  # short: Ray's socket paths must fit 107 bytes
        (Path(temp) / "ray").mkdir()
        (Path(temp) / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")  # nothing listens there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": temp}
        done = subprocess.run(
            [sys.executable, "-c", JOIN_WITH_A_STALE_RECORD],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "1.0"  # our own instance, one CPU a worker


@pytest.mark.slow  # Ray
def test_ray_workers_give_the_episodes_of_one_process_when_greedy(model, fmt, ray_cluster, one_thread):
    jobs = [(t, 0) for t in MAZES]
    local = rollout(model, fmt, jobs, GREEDY, horizon=3)
    spread = play_jobs(model, fmt, jobs, GREEDY, horizon=3, where=Placement("ray", workers=2))
    same(local, spread, logprob_tol=1e-5)  # another thread count may round the last bit differently


@pytest.mark.slow  # Ray
def test_ray_sampling_does_not_depend_on_the_number_of_workers(
    model, fmt, maze_servers, ray_cluster, one_thread
):
    jobs = [(t, k) for t in MAZES[:3] for k in range(2)]
    draws = [
        play_jobs(
            model,
            fmt,
            jobs,
            SAMPLED,
            horizon=3,
            generator=torch.Generator().manual_seed(5),
            where=Placement("ray", workers=n, env_servers={"maze": maze_servers} if n == 2 else {}),
        )
        for n in (1, 2)
    ]
    same(*draws, logprob_tol=1e-5)
    assert len({tuple(ep.messages[2].token_ids) for ep in draws[0]}) > 1  # sampled: replies differ


@pytest.mark.slow  # Ray
def test_ray_workers_each_sample_through_their_own_completion_server(
    model, fmt, tmp_path, ray_cluster, one_thread
):
    """rollout.servers lists a server per worker: every worker plays on its own, the episodes stay the same."""
    model.save_pretrained(tmp_path)
    fmt.tokenizer.save_pretrained(tmp_path)
    jobs = [(t, 0) for t in MAZES[:4]]
    local = rollout(model, fmt, jobs, GREEDY, horizon=3)
    with served(tmp_path) as (first, a), served(tmp_path) as (second, b):
        before = [p.cpu_times().user for p in (a, b)]
        where = Placement("ray", 2, servers=(first, second))
        spread = play_jobs(CompletionClient(first), fmt, jobs, GREEDY, horizon=3, where=where)
        worked = [p.cpu_times().user - t for p, t in zip((a, b), before, strict=True)]
    same(local, spread, logprob_tol=1e-4)
    # each server sampled for a worker: an idle one uses ~0 s of CPU. Not an equal share: Ray's pool hands the
    # next batch to whichever worker is free, and on a loaded machine one took 90% of the work
    assert min(worked) > 0.05


def test_same_episodes_tells_equal_runs_from_different_ones(model, fmt, tmp_path, one_thread):
    jobs = [(t, 0) for t in MAZES[:3]]
    info = RunInfo("main", "evaluate", 0, "p")
    first = rollout(model, fmt, jobs, GREEDY, horizon=2)
    write_episodes(tmp_path / "a", "maze", first, info)
    write_episodes(tmp_path / "b", "maze", rollout(model, fmt, jobs, GREEDY, horizon=2), info)
    assert compare(tmp_path / "a", tmp_path / "b", 1e-6)[1]
    first[1].messages[2].logprobs[0] += 1e-3  # one log-probability off
    write_episodes(tmp_path / "c", "maze", first, info)
    assert not compare(tmp_path / "a", tmp_path / "c", 1e-4)[1]
    assert compare(tmp_path / "a", tmp_path / "c", 1e-2)[1]
    write_episodes(tmp_path / "d", "maze", rollout(model, fmt, jobs, GREEDY, horizon=3), info)
    assert not compare(tmp_path / "a", tmp_path / "d", 1.0)[1]  # other turn counts


def test_early_stop_is_refused_on_ray(model, fmt):
    with pytest.raises(UserError, match="early_stop needs rollout.engine local"):
        play_jobs(model, fmt, [(MAZES[0], 0)], GREEDY, early_stop=EarlyStop(), where=Placement("ray"))
