"""A real vLLM server (vLLM for CPUs, ./install.sh --vllm) samples what the in-process sampler samples, and
`vllm_server` starts and stops it: the tests marked `vllm` need .venv-vllm and are skipped without it; the
others drive `vllm_server` with a stand-in for vLLM's interpreter."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.errors import UserError
from gymflow.models import vllm
from gymflow.models.build import build_model, load_tokenizer
from gymflow.models.openai_client import CompletionClient
from gymflow.models.sampling import sample
from gymflow.models.tokenizer import train_tokenizer
from gymflow.models.vllm import VllmError, vllm_server
from gymflow.rollout.expert import run_expert
from gymflow.serving import free_port
from tests.conftest import TINY

pytestmark = pytest.mark.slow  # a vLLM server, or its stand-in, as processes

TASKS = build_splits(ENVS["maze"], seed=0, n_train=4, n_eval=0)["train"]
needs_vllm = pytest.mark.skipif(
    not (vllm.VENV / "bin" / "python").exists(),
    reason="vLLM is not installed: ./install.sh --vllm builds .venv-vllm",
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """conftest's tiny model with one head of 32 dimensions, the smallest vLLM's CPU attention takes."""
    path = tmp_path_factory.mktemp("model")
    env = make_env("maze")
    tokenizer = train_tokenizer([m.text for t in TASKS for m in run_expert(env, t).messages] * 3, 400)
    build_model(TINY.model_copy(update={"heads": 1, "kv_heads": 1}), tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def url(saved, tmp_path_factory):
    # --enforce-eager: no torch.compile warm-up, which took a cold start from 21 s to 49 s here
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with vllm_server(saved, extra_args=["--enforce-eager"], log=log) as url:
        yield url


@pytest.fixture(scope="module")
def fmt(saved):
    return ChatFormat(load_tokenizer(saved))


@pytest.mark.vllm
@needs_vllm
def test_vllm_greedy_ids_and_logprobs_equal_the_in_process_sampler(url, saved, fmt):
    spec = ENVS["maze"].spec
    firsts = [fmt.prompt(spec.system_prompt, make_env("maze").reset(t)) for t in TASKS]
    short = [firsts[1][:100], firsts[2][:50], firsts[3][:7], fmt.encode("Thought: the goal"), [fmt.eos_id]]
    prompts = [*firsts, *short]
    assert len({len(p) for p in prompts}) == 6 and len(set(map(tuple, prompts))) == 9  # unequal prompts
    client = CompletionClient(url)
    assert client.model == str(saved)
    remote = client.complete(prompts, 24, [fmt.eos_id], temperature=0)
    model = AutoModelForCausalLM.from_pretrained(saved).eval()
    local = sample(model, prompts, 24, [fmt.eos_id], fmt.tokenizer.pad_token_id, temperature=0)
    for got, ref in zip(remote, local, strict=True):
        assert got.token_ids == ref.token_ids and got.finish_reason == ref.finish_reason
        assert got.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
    assert len({tuple(c.token_ids) for c in remote}) > 1  # the prompts lead to different replies


@pytest.mark.vllm
@needs_vllm
def test_an_evaluation_sampled_by_vllm_plays_the_in_process_episodes(url, saved, tmp_path):
    from gymflow.config import EvalParams, RolloutParams
    from gymflow.eval.agenteval import evaluate_policy
    from gymflow.store.db import connect

    cfg, play = EvalParams(envs=["maze"], k=0), RolloutParams(max_new_tokens=16, batch_size=4)
    local = evaluate_policy("p", saved, {"maze": TASKS}, cfg, play, tmp_path / "local")
    served = play.model_copy(update={"servers": {"p": url}})
    remote = evaluate_policy("p", saved, {"maze": TASKS}, cfg, served, tmp_path / "served")
    assert local["maze"]["all"]["turns"] == remote["maze"]["all"]["turns"] > 0
    episodes = "select task_id, reward, success, turns, end_reason, tokens from episodes order by task_id"
    turns = (
        "select e.task_id, t.turn, t.role, t.text, t.token_ids, t.reward, t.logprobs from turns t "
        "join episodes e using (episode_id) order by e.task_id, t.turn"
    )
    db = {d: connect(tmp_path / d) for d in ("local", "served")}
    assert db["local"].execute(episodes).fetchall() == db["served"].execute(episodes).fetchall()
    a, b = (db[d].execute(turns).fetchall() for d in ("local", "served"))
    assert [r[:6] for r in a] == [r[:6] for r in b]  # the same messages, sampled ids and rewards
    assert sum(len(r[4] or []) for r in a) > len(TASKS)  # the policy wrote something in every episode
    logprobs = lambda rows: [x for r in rows for x in r[6] or []]  # noqa: E731
    assert logprobs(b) == pytest.approx(logprobs(a), abs=1e-4)


# vllm_server without vLLM: a stand-in interpreter that serves /health and, like vLLM's engine, leaves a
# process of its own behind when it is killed.
FAKE = """#!{python}
import http.server, os, subprocess, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
print("loading", sys.argv[sys.argv.index("--model") + 1], flush=True)
if os.environ.get("FAKE_MODE") == "crash":
    print("RuntimeError: no kernel for this model", flush=True)
    sys.exit(3)
engine = subprocess.Popen(["sleep", "600"])
with open(os.environ["FAKE_PIDS"], "w") as f:
    f.write(f"{{os.getpid()}} {{engine.pid}}")
if os.environ.get("FAKE_MODE") == "mute":
    time.sleep(600)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        if os.environ.get("FAKE_MODE") == "once":  # dies after its first answer
            os._exit(1)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def fake(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE.format(python=sys.executable))
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 64, "num_attention_heads": 1}')
    return python, model, tmp_path / "pids"


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


def gone(pids: list[int], within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(map(alive, pids))


linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


@linux
def test_the_server_and_the_processes_it_left_stop_when_the_block_ends_or_fails(fake):
    python, model, pids = fake
    with vllm_server(model, python=python, env={"FAKE_PIDS": str(pids)}) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        first = [int(p) for p in pids.read_text().split()]
        assert all(map(alive, first))
    assert gone(first)
    with pytest.raises(KeyError), vllm_server(model, python=python, env={"FAKE_PIDS": str(pids)}):
        second = [int(p) for p in pids.read_text().split()]
        raise KeyError("a stage's error")
    assert gone(second)


@linux
def test_the_server_dies_with_a_killed_parent(fake):
    python, model, pids = fake
    code = textwrap.dedent(f"""
        import time
        from gymflow.models.vllm import vllm_server
        with vllm_server({str(model)!r}, python={str(python)!r}, env={{"FAKE_PIDS": {str(pids)!r}}}):
            print("up", flush=True)
            time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "up\n"
        server = [int(p) for p in pids.read_text().split()]
        os.kill(parent.pid, signal.SIGKILL)
        assert gone(server)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.parametrize(
    "mode,message",
    [("crash", "vLLM exited with code 3 while starting:\n"), ("mute", "did not answer http://127.0.0.1:")],
    ids=["exits", "never-answers"],
)
def test_a_server_that_does_not_come_up_is_an_error_with_its_last_log_lines(fake, mode, message):
    python, model, pids = fake
    env = {"FAKE_MODE": mode, "FAKE_PIDS": str(pids)}
    with pytest.raises(VllmError) as error, vllm_server(model, python=python, env=env, timeout=3):
        pass
    assert message in str(error.value) and f"loading {model}" in str(error.value)
    if mode == "mute":
        assert gone([int(p) for p in pids.read_text().split()])
    else:
        assert "RuntimeError: no kernel for this model" in str(error.value)


def test_without_the_vllm_environment_the_error_says_how_to_install_it(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(vllm, "VENV", tmp_path / ".venv-vllm")
    with pytest.raises(UserError, match=r"run ./install.sh --vllm$"), vllm_server(fake[1]):
        pass


def test_a_missing_model_or_one_whose_heads_vllm_for_cpus_lacks_is_a_user_error(fake, monkeypatch, tmp_path):
    python, model, _ = fake
    monkeypatch.setattr(vllm, "VENV", tmp_path / "venv")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(python)
    with pytest.raises(UserError, match="no model in"):
        vllm.vllm_command(tmp_path / "nothing", 8000)
    assert vllm.vllm_command(model, 8000)[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    (model / "config.json").write_text('{"hidden_size": 32, "num_attention_heads": 2}')
    with pytest.raises(UserError, match="attention heads have 16 dimensions"):
        vllm.vllm_command(model, 8000)


def test_serve_vllm_turns_a_server_that_fails_or_dies_into_a_one_line_error(fake, capsys):
    python, model, pids = fake
    env = {"FAKE_MODE": "crash", "FAKE_PIDS": str(pids)}
    with pytest.raises(UserError, match=r"^vLLM exited with code 3 while starting; the end of its log \("):
        vllm.serve(model, free_port(), python=python, env=env)
    assert "RuntimeError: no kernel for this model" in capsys.readouterr().err

    port = free_port()
    env = {"FAKE_MODE": "once", "FAKE_PIDS": str(pids)}
    with pytest.raises(UserError, match=f"^vLLM stopped answering at http://127.0.0.1:{port}/v1; the end"):
        vllm.serve(model, port, python=python, env=env)
    assert "serving" in capsys.readouterr().out


def test_serve_vllm_refuses_a_port_out_of_range(fake):
    with pytest.raises(UserError, match=r"^--port must be between 1 and 65535 \(got 0\)$"):
        vllm.serve(fake[1], 0, python=fake[0])


@pytest.mark.vllm
@needs_vllm
def test_ray_workers_sampling_through_vllm_play_the_in_process_episodes(url, saved, fmt):
    """Two Ray workers, each with its own client of the vLLM endpoint (rollout.servers lists one per worker)."""
    pytest.importorskip("ray")
    import ray

    from gymflow.rollout.distributed import Placement, play_jobs
    from gymflow.rollout.engine import SamplingConfig, rollout

    cfg = SamplingConfig(temperature=0.0, max_new_tokens=16, max_length=1024, batch_size=2)
    jobs = [(t, 0) for t in TASKS]
    model = AutoModelForCausalLM.from_pretrained(saved).eval()
    local = rollout(model, fmt, jobs, cfg, horizon=3)
    try:
        where = Placement("ray", workers=2, servers=(url, url))
        spread = play_jobs(CompletionClient(url), fmt, jobs, cfg, horizon=3, where=where)
    finally:
        ray.shutdown()
    assert [[m.token_ids for m in e.messages] for e in spread] == [
        [m.token_ids for m in e.messages] for e in local
    ]
    assert [e.reward for e in spread] == [e.reward for e in local]
