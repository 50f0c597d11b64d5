"""Play an environment served by `gymflow serve-env` as if it were in process (`HttpEnv`), and choose per
environment between the two (`EnvMaker`, from params.yaml's `rollout.env_servers`).

A session lives on one server; the sessions of an environment are spread over its servers round-robin.
Connection failures and a full server (503) are retried with backoff, then the next server is tried; a
server that dies during an episode raises `EnvUnavailable` from `step`, which the rollout engine records as
the episode's end (`end_reason = error`) while the others play on. A step is never resent: the server may
have played it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gymflow.envs import ENVS, make_env
from gymflow.envs.base import Env, Step, Task
from gymflow.errors import UserError

TIMEOUT = (5.0, 300.0)  # connect, read (a ScienceWorld reset or an apps cell can take seconds)


class EnvUnavailable(RuntimeError):
    """The environment's server could not be reached, lost the session, or failed: the episode cannot go on."""


class SessionGone(EnvUnavailable):
    """The server does not know the session (it expired, or the server restarted)."""


def _http(retries: int) -> requests.Session:
    retry = Retry(
        total=retries,
        connect=retries,  # nothing reached the server: safe to resend
        read=0,  # the server may have acted on it
        status=retries,
        status_forcelist=(503,),  # full (or shutting down): it refused before acting
        allowed_methods=None,  # POST too, for the two cases above
        backoff_factor=0.25,
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    http = requests.Session()
    http.mount("http://", HTTPAdapter(max_retries=retry))
    http.mount("https://", HTTPAdapter(max_retries=retry))
    return http


class HttpEnv(Env):
    """An environment of `name` played on one of `urls` (gymflow's env-server protocol); the spec and the
    bookkeeping (turns, reward, action cleaning) are the in-process class's, so episodes read the same."""

    waits_on_process = True  # every reset and step is a request to a server

    def __init__(self, name: str, urls: Sequence[str], first: int = 0, retries: int = 4) -> None:
        super().__init__()
        if name not in ENVS:
            raise UserError(f"unknown environment {name!r}; choose one of: {', '.join(sorted(ENVS))}")
        if not urls:
            raise UserError(f"rollout.env_servers.{name} is empty: give at least one server URL")
        self.spec = ENVS[name].spec  # the class's declaration, looked up by name
        self.urls = [u.rstrip("/") for u in urls]
        self.first = first % len(self.urls)  # the server this environment's next session goes to
        self.http = _http(retries)
        self.url: str | None = None
        self.sid: int | None = None

    def _post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            res = self.http.post(url + path, json=body, timeout=TIMEOUT)
        except requests.RequestException as e:
            raise EnvUnavailable(f"{url}{path}: {type(e).__name__}: {str(e)[:200]}") from None
        if res.status_code == 200:
            return res.json()
        message = _message(res)
        if res.status_code == 404 and path != "/create":
            raise SessionGone(f"{url}: {message}")
        if res.status_code == 400 and path in ("/create", "/reset"):
            raise UserError(f"rollout.env_servers.{self.spec.name}: {url} refused the task: {message}")
        raise EnvUnavailable(f"{url}{path}: HTTP {res.status_code}: {message}")

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        raise TypeError("HttpEnv plays tasks; draw them from the environment's own class (gymflow.envs.ENVS)")

    def _reset(self, task: Task) -> str:
        row = task.to_row()
        if self.sid is not None:
            try:
                return self._post(self.url, "/reset", {"id": self.sid, "task": row})["observation"]
            except (SessionGone, EnvUnavailable):
                self.sid = None  # expired or its server went: start afresh, on the next server
        failure: EnvUnavailable | None = None
        for k in range(len(self.urls)):
            url = self.urls[(self.first + k) % len(self.urls)]
            try:
                out = self._post(url, "/create", {"task": row})
            except EnvUnavailable as e:
                failure = e
                continue
            self.url, self.sid = url, out["id"]
            self.first = (self.first + k + 1) % len(self.urls)
            return out["observation"]
        raise failure  # type: ignore[misc]  (urls is never empty)

    def _step(self, action: str) -> Step:
        if self.sid is None:
            raise EnvUnavailable(f"{self.spec.name}: no session (its server was lost)")
        try:
            out = self._post(self.url, "/step", {"id": self.sid, "action": action})
        except EnvUnavailable:  # SessionGone too: the episode's state is gone with it
            self.sid = None
            raise
        # The server ends an episode at its turn limit (done and truncated); in process `Env.step` never does,
        # its player does (the rollout engine, with its own horizon), so the step reads as it would there.
        truncated = bool(out.get("truncated", False))
        info = {"truncated": True} if truncated else {}
        score = float(out["score"])  # the episode's reward so far, whatever --step-rewards makes `reward`
        return Step(out["observation"], score, bool(out["done"]) and not truncated, info)

    def available_actions(self) -> list[str] | None:
        if self.sid is None:
            return None
        try:
            res = self.http.get(f"{self.url}/available_actions", params={"id": self.sid}, timeout=TIMEOUT)
        except requests.RequestException as e:
            raise EnvUnavailable(f"{self.url}/available_actions: {type(e).__name__}") from None
        if res.status_code != 200:
            raise EnvUnavailable(f"{self.url}/available_actions: HTTP {res.status_code}: {_message(res)}")
        return res.json()

    def close(self) -> None:
        """Free the server's session; a server already gone has nothing to free."""
        if self.sid is not None:
            with contextlib.suppress(requests.RequestException):
                self.http.post(self.url + "/close", json={"id": self.sid}, timeout=(2.0, 10.0))
            self.sid = None
        self.http.close()


def _message(res: requests.Response) -> str:
    try:
        return str(res.json().get("error", res.text))[:300]
    except ValueError:
        return res.text[:300]


class EnvMaker:
    """`make_env` for the rollout engine: an `HttpEnv` for an environment with servers, in process otherwise.
    Successive environments of a name start on successive servers; `offset` shifts that (a Ray worker's
    index), so workers spread over the servers too."""

    def __init__(self, servers: Mapping[str, Sequence[str]] | None = None, offset: int = 0) -> None:
        self.servers = {name: list(urls) for name, urls in (servers or {}).items()}
        self.offset = offset
        self.made: Counter[str] = Counter()

    def __call__(self, name: str) -> Env:
        if name not in self.servers:
            return make_env(name)
        first = self.offset + self.made[name]
        self.made[name] += 1
        return HttpEnv(name, self.servers[name], first)

    def __getstate__(self) -> dict[str, Any]:
        return {"servers": self.servers, "offset": self.offset, "made": Counter()}
