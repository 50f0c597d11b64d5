"""`gymflow serve-model` under careless and hostile clients: every mistake is a 4xx in OpenAI's error shape
decided before the model runs, what a request may cost is bounded, and an abandoned request stops using the
model. The server runs in this process (uvicorn in a thread) so a hook on the model counts its forward passes.
"""

import json
import logging
import signal
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from test_serving import saved  # noqa: F401 (a fixture)
from transformers import AutoModelForCausalLM

from gymflow.models.build import load_tokenizer
from gymflow.models.server import Limits, Server, create_app

SMALL = Limits(max_n=4, max_batch=8, max_batch_tokens=2000, max_in_flight=6, max_body_mb=1)
VOCAB, CONTEXT = 400, 1024  # the tiny model's (test_serving.saved)
OK = {"prompt": [5, 6], "max_tokens": 2}


class Probe:
    """A forward pre-hook: records each forward's input shape (rows, new tokens); can hold the model at one
    forward until released, and slow every forward after that (so a missed stop would run long)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.hold_at, self.delay = None, 0.0
        self.holding, self.release = threading.Event(), threading.Event()

    def __call__(self, module, args, kwargs) -> None:
        self.shapes.append(tuple(kwargs["input_ids"].shape))
        if len(self.shapes) == self.hold_at:
            self.holding.set()
            self.release.wait(60)
        if self.hold_at is not None and self.release.is_set():
            time.sleep(self.delay)


@pytest.fixture(scope="module")
def served(saved):  # noqa: F811
    model = AutoModelForCausalLM.from_pretrained(saved).eval()
    probe = Probe()
    model.register_forward_pre_hook(probe, with_kwargs=True)
    assert model.get_input_embeddings().num_embeddings == VOCAB
    assert model.config.max_position_embeddings == CONTEXT
    return model, load_tokenizer(saved), probe


@contextmanager
def running(served, limits: Limits):
    """A live server on a free port; yields (base URL, app, probe, server)."""
    model, tokenizer, probe = served
    app = create_app(model, tokenizer, "tiny", limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = Server(uvicorn.Config(app, log_config=None, access_log=False))  # logs reach caplog
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    probe.reset()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", app, probe, server
    finally:
        probe.release.set()
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def live(served):
    with running(served, SMALL) as server:
        yield server


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def post_and_leave(url: str, body: bytes, length: int | None = None) -> socket.socket:
    """Send a whole request (or fewer bytes than `length` declares) on a raw socket, then close it."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {length or len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _cases():
    """(id, body as bytes, expected status): each a mistake a client can make."""
    j = lambda obj: json.dumps(obj).encode()  # noqa: E731
    yield "seed 2**70", j({**OK, "seed": 2**70}), 400
    yield "seed -2**70", j({**OK, "seed": -(2**70)}), 400
    yield "stop_token_ids [2**70]", j({**OK, "stop_token_ids": [2**70]}), 400
    yield "stop_token_ids [-1]", j({**OK, "stop_token_ids": [-1]}), 400
    yield "stop_token_ids [vocab]", j({**OK, "stop_token_ids": [VOCAB]}), 400
    yield "stop_token_ids not a list", j({**OK, "stop_token_ids": 3}), 400
    yield "stop_token_ids of strings", j({**OK, "stop_token_ids": ["a"]}), 400
    yield "lone surrogate prompt", j({**OK, "prompt": "\ud800"}), 400
    yield "lone surrogate in a prompt list", j({**OK, "prompt": ["ok", "ab\udfff"]}), 400
    yield "lone surrogate stop", j({**OK, "stop": "\ud800"}), 400
    yield "lone surrogate stop list", j({**OK, "stop": ["x", "\udc00"]}), 400
    yield "lone surrogate model", j({**OK, "model": "\ud800"}), 400
    for field, values in {
        "max_tokens": [0, -1, 2**70, 10**400, CONTEXT + 1, 1.5, "4", True, [4]],
        "n": [0, -1, 2**70, SMALL.max_n + 1, 1.5, "2", True, {}],
        "temperature": [-1, -1e-9, 1e-300, 0.001, "1", True, [1]],
        "top_p": [0, -0.5, 1.5, 2**70, "1", False],
        "seed": [1.5, "1", True],
        "logprobs": [-1, 21, 2**70, 1.5, True],
        "return_tokens_as_token_ids": ["yes", 1, 0],
        "stream": [True, "no"],
        "echo": [True, 1],
        "model": [5, ["tiny"]],
    }.items():
        for value in values:
            yield f"{field} {value!r:.30}", j({**OK, field: value}), 400
    yield "temperature NaN", b'{"prompt": [5], "temperature": NaN}', 400
    yield "temperature Infinity", b'{"prompt": [5], "temperature": Infinity}', 400
    yield "top_p 1e999", b'{"prompt": [5], "top_p": 1e999}', 400
    yield "n of 5000 digits", b'{"prompt": [5], "n": 1' + b"0" * 5000 + b"}", 400
    for name, prompt in {
        "empty string": "",
        "empty list": [],
        "empty id list": [[]],
        "empty string in a list": ["ok", ""],
        "an empty prompt in a batch": [[1, 2], []],
        "object": {"ids": [1]},
        "number": 5,
        "null": None,
        "mixed ids and text": [1, "a"],
        "mixed lists": [[1], "a"],
        "id 2**70": [2**70],
        "id -1": [-1],
        "id = vocab": [[1], [2, VOCAB]],
        "float id": [1.5],
        "bool id": [True],
        "nested three deep": [[[1]]],
        "longer than the context": [5] * (CONTEXT - 1),
        "more prompts than max_batch": [[5]] * (SMALL.max_batch + 1),
    }.items():
        yield f"prompt {name}", j({**OK, "prompt": prompt}), 400
    yield "no prompt", j({"max_tokens": 2}), 400
    yield "prompts x n over max_batch", j({**OK, "prompt": [[5], [6], [7]], "n": 3}), 400
    yield "over the token budget", j({"prompt": [5] * 485, "n": 4, "max_tokens": 16}), 400
    yield "n 512 over 2,000 tokens", j({"prompt": [5] * 2000, "n": 512}), 400
    yield "stop list of 17", j({**OK, "stop": ["a"] * 17}), 400
    yield "stop empty string", j({**OK, "stop": ""}), 400
    yield "stop empty in a list", j({**OK, "stop": ["a", ""]}), 400
    yield "stop a number", j({**OK, "stop": 5}), 400
    yield "unknown model", j({**OK, "model": "gpt-4"}), 404
    for name, raw in {
        "empty body": b"",
        "truncated JSON": b'{"prompt": [5',
        "not UTF-8": b"\xff\xfe\xfa",
        "null": b"null",
        "a list": b"[1, 2]",
        "a string": b'"hello"',
        "a number": b"5",
        "nesting 100k deep": b"[" * 100_000 + b"]" * 100_000,
        "form data": b"prompt=hello&max_tokens=2",
    }.items():
        yield f"body {name}", raw, 400
    yield "body over max_body_mb", j({**OK, "pad": "x" * 2**20}), 413


CASES = list(_cases())


@pytest.mark.parametrize("body,status", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_client_mistake_is_a_4xx_in_openai_shape_and_never_runs_the_model(live, caplog, body, status):
    url, app, probe, _ = live
    probe.reset()
    with caplog.at_level(logging.ERROR):
        response = httpx.post(
            f"{url}/completions", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    assert error["message"] and "\n" not in error["message"] and len(error["message"]) < 300
    assert probe.shapes == []  # refused before the sampler ran a forward pass
    assert app.state.held["requests"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback in the log


def test_a_body_sent_in_chunks_is_cut_at_the_limit(live):
    url, _, probe, _ = live
    probe.reset()
    chunks = (b'{"prompt": [' + b"5, " * 400_000 + b"5]}" for _ in range(1))  # no content-length
    response = httpx.post(f"{url}/completions", content=chunks)
    assert response.status_code == 413 and response.json()["error"]["type"] == "RequestTooLargeError"
    assert probe.shapes == []


@pytest.mark.parametrize(
    "body,choices",
    [
        ({"prompt": [5] * 484, "n": 4, "max_tokens": 16}, 4),  # exactly the token budget (2000)
        ({"prompt": [[5]] * 4, "n": 2, "max_tokens": 2}, 8),  # exactly max_batch
        ({"prompt": [5] * (CONTEXT - 2), "max_tokens": 2}, 1),  # exactly the context
        ({"prompt": "hello", "seed": -(2**63), "temperature": 0.01, "top_p": 1e-9, "logprobs": 20}, 1),
        ({"prompt": ["a b", "c"], "seed": 2**63 - 1, "temperature": 0, "stop": ["x"] * 16, "n": None}, 2),
        ({"prompt": [5, 6], "stop_token_ids": [0, VOCAB - 1], "max_tokens": 3, "unknown": [1]}, 1),
    ],
)
def test_requests_at_the_limits_are_served(live, body, choices):
    url, _, probe, _ = live
    probe.reset()
    response = httpx.post(f"{url}/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == choices
    assert probe.shapes  # the probe sees a served request, so its silence above means something


def test_the_original_hostile_request_is_refused_by_the_default_limits_too(served):
    """n 512 over a 2,000-token prompt took the server to 10.8 GB. Here the defaults refuse it, and with n
    and the batch allowed, the token budget alone still does, before any forward pass."""
    body = {
        "prompt": [5] * 1000,
        "n": 512,
        "max_tokens": 16,
    }  # 1,000 tokens: the tiny model's context is 1024
    for limits, param in [(Limits(), "n"), (Limits(max_n=512, max_batch=512), "n")]:
        with running(served, limits) as (url, _, probe, _):
            response = httpx.post(f"{url}/completions", json=body)
            assert response.status_code == 400 and response.json()["error"]["param"] == param
            assert probe.shapes == []
    assert "--max-batch-tokens" in response.json()["error"]["message"]


def test_requests_over_max_in_flight_get_429_and_those_held_are_served(served):
    with running(served, Limits(max_in_flight=3)) as (url, app, probe, _):
        probe.hold_at = 1  # the first request holds the model; two more wait
        results = []

        def post():
            results.append(httpx.post(f"{url}/completions", json=OK, timeout=60).status_code)

        threads = [threading.Thread(target=post) for _ in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: app.state.held["requests"] == 3 and probe.holding.is_set(), "3 requests held")
        response = httpx.post(f"{url}/completions", json=OK)
        assert response.status_code == 429 and response.json()["error"]["type"] == "RateLimitError"
        probe.release.set()
        for t in threads:
            t.join(60)
        assert results == [200, 200, 200] and app.state.held["requests"] == 0


def test_abandoned_requests_stop_using_the_model(served, caplog):
    """One request is generating and five wait behind it; all six clients hang up. The running one stops at
    its next forward pass, the waiting ones never start, and the next 4-token request is served at once."""
    long = {"prompt": [5, 6], "n": 2, "max_tokens": 900}  # would take 900 forward passes
    waiting = {"prompt": [7, 8, 9], "max_tokens": 900}  # its prefill would show as shape (1, 3)
    with caplog.at_level(logging.ERROR), running(served, SMALL) as (url, app, probe, _):
        probe.hold_at, probe.delay = 3, 0.002  # after the hold, 900 steps would take seconds
        first = post_and_leave(url, json.dumps(long).encode())
        wait_for(probe.holding.is_set, "the long request generating")
        first.close()
        queued = [post_and_leave(url, json.dumps(waiting).encode()) for _ in range(5)]
        wait_for(lambda: app.state.held["requests"] == 6, "five requests waiting")
        for sock in queued:
            sock.close()
        wait_for(lambda: app.state.held["requests"] == 1, "the waiting requests dropped")
        probe.release.set()
        response = httpx.post(f"{url}/completions", json={"prompt": [5], "max_tokens": 4}, timeout=60)
        assert response.status_code == 200
        assert response.json()["usage"]["completion_tokens"] == 4
        wait_for(lambda: app.state.held["requests"] == 0, "every handler done")
    steps = probe.shapes.count((2, 1))  # decode steps of the abandoned long request
    assert probe.shapes[0] == (2, 2) and steps < 100, probe.shapes[:20]
    assert (1, 3) not in probe.shapes  # no waiting request ever reached the model
    assert probe.shapes[-4:] == [(1, 1)] * 4  # the 4-token request: prefill and three decode steps
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_client_that_leaves_mid_body_is_dropped_quietly(live, caplog):
    url, app, probe, _ = live
    probe.reset()
    with caplog.at_level(logging.ERROR):
        post_and_leave(url, b'{"prompt": [5', length=1000).close()
        wait_for(lambda: app.state.held["requests"] == 0, "the handler ended")
        assert httpx.post(f"{url}/completions", json=OK).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_unknown_paths_and_methods_answer_in_openai_shape(live):
    url, _, _, _ = live
    for response, status in [
        (httpx.get(f"{url}/nothing"), 404),
        (httpx.get(f"{url}/completions"), 405),
        (httpx.post(f"{url}/models"), 405),
    ]:
        assert response.status_code == status and response.json()["error"]["code"] == status


def test_ctrl_c_stops_a_long_generation_and_answers_503(served, caplog):
    with caplog.at_level(logging.ERROR), running(served, SMALL) as (url, app, probe, server):
        probe.hold_at, probe.delay = 2, 0.002
        result = []
        client = threading.Thread(
            target=lambda: result.append(
                httpx.post(f"{url}/completions", json={"prompt": [5], "max_tokens": 900}, timeout=60)
            )
        )
        client.start()
        wait_for(probe.holding.is_set, "the long request generating")
        server.handle_exit(signal.SIGINT, None)  # what Ctrl-C calls
        probe.release.set()
        client.join(60)
        assert result[0].status_code == 503 and result[0].json()["error"]["type"] == "ServiceUnavailableError"
        assert len(probe.shapes) < 100  # stopped, not the 900 steps asked for
        wait_for(lambda: app.state.held["requests"] == 0, "the handler ended")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
