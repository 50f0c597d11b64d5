"""Any gymflow environment as an HTTP service, in AgentGym's protocol (its `agentenv-*` servers), so that a
JVM-heavy ScienceWorld or the sandboxed apps world runs, and scales, apart from the model.

    gymflow serve-env textcraft --port 8100
    curl -X POST localhost:8100/create                                   # {"id": 0, "observation": ...}
    curl -X POST localhost:8100/reset -d '{"id": 0, "data_idx": 3}'      # the server's task 3
    curl -X POST localhost:8100/step -d '{"id": 0, "action": "inventory"}'

AgentGym's endpoints, with its request and response shapes (its client classes drive these servers):
POST /create, POST /reset {id, data_idx}, POST /step {id, action} -> {observation, reward, score, done,
truncated, step_reward, turns, max_turns}, GET /observation?id=, GET /available_actions?id=, GET /detail?id=,
POST /close {id}, and for wordle GET /filtered_vocab?id= (the words a guess may be). Each is served at / and
at /<env>/ too, where AgentGym's LMRL-Gym server has maze and wordle. `data_idx` indexes the server's task
list (its instruction set's `--split`); `game` (AgentGym's maze client) and `seed` (its Wordle client) are
other names for it. gymflow's own client sends the task row itself (`{"id", "task": {...}}`), so a stage
plays exactly the tasks it drew.

`score` is the episode's reward so far, as `Env.step` reports it, and so is `reward` by default (AgentGym's
TextCraft client reports the last one); with `--step-rewards`, `reward` is what the step added
(`step_reward`), which AgentGym's maze and Wordle clients sum. The two differ only for an environment that
pays before the end (ScienceWorld). An episode ends at the turn limit as the rollout engine ends it
(`out_of_turns`): the environment's own, or `--max-turns`; that step is `done` and `truncated`, and /create,
/reset, /detail and /spec give the limit as `max_turns`.

What AgentGym's servers lack: a session idle for `ttl` seconds is closed; at most `max_sessions` are live
(503 with Retry-After beyond); mistakes are 4xx with {"error": message} (404 unknown or expired session,
409 a step after the episode ended, 413 a body over `max_body_kb`, 400 anything else malformed, a task row
that does not fit its environment's schema included: `Env.check_task` refuses it before any environment
exists, where it would have failed with a 500 at reset or at a submit turns later, and what only the built game
can tell, `Env.reset` refuses with `BadTask`, a 400 too), never a 200 carrying an error; a 500 is the server's
own fault. GET /health says how full the server is. Requests of one session run one at a time.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, model_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from gymflow.envs import ENVS
from gymflow.envs.base import BadTask, Env, EpisodeOver, Task, out_of_turns, task_of_row, turn_limit
from gymflow.errors import UserError
from gymflow.serving import BadRequest, free_port, listen, read_json, started


@dataclass(frozen=True)
class EnvLimits:
    """What the server holds at once: every live session is an environment (a ScienceWorld JVM is 200-500 MB),
    so `max_sessions` bounds its memory."""

    max_sessions: int = 64
    ttl: float = 600.0  # seconds a session may sit idle (a turn of generation is seconds to a minute)
    max_body_kb: int = 256  # an action or a task row (colbench's hidden code is a few KB)
    max_turns: int | None = None  # an episode's turn limit; None: the environment's own (EnvSpec.max_turns)

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.ttl <= 0 or self.max_body_kb < 1 or (self.max_turns or 1) < 1:
            raise UserError("--max-sessions, --ttl, --max-body-kb and --max-turns must be positive")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # AgentGym's TextCraft client sends commands and goal on create


class CreateBody(_Body):
    data_idx: StrictInt | None = None
    task: dict[str, Any] | None = None


class ResetBody(_Body):
    id: StrictInt
    data_idx: StrictInt | None = None
    game: StrictInt | None = None  # AgentGym's maze client names the task index so
    seed: StrictInt | None = None  # and its Wordle client so
    task: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_index(self) -> ResetBody:
        """`game` and `seed` are other names of `data_idx` (AgentGym's LMRL-Gym clients send them): ignored,
        every reset of those clients played task 0."""
        given = {k: v for k in ("data_idx", "game", "seed") if (v := getattr(self, k)) is not None}
        if len(set(given.values())) > 1:
            raise ValueError(f"{' and '.join(given)} name different tasks: send one index")
        self.data_idx = next(iter(given.values()), None)
        return self


class StepBody(_Body):
    id: StrictInt
    action: StrictStr


class CloseBody(_Body):
    id: StrictInt


@dataclass
class EnvSession:
    """One live environment of the server and what its requests share (not `gymflow.sandbox.session.Session`,
    an interpreter kept for an apps episode)."""

    env: Env
    observation: str = ""
    truncated: bool = False  # the episode ended at the turn limit, not by the game
    used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one request of a session at a time


class EnvSessions:
    """The live environments by id; ids are never reused, so a late request for a closed one is a 404."""

    def __init__(self, make: Callable[[], Env], limits: EnvLimits) -> None:
        self.make, self.limits = make, limits
        self.live: dict[int, EnvSession] = {}
        self.ids = itertools.count()
        self.guard = threading.Lock()
        self.pending = 0  # sessions being created: they count against the limit

    def open(self) -> tuple[int, EnvSession]:
        with self.guard:
            if len(self.live) + self.pending >= self.limits.max_sessions:
                raise BadRequest(
                    f"{self.limits.max_sessions} sessions are live (--max-sessions): close one or retry later",
                    status=503,
                )
            self.pending += 1
        try:
            session = EnvSession(self.make())
        finally:
            with self.guard:
                self.pending -= 1
        with self.guard:
            sid = next(self.ids)
            self.live[sid] = session
        return sid, session

    def get(self, sid: int) -> EnvSession:
        with self.guard:
            session = self.live.get(sid)
        if session is None:
            raise BadRequest(
                f"session {sid} does not exist (closed, or idle for over {self.limits.ttl:g} s): create one",
                "id",
                status=404,
            )
        session.used = time.monotonic()
        return session

    def close(self, sid: int) -> None:
        with self.guard:
            session = self.live.pop(sid, None)
        if session is not None:
            with session.lock:
                session.env.close()

    def expire(self) -> int:
        """Close every session idle for longer than the TTL; how many."""
        cutoff = time.monotonic() - self.limits.ttl
        with self.guard:
            old = [sid for sid, s in self.live.items() if s.used < cutoff and not s.lock.locked()]
        for sid in old:
            self.close(sid)
        return len(old)

    def close_all(self) -> None:
        for sid in list(self.live):
            self.close(sid)


def _error(status: int, message: str) -> JSONResponse:
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # no lone surrogates out
    headers = {"retry-after": "1"} if status in (429, 503) else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _validated(model: type[BaseModel], data: object) -> Any:
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "the body"
        raise BadRequest(f"{where}: {err['msg']}") from None


def create_app(
    env_name: str, tasks: list[Task], limits: EnvLimits | None = None, step_rewards: bool = False
) -> FastAPI:
    """The app serving fresh `env_name` environments; `tasks` is what AgentGym's `data_idx` indexes. With
    `step_rewards`, a step's `reward` is what that step added (AgentGym's LMRL-Gym clients sum it); `score` is
    the episode's reward so far either way (what gymflow's client and AgentGym's BabyAI client read)."""
    if env_name not in ENVS:
        raise UserError(f"unknown environment {env_name!r}; choose one of: {', '.join(sorted(ENVS))}")
    limits = limits or EnvLimits()
    spec = ENVS[env_name].spec
    limit = turn_limit(spec, limits.max_turns)  # as the rollout engine ends an episode, so does the server
    sessions = EnvSessions(ENVS[env_name], limits)

    async def sweep() -> None:
        while True:
            await asyncio.sleep(min(limits.ttl / 4, 30.0))
            await run_in_threadpool(sessions.expire)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        sweeper = asyncio.create_task(sweep())
        yield
        sweeper.cancel()
        await run_in_threadpool(sessions.close_all)

    app = FastAPI(title=f"gymflow environment server: {env_name}", lifespan=lifespan)
    app.state.sessions = sessions
    router = (
        APIRouter()
    )  # served at / and at /<env_name>/, where AgentGym's LMRL-Gym server has maze and wordle

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> JSONResponse:  # unknown path, wrong method
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(BadRequest)
    def bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return _error(exc.status, str(exc))

    @app.exception_handler(RequestValidationError)
    def bad_query(
        request: Request, exc: RequestValidationError
    ) -> JSONResponse:  # ?id= missing or not a number
        err = exc.errors()[0]
        return _error(400, f"{'.'.join(str(p) for p in err['loc'][1:]) or 'query'}: {err['msg']}")

    @app.exception_handler(ClientDisconnect)
    def gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return _error(400, "the client disconnected before sending its body")

    @app.exception_handler(Exception)
    def server_fault(
        request: Request, exc: Exception
    ) -> JSONResponse:  # the environment failed, not the client
        return _error(500, f"the environment failed ({type(exc).__name__}); the server log has the traceback")

    async def body(request: Request, model: type[BaseModel]) -> Any:
        raw = await read_json(request, limits.max_body_kb * 1024) if await _has_body(request) else None
        return _validated(model, raw)

    def pick(data_idx: int | None, row: dict[str, Any] | None) -> Task:
        if row is not None:
            try:
                task = task_of_row({**row, "env": row.get("env", env_name)})
                if task.env != env_name:
                    raise BadRequest(f"task is for {task.env!r}; this server plays {env_name!r}", "task")
                ENVS[env_name].check_task(task)
            except BadTask as e:
                raise BadRequest(f"task: not a {env_name} task row: {e}", "task") from None
            return task
        idx = data_idx or 0
        if not 0 <= idx < len(tasks):
            raise BadRequest(
                f"data_idx {idx} is out of range: this server has {len(tasks)} tasks", "data_idx"
            )
        return tasks[idx]

    def reset(sid: int, session: EnvSession, task: Task) -> dict[str, Any]:
        with session.lock:
            try:
                session.observation = session.env.reset(task)
            except (
                BadTask
            ) as e:  # what only the built game tells (a walkthrough, a variation): the row's fault
                raise BadRequest(f"task: not a {env_name} task row: {e}", "task") from None
            session.truncated = False
        return {
            "id": sid,
            "observation": session.observation,
            "reward": 0.0,
            "score": 0.0,
            "done": False,
            "max_turns": limit,
        }

    @router.get("/")
    def hello() -> str:
        return f"This is environment {env_name} (gymflow)."

    @router.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "env": env_name,
            "sessions": len(sessions.live),
            "max_sessions": limits.max_sessions,
            "ttl": limits.ttl,
            "tasks": len(tasks),
            "max_turns": limit,
        }

    @router.post("/create")
    async def create(request: Request) -> dict[str, Any]:
        req = await body(request, CreateBody)
        task = pick(req.data_idx, req.task)  # before the environment exists: a bad task costs nothing
        sid, session = await run_in_threadpool(sessions.open)
        try:
            return await run_in_threadpool(reset, sid, session, task)
        except BaseException:
            await run_in_threadpool(sessions.close, sid)
            raise

    @router.post("/reset")
    async def reset_(request: Request) -> dict[str, Any]:
        req = await body(request, ResetBody)
        session = sessions.get(req.id)
        return await run_in_threadpool(reset, req.id, session, pick(req.data_idx, req.task))

    def play_step(sid: int, session: EnvSession, action: str) -> dict[str, Any]:
        with session.lock:
            before = session.env.reward
            if session.truncated:
                raise BadRequest(
                    f"session {sid}'s episode ended at its turn limit ({limit} turns, --max-turns): "
                    "reset it (POST /reset) to play again",
                    status=409,
                )
            try:
                out = session.env.step(action)
            except EpisodeOver:
                raise BadRequest(
                    f"session {sid}'s episode is over: reset it (POST /reset) to play again", status=409
                ) from None
            session.observation = out.observation
            session.truncated = out_of_turns(session.env, limit)
            env = session.env
        added = out.reward - before
        return {
            "observation": out.observation,
            "reward": added if step_rewards else out.reward,
            "score": out.reward,
            "step_reward": added,
            "done": out.done or session.truncated,
            "truncated": session.truncated,
            "turns": env.turns,
            "max_turns": limit,
        }

    @router.post("/step")
    async def step(request: Request) -> dict[str, Any]:
        req = await body(request, StepBody)
        return await run_in_threadpool(play_step, req.id, sessions.get(req.id), req.action)

    @router.get("/observation")
    def observation(id: int) -> str:
        return sessions.get(id).observation

    @router.get("/available_actions")
    def available_actions(id: int) -> list[str] | None:
        session = sessions.get(id)
        with session.lock:
            return session.env.available_actions()

    @router.get("/detail")
    def detail(id: int) -> dict[str, Any]:
        session = sessions.get(id)
        env = session.env
        return {
            "id": id,
            "task_id": env.task.task_id if env.task else None,
            "turns": env.turns,
            "max_turns": limit,
            "reward": env.reward,
            "done": env.done or session.truncated,
            "truncated": session.truncated,
        }

    @router.get("/spec")
    def spec_() -> dict[str, Any]:
        return {"name": spec.name, "max_turns": limit, "reward_range": list(spec.reward_range)}

    @router.post("/close")
    async def close(request: Request) -> dict[str, Any]:
        req = await body(request, CloseBody)
        sessions.get(req.id)  # 404 for an unknown one
        await run_in_threadpool(sessions.close, req.id)
        return {"id": req.id, "closed": True}

    vocabulary = getattr(ENVS[env_name], "vocabulary", None)
    if vocabulary is not None:

        @router.get("/filtered_vocab")
        def filtered_vocab(id: int) -> list[str]:
            """The words a guess may be: AgentGym's Wordle client lists them in its first prompt."""
            sessions.get(id)  # 404 for an unknown session, as AgentGym's server answers
            return vocabulary()

    app.include_router(router)
    app.include_router(router, prefix=f"/{env_name}")
    if env_name == "sql":
        app.include_router(
            _indexed_router("sqlgym", sessions, body, pick, reset, play_step), prefix="/sqlgym"
        )
    if env_name in TOOL_ENVS or env_name == "webshop":
        dialect = "webshop" if env_name == "webshop" else "tool"
        app.include_router(
            _indexed_router(dialect, sessions, body, pick, reset, play_step), prefix="/agentgym"
        )
    return app


TOOL_ENVS = ("weather", "todo", "movie", "academia", "sheet")  # AgentGym's agentenv-tool servers' shapes


class IndexedCreate(_Body):
    id: StrictInt = 0  # the task's index (the tool clients send it; SQLGym's send no body)


class IndexedReset(_Body):
    env_idx: StrictInt
    item_id: StrictInt | None = None  # SQLGym's name of the task's index
    id: StrictInt | None = None  # the tool environments' name of it
    session_id: StrictInt | None = None  # WebShop's


class IndexedStep(_Body):
    env_idx: StrictInt
    action: StrictStr


def _indexed_router(
    dialect: str,
    sessions: EnvSessions,
    body: Callable[[Request, type[BaseModel]], Awaitable[Any]],
    pick: Callable[[int | None, dict[str, Any] | None], Task],
    reset: Callable[[int, EnvSession, Task], dict[str, Any]],
    play_step: Callable[[int, EnvSession, str], dict[str, Any]],
) -> APIRouter:
    """AgentGym's servers whose sessions are `env_idx` and whose create answers the id alone: SQLGym's
    (agentenv/envs/sqlgym.py; served under /sqlgym/: reset by `item_id` answers [observation, null], a step
    {state, reward, done, info}) and the tool environments' (agentenv/envs/weather.py and its siblings; under
    /agentgym/: create and reset name the task by `id`, reset answers the observation, a step {observation,
    reward, done}), and WebShop's (agentenv/envs/webshop.py; under /agentgym/ of `serve-env webshop`: create
    with no body, reset by `session_id` answers [observation, null], a step {state, reward, done, info}). The
    task an index names is the server's own instruction set's."""
    router = APIRouter()

    def created(index: int) -> int:
        task = pick(index, None)
        sid, session = sessions.open()
        try:
            reset(sid, session, task)
        except BaseException:
            sessions.close(sid)
            raise
        return sid

    @router.post("/create")
    async def create(request: Request) -> int:
        req = await body(request, IndexedCreate)
        return await run_in_threadpool(created, req.id)

    @router.post("/reset")
    async def reset_(request: Request) -> Any:
        req = await body(request, IndexedReset)
        index = {"sqlgym": req.item_id, "webshop": req.session_id}.get(dialect, req.id)
        session, task = sessions.get(req.env_idx), pick(index, None)
        observation = (await run_in_threadpool(reset, req.env_idx, session, task))["observation"]
        return observation if dialect == "tool" else (observation, None)

    @router.post("/step")
    async def step(request: Request) -> dict[str, Any]:
        req = await body(request, IndexedStep)
        out = await run_in_threadpool(play_step, req.env_idx, sessions.get(req.env_idx), req.action)
        if dialect != "tool":
            return {"state": out["observation"], "reward": out["score"], "done": out["done"], "info": {}}
        return {"observation": out["observation"], "reward": out["score"], "done": out["done"]}

    @router.get("/observation")
    def observation(env_idx: int) -> str:
        return sessions.get(env_idx).observation

    return router


async def _has_body(request: Request) -> bool:
    """AgentGym's BabyAI client creates with an empty POST."""
    return request.headers.get("content-length", "0") != "0" or "chunked" in request.headers.get(
        "transfer-encoding", ""
    )


def serve(
    env_name: str,
    tasks: list[Task],
    host: str = "127.0.0.1",
    port: int = 8100,
    limits: EnvLimits | None = None,
    step_rewards: bool = False,
) -> None:
    """Serve `env_name` until interrupted."""
    limits = limits or EnvLimits()
    sock = listen(host, port)
    app = create_app(env_name, tasks, limits, step_rewards)
    print(f"serving {env_name} ({len(tasks)} tasks by data_idx) at http://{host}:{port}", flush=True)
    print(
        f"limits: {limits.max_sessions} live sessions, closed after {limits.ttl:g} s idle, "
        f"bodies <= {limits.max_body_kb} KB, episodes end after {turn_limit(ENVS[env_name].spec, limits.max_turns)} "
        "turns",
        flush=True,
    )
    config = uvicorn.Config(app, access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def running(
    env_name: str, *args: str, log: Path | None = None, timeout: float = 60.0, data: Path | None = None
) -> Iterator[str]:
    """`gymflow [--data data] serve-env env_name *args` in a process of its own on a free loopback port, up and
    answering /health; its base URL. Stopped on exit; it dies with this process."""
    port = free_port()
    folder = ["--data", str(data)] if data is not None else []
    cmd = [sys.executable, "-m", "gymflow", *folder, "serve-env", env_name, "--port", str(port), *args]
    url = f"http://127.0.0.1:{port}"
    with started(cmd, url + "/health", log, timeout):
        yield url
