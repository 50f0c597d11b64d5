"""`gymflow serve-model` and its client: through HTTP, the same ids and log-probabilities as in process."""

import socket
import subprocess
import sys

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from gymflow.agent.chat import ChatFormat
from gymflow.config import ModelConfig
from gymflow.envs import ENVS, make_env
from gymflow.envs.instructions import build_splits
from gymflow.models.build import build_model, load_tokenizer
from gymflow.models.openai_client import CompletionClient
from gymflow.models.sampling import sample
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.engine import SamplingConfig, episode_ids_and_mask, rollout
from gymflow.rollout.expert import run_expert
from gymflow.serving import free_port, started

TASKS = build_splits(ENVS["maze"], seed=0, n_train=4, n_eval=0)["train"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny model and its tokenizer, saved as the init_model stage saves them."""
    path = tmp_path_factory.mktemp("model")
    env = make_env("maze")
    texts = [m.text for t in TASKS for m in run_expert(env, t).messages]
    tokenizer = train_tokenizer(texts * 3, 400)
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, layers=2, heads=4, kv_heads=2, max_length=1024)
    build_model(cfg, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def server_log(tmp_path_factory):
    return tmp_path_factory.mktemp("server") / "log.txt"


@pytest.fixture(scope="module")
def url(saved, server_log):
    port = free_port()
    cmd = [sys.executable, "-m", "gymflow", "serve-model", str(saved), "--port", str(port)]
    base = f"http://127.0.0.1:{port}/v1"
    with started(cmd, f"{base}/models", server_log):
        yield base


@pytest.fixture(scope="module")
def model(saved):
    return AutoModelForCausalLM.from_pretrained(saved).eval()


@pytest.fixture(scope="module")
def fmt(saved):
    return ChatFormat(load_tokenizer(saved))


@pytest.fixture(scope="module")
def client(url):
    return CompletionClient(url)


@pytest.mark.slow  # a `gymflow serve-model` process
def test_client_greedy_equals_in_process_sample_for_a_batch_of_unequal_prompts(client, model, fmt, saved):
    spec = ENVS["maze"].spec
    first, second = (fmt.prompt(spec.system_prompt, make_env("maze").reset(t)) for t in TASKS[:2])
    prompts = [first, second[:100], fmt.encode("Thought: the goal")]
    assert len({len(p) for p in prompts}) == 3
    assert client.model == str(saved)
    remote = client.complete(prompts, 12, [fmt.eos_id], temperature=0)
    local = sample(model, prompts, 12, [fmt.eos_id], fmt.tokenizer.pad_token_id, temperature=0)
    for got, ref in zip(remote, local, strict=True):
        assert got.token_ids == ref.token_ids and got.finish_reason == ref.finish_reason
        assert got.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


@pytest.mark.slow  # a `gymflow serve-model` process
def test_rollout_through_the_server_equals_the_in_process_engine(client, model, fmt):
    cfg = SamplingConfig(temperature=0, max_new_tokens=8, batch_size=4)
    jobs = [(t, 0) for t in TASKS]
    remote = rollout(client, fmt, jobs, cfg, horizon=3)
    local = rollout(model, fmt, jobs, cfg, horizon=3)
    for a, b in zip(remote, local, strict=True):
        assert [(m.role, m.text, m.action, m.token_ids) for m in a.messages] == [
            (m.role, m.text, m.action, m.token_ids) for m in b.messages
        ]
        assert (a.turns, a.end_reason, a.tokens) == (b.turns, b.end_reason, b.tokens)
        stored = lambda ep: [x for m in ep.messages for x in m.logprobs or []]  # noqa: E731
        assert stored(a) == pytest.approx(stored(b), abs=1e-4)
        ids, _ = episode_ids_and_mask(a.messages, fmt)
        assert a.tokens == len(ids) and sum(m.role == "assistant" for m in a.messages) == a.turns == 3


@pytest.mark.slow  # a `gymflow serve-model` process
def test_a_stop_string_ends_the_text_before_it_and_keeps_the_ids(url, fmt):
    body = {"prompt": "Thought: the goal", "max_tokens": 10, "temperature": 0, "logprobs": 0}
    first = httpx.post(f"{url}/completions", json=body | {"return_tokens_as_token_ids": True}).json()
    ids = [int(t.removeprefix("token_id:")) for t in first["choices"][0]["logprobs"]["tokens"]]
    text = fmt.tokenizer.decode(ids, skip_special_tokens=True)
    stop = text.strip()[1:3]
    assert len(stop) == 2, text  # the untrained model writes some text
    k = next(
        k for k in range(1, len(ids) + 1) if stop in fmt.tokenizer.decode(ids[:k], skip_special_tokens=True)
    )
    (choice,) = httpx.post(f"{url}/completions", json=body | {"stop": [stop]}).json()["choices"]
    sampled = fmt.tokenizer.decode(ids[:k], skip_special_tokens=True)
    assert choice["text"] == sampled[: sampled.index(stop)] and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == stop
    assert len(choice["logprobs"]["tokens"]) == k  # every sampled token, the one that completed the stop too
    assert choice["logprobs"]["token_logprobs"] == first["choices"][0]["logprobs"]["token_logprobs"][:k]


@pytest.mark.slow  # a `gymflow serve-model` process
@pytest.mark.parametrize(
    "body",
    [
        {"prompt": [1, 2], "max_tokens": -1},
        {"prompt": {"ids": [1, 2]}},
        {"prompt": [[1, 2], [3, 10**6]]},
        {"prompt": []},
        {"prompt": [1, 2], "top_p": 0},
        {"prompt": [1, 2], "max_tokens": 5000},
    ],
)
def test_a_bad_request_gets_400_with_a_one_line_message(url, body):
    response = httpx.post(f"{url}/completions", json=body)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message and "\n" not in message


@pytest.mark.slow  # a `gymflow serve-model` process
def test_an_unknown_model_name_gets_404(url):
    response = httpx.post(f"{url}/completions", json={"model": "gpt-4", "prompt": [1, 2]})
    assert response.status_code == 404


@pytest.mark.slow  # a `gymflow serve-model` process
def test_serve_model_on_a_missing_path_exits_with_one_line(tmp_path):
    missing = tmp_path / "no-model"
    done = subprocess.run(
        [sys.executable, "-m", "gymflow", "serve-model", str(missing), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().startswith("error:") and str(missing) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a `gymflow serve-model` process
def test_sampling_params_reach_the_server(client, fmt):
    """A seeded request is reproducible; temperature and top_p change the draw but not the logprobs' meaning."""
    prompt = [fmt.encode("Thought: the goal")]
    a = client.complete(prompt, 6, [fmt.eos_id], temperature=1.0, top_p=0.9, seed=3)
    b = client.complete(prompt, 6, [fmt.eos_id], temperature=1.0, top_p=0.9, seed=3)
    assert a[0].token_ids == b[0].token_ids and len(a[0].logprobs) == len(a[0].token_ids)
    assert all(x <= 0 for x in a[0].logprobs) and torch.isfinite(torch.tensor(a[0].logprobs)).all()


@pytest.mark.slow  # a `gymflow serve-model` process
def test_evaluate_through_a_server_stores_what_the_in_process_policy_plays(saved, url, tmp_path):
    from gymflow.config import EvalParams, RolloutParams
    from gymflow.eval.agenteval import evaluate_policy
    from gymflow.store.db import connect

    cfg, play = EvalParams(envs=["maze"], k=0, temperature=1.0), RolloutParams(max_new_tokens=12)
    tasks = {"maze": TASKS[:3]}
    local = evaluate_policy("p", saved, tasks, cfg, play, tmp_path / "local")
    served_play = play.model_copy(update={"servers": {"p": url}})
    served = evaluate_policy("p", saved, tasks, cfg, served_play, tmp_path / "served")
    assert local["maze"]["all"]["turns"] == served["maze"]["all"]["turns"] > 0
    query = "select t.token_ids from turns t join episodes e using (episode_id) order by e.task_id, t.turn"
    ids = [connect(tmp_path / d).execute(query).fetchall() for d in ("local", "served")]
    assert ids[0] == ids[1] and any(row[0] for row in ids[0])  # greedy: the same sampled ids, stored


def test_a_client_with_no_server_behind_its_url_is_a_one_line_user_error():
    from gymflow.errors import UserError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nothing listens once the socket closes
    with pytest.raises(UserError, match=f"no completion server answers at http://127.0.0.1:{port}/v1"):
        CompletionClient(f"http://127.0.0.1:{port}/v1", timeout=5)


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--port", "-1"], "error: --port must be between 1 and 65535 (got -1)"),
        (["--port", "0"], "error: --port must be between 1 and 65535 (got 0)"),
        (["--port", "65536"], "error: --port must be between 1 and 65535 (got 65536)"),
        (["--port", "BUSY"], "Address already in use; choose another --port"),
        (["--host", "no-such-host.invalid"], "error: cannot listen on no-such-host.invalid:"),
        (["--max-n", "0"], "error: --max-n must be at least 1 (got 0)"),
        (["--max-batch-tokens", "-5"], "error: --max-batch-tokens must be at least 1 (got -5)"),
    ],
)
def test_serve_model_with_a_bad_port_or_limit_is_a_one_line_error(saved, busy_port, capsys, flags, message):
    from gymflow.cli import main

    flags = [str(busy_port) if f == "BUSY" else f for f in flags]
    with pytest.raises(SystemExit) as exit:
        main(["serve-model", str(saved), *flags])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error:") and message in err


@pytest.mark.slow  # a `gymflow serve-model` process
def test_serve_model_port_minus_one_from_the_shell(saved):
    done = subprocess.run(
        [sys.executable, "-m", "gymflow", "serve-model", str(saved), "--port", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr == "error: --port must be between 1 and 65535 (got -1)\n"


@pytest.mark.slow  # a `gymflow serve-model` process
def test_the_limits_are_printed_at_start_up(url, server_log):
    log = server_log.read_text()
    assert "limits: n <= 64, prompts x n <= 256, max_tokens <= 1024" in log
    assert "<= 262144 tokens, 8 requests in flight, bodies <= 4 MB" in log
