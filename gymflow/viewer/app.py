"""The trajectory viewer: server-rendered pages over the same read-only DuckDB tables `gymflow sql` opens.

    gymflow view --port 8300       # then open http://127.0.0.1:8300

Every query is parameterised (user input is never part of the SQL text; a sort column is picked from a fixed
list), the database reads and writes no file itself, and a bad request (unknown episode, a filter that is not a
number, an unknown sort column) is a 4xx page with one line. A request after a stage has written, replaced or
removed a table's file reopens the tables, so no page needs a restart to be current. Charts are drawn by
plotly.js, served from the installed `plotly` package: nothing comes from the internet at run time.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from gymflow import paths
from gymflow.errors import UserError
from gymflow.serving import listen
from gymflow.store.db import damaged_file, read_only
from gymflow.store.schema import TABLES

HERE = Path(__file__).parent
FILTERS = ("stage", "iteration", "policy", "env", "difficulty", "success", "min_reward", "max_reward")
TEXT_FILTERS = ("stage", "policy", "env", "difficulty")  # compared with `=`, as given
PAGE = 100  # episodes per page
# The list's columns and their headings: the only names an ORDER BY is built from.
SORTS = {
    "stage": "stage",
    "iteration": "it",
    "policy": "policy",
    "env": "env",
    "task_id": "task",
    "difficulty": "difficulty",
    "sample": "sample",
    "reward": "reward",
    "success": "success",
    "turns": "turns",
    "end_reason": "end",
}
ORDER = (
    "stage, iteration, policy, env, task_id, sample, episode_id"  # the default, and every sort's tie-break
)
ROLES = ("system", "user", "assistant")
SEARCH_MAX = 200  # characters in a search
HITS = 100  # turns a search lists
# Where a stage's episodes come from: the hint of a page that has none yet.
WRITERS = {
    "trajectories": "dvc repro trajectories",
    "evaluate": "dvc repro evaluate@sft",
    "explore": "dvc repro explore@evol1",
    "rl": "dvc repro rl",
    "offline": "dvc repro sweet/dvc.yaml:offline",
    "best_of_n": "dvc repro sweet/dvc.yaml:best_of_n",
}


def nothing_yet(what: str) -> str:
    """The hint of a page with no rows at all: the stages that write the first ones."""
    return f"no {what} yet: run `{WRITERS['trajectories']}` (expert episodes) or `{WRITERS['evaluate']}`"


# The per-iteration curves `dvc plots` draws (dvc.yaml), and the stage that writes each.
PLOTS = {"rl.csv": "dvc repro rl", "evol.csv": "dvc repro plot_evol", "sft.csv": "dvc repro sft"}


class Bad(Exception):
    """A request the viewer cannot answer: shown as a page with `status` and the one-line message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def plotly_js() -> Path | None:
    """plotly.min.js inside the installed `plotly` package, found without importing it."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


def _int(params: dict[str, str], name: str) -> int | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise Bad(f"{name} must be a whole number (got {value[:40]!r})") from None


def _float(params: dict[str, str], name: str) -> float | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise Bad(f"{name} must be a number (got {value[:40]!r})")
    return number


def episode_filter(params: dict[str, str]) -> tuple[str, list[Any]]:
    """The WHERE clause of the episode list and its parameters, from the query string's filters."""
    clauses, args = [], []
    for name in TEXT_FILTERS:
        if params.get(name):
            clauses.append(f"{name} = ?")  # `name` is one of TEXT_FILTERS, never the user's text
            args.append(params[name])
    if (iteration := _int(params, "iteration")) is not None:
        clauses.append("iteration = ?")
        args.append(iteration)
    success = params.get("success", "").strip()
    if success:
        if success not in ("0", "1"):
            raise Bad(f"success must be 0 or 1 (got {success[:40]!r})")
        clauses.append("success = ?")
        args.append(int(success))
    for name, op in (("min_reward", ">="), ("max_reward", "<=")):
        if (value := _float(params, name)) is not None:
            clauses.append(f"reward {op} ?")
            args.append(value)
    return (" where " + " and ".join(clauses)) if clauses else "", args


def episode_order(params: dict[str, str]) -> str:
    """The ORDER BY of the episode list: `sort` must name one of SORTS and `order` be asc or desc, so nothing
    from the request but a name of that fixed list reaches the SQL text."""
    sort = params.get("sort", "")
    order = params.get("order", "asc")
    if sort and sort not in SORTS:
        raise Bad(f"sort must be one of {', '.join(SORTS)} (got {sort[:40]!r})")
    if order not in ("asc", "desc"):
        raise Bad(f"order must be asc or desc (got {order[:40]!r})")
    return f"{sort} {order} nulls last, {ORDER}" if sort else ORDER


def snippet(text: str, query: str, width: int = 80) -> tuple[str, str, str]:
    """`text` around the first match of `query` (any case) as (before, match, after), cut to `width` characters
    either side; the page marks the match, and escapes all three."""
    found = re.search(re.escape(query), text, re.IGNORECASE)
    if not found:  # DuckDB's lower() and Python's case folding differ on a few characters
        return "", "", text[: 2 * width]
    start, end = found.span()
    before = ("..." if start > width else "") + text[max(0, start - width) : start]
    after = text[end : end + width] + ("..." if end + width < len(text) else "")
    return before, text[start:end], after


def tables_state(data: Path) -> frozenset[tuple[str, int, int, int]]:
    """Each table file's path, inode, size and modification time: a stage that writes one (to a new inode,
    renamed into place), replaces or removes one changes it. One walk of the folder, so every request can
    afford it."""
    suffixes = tuple(f".{t}.parquet" for t in TABLES)
    state = set()
    for path in data.rglob("*.parquet"):
        if path.name.endswith(suffixes):
            try:
                st = path.stat()
            except FileNotFoundError:  # removed since the walk saw it
                continue
            state.add((str(path), st.st_ino, st.st_size, st.st_mtime_ns))
    return frozenset(state)


def colour(value: float | None, scale: float) -> str:
    """A background for `value` in [-scale, scale]: red below 0, green above, white at 0 (CSS hsl)."""
    if value is None or not math.isfinite(value):
        return "transparent"
    x = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    return f"hsl({120 if x >= 0 else 0}, 70%, {100 - 45 * abs(x):.0f}%)"


def prob_colour(logprob: float) -> str:
    """A token's background by its probability: red for unlikely, green for near-certain."""
    p = math.exp(min(0.0, logprob))
    return f"hsl({120 * p:.0f}, 75%, 78%)"


@lru_cache(maxsize=16)
def _tokenizer(model_dir: str):
    from tokenizers import Tokenizer  # the file alone: no model, no transformers import

    path = Path(model_dir) / "tokenizer.json"
    return Tokenizer.from_file(str(path)) if path.is_file() else None


def token_pieces(data: Path, policy: str, stage: str, ids: list[int]) -> list[str] | None:
    """Each sampled id as its text piece, by the tokenizer of data/models/<policy> (or of the model the
    policy name starts with: `sft+value`, `loop@3`, or of the stage's model); None when no tokenizer is there."""
    base = policy.split("+")[0].split("@")[0]
    for name in dict.fromkeys((policy, base, stage)):
        folder = paths.under(data, paths.MODELS) / name
        if name and "/" not in name and name not in (".", "..") and (tok := _tokenizer(str(folder))):
            return [tok.decode([i], skip_special_tokens=False) for i in ids]
    return None


def read_plot(path: Path) -> dict[str, Any] | None:
    """A plots CSV as {x, columns: {name: values}, labels}: its first column is the x axis, numeric columns
    are curves, a text column (evol.csv's policy) labels the points."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    names = list(rows[0])
    x_name, columns, labels = names[0], {}, None
    for name in names[1:]:
        values = [r[name] for r in rows]
        try:
            columns[name] = [float(v) if v not in ("", None) else None for v in values]
        except ValueError:
            labels = values
    return {
        "name": path.stem,
        "x_name": x_name,
        "x": [r[x_name] for r in rows],
        "columns": columns,
        "labels": labels,
    }


def create_app(data_dir: str | Path = paths.DATA) -> FastAPI:
    data = Path(data_dir)
    # taken before opening: a file written in between makes the next request reopen
    state = tables_state(data)
    db = read_only(data)  # views over the tables' files; this DuckDB itself reads and writes no file
    lock = threading.Lock()  # one DuckDB connection, shared by the request threads
    templates = Jinja2Templates(directory=HERE / "templates")

    def fresh() -> None:
        """Before each request: reopen the tables if a stage has changed their files since the last one (the
        views list the files, and hold each file's footer, as they were at opening)."""
        nonlocal db, state
        now = tables_state(data)
        with lock:
            if now != state:
                # a damaged new file raises here, and `state` stays as it was: the next request tries again
                old, db = db, read_only(data)
                old.close()  # no query runs on it: they hold the lock
                state = now

    app = FastAPI(
        title="gymflow view", docs_url=None, redoc_url=None, openapi_url=None, dependencies=[Depends(fresh)]
    )
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def rows(query: str, args: list[Any] | None = None) -> list[dict[str, Any]]:
        with lock:
            rel = db.execute(query, args or [])
            names = [d[0] for d in rel.description]
            return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status)

    @app.exception_handler(Bad)
    def bad(request: Request, exc: Bad) -> HTMLResponse:
        return page(request, "error.html", exc.status, message=str(exc))

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> HTMLResponse:  # unknown path, wrong method
        return page(request, "error.html", exc.status_code, message=str(exc.detail))

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, exc: RequestValidationError) -> HTMLResponse:
        return page(request, "error.html", 400, message="bad request: " + str(exc.errors()[0].get("msg", "")))

    @app.exception_handler(UserError)
    def data_error(request: Request, exc: UserError) -> HTMLResponse:  # a table file that reopening refused
        return page(request, "error.html", 500, message=str(exc))

    @app.exception_handler(duckdb.Error)
    def query_error(request: Request, exc: duckdb.Error) -> HTMLResponse:
        if damage := damaged_file(exc, data):  # the server's data, not the request, is at fault
            return page(request, "error.html", 500, message=str(damage))
        # e.g. a value out of a column's range
        return page(request, "error.html", 400, message="bad filter: " + str(exc).splitlines()[0][:200])

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        if (path := plotly_js()) is None:
            raise Bad("plotly is not installed (pip install plotly), so the charts cannot be drawn", 404)
        return FileResponse(path, media_type="text/javascript")

    @app.get("/health", include_in_schema=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    def empty_hint(params: dict[str, str]) -> str:
        """Why the episode list is empty: no episodes at all, none of the chosen stage, or only the filters."""
        if not rows("select 1 from episodes limit 1"):
            return nothing_yet("episodes")
        stage = params.get("stage", "")
        if stage and not rows("select 1 from episodes where stage = ? limit 1", [stage]):
            writer = WRITERS.get(stage)
            return f"no {stage} episodes yet" + (f": run `{writer}`" if writer else "")
        return "no episode matches these filters"

    @app.get("/", response_class=HTMLResponse)
    def episodes(request: Request) -> HTMLResponse:
        params = {k: v for k, v in request.query_params.items() if k in (*FILTERS, "page", "sort", "order")}
        where, args = episode_filter(params)
        order = episode_order(params)
        number = _int(params, "page")
        number = 1 if number is None else number
        if number < 1:
            raise Bad("page must be 1 or more")
        summary = rows(
            f"select count(*) as n, coalesce(sum(success), 0) as solved, avg(reward) as reward from episodes{where}",
            args,
        )[0]
        listed = rows(
            "select episode_id, stage, iteration, policy, env, task_id, difficulty, sample, reward, success, "
            f"turns, end_reason from episodes{where} order by {order} limit ? offset ?",
            [*args, PAGE, (number - 1) * PAGE],
        )
        facets = {
            name: rows(
                f"select {name} as value, count(*) as n from episodes{where} group by 1 order by 1", args
            )
            for name in ("stage", "iteration", "policy", "env", "difficulty", "success")
        }
        pages = max(1, math.ceil(summary["n"] / PAGE))
        return page(
            request,
            "episodes.html",
            params=params,
            filters={k: v for k, v in params.items() if k in FILTERS},
            sorts=SORTS,
            summary=summary,
            episodes=listed,
            facets=facets,
            page_number=number,
            pages=pages,
            empty=empty_hint(params) if not summary["n"] else "",
        )

    @app.get("/search", response_class=HTMLResponse)
    def search(request: Request) -> HTMLResponse:
        """Turns whose text holds `q` (any case), among the episodes the list's filters pick, first HITS only."""
        params = {k: v for k, v in request.query_params.items() if k in (*FILTERS, "q", "role")}
        q, role = params.get("q", ""), params.get("role", "")
        if len(q) > SEARCH_MAX:
            raise Bad(f"q must be at most {SEARCH_MAX} characters (got {len(q)})")
        if role and role not in ROLES:
            raise Bad(f"role must be one of {', '.join(ROLES)} (got {role[:40]!r})")
        where, args = episode_filter(params)
        hits = []
        if q.strip():
            by_role = " and t.role = ?" if role else ""
            hits = rows(
                "select t.episode_id, t.turn, t.role, t.text, e.stage, e.iteration, e.policy, e.env, e.task_id "
                "from turns t join episodes e using (episode_id) "
                f"where t.episode_id in (select episode_id from episodes{where}) "
                f"and contains(lower(t.text), lower(?)){by_role} "
                "order by e.stage, e.iteration, e.policy, e.env, e.task_id, e.sample, t.episode_id, t.turn "
                "limit ?",
                [*args, q, *([role] if role else []), HITS + 1],
            )
            for h in hits:
                h["before"], h["match"], h["after"] = snippet(h["text"] or "", q)
        empty = "" if rows("select 1 from turns limit 1") else nothing_yet("turns")
        return page(
            request,
            "search.html",
            q=q,
            role=role,
            roles=ROLES,
            filters={k: v for k, v in params.items() if k in FILTERS},
            hits=hits[:HITS],
            more=len(hits) > HITS,
            limit=HITS,
            empty=empty,
        )

    def conversation(episode_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        found = rows("select * from episodes where episode_id = ?", [episode_id])
        if not found:
            raise Bad(f"no episode {episode_id[:200]!r}; pick one from the episode list", 404)
        ep = found[0]
        turns = rows("select * from turns where episode_id = ? order by turn", [episode_id])
        critics = rows(
            "select turn, critic, critic_score, advantage from critic_scores where episode_id = ? "
            "order by turn, critic",
            [episode_id],
        )
        for t in turns:
            t["critics"] = [c for c in critics if c["turn"] == t["turn"]]
            ids, logprobs = t["token_ids"] or [], t["logprobs"] or []
            pieces = token_pieces(data, ep["policy"], ep["stage"], ids) if ids else None
            t["decoded"] = pieces is not None
            t["tokens"] = [
                {
                    "text": pieces[i] if pieces else str(tid),
                    "id": tid,
                    "logprob": logprobs[i] if i < len(logprobs) else None,
                    "bg": prob_colour(logprobs[i]) if i < len(logprobs) else "transparent",
                }
                for i, tid in enumerate(ids)
            ]
        # advantages and critic scores (Eq. 3's, or a value head's logits) have no fixed range: each is coloured
        # against the largest magnitude in this episode
        for key, bg in (("advantage", "adv_bg"), ("critic_score", "critic_bg")):
            scale = max(
                (abs(t[key]) for t in turns if t[key] is not None and math.isfinite(t[key])), default=1.0
            )
            for t in turns:
                t[bg] = colour(t[key], scale)
        return ep, turns

    @app.get("/episode", response_class=HTMLResponse)
    def episode(request: Request, id: str = "") -> HTMLResponse:
        if not id:
            raise Bad("give an episode: /episode?id=<episode_id>")
        ep, turns = conversation(id)
        others = rows(
            "select distinct policy from episodes where env = ? and task_id = ? and policy <> ? order by 1",
            [ep["env"], ep["task_id"], ep["policy"]],
        )
        return page(request, "episode.html", ep=ep, turns=turns, others=[o["policy"] for o in others])

    @app.get("/compare", response_class=HTMLResponse)
    def compare(request: Request, env: str = "", task_id: str = "", a: str = "", b: str = "") -> HTMLResponse:
        if not env or not task_id:
            raise Bad("give a task: /compare?env=<env>&task_id=<id>&a=<policy>&b=<policy>")
        policies = [
            r["policy"]
            for r in rows(
                "select distinct policy from episodes where env = ? and task_id = ? order by 1",
                [env, task_id],
            )
        ]
        if not policies:
            raise Bad(f"no episode of task {task_id[:100]!r} in {env[:50]!r}", 404)
        columns = []
        for policy in (a, b):
            if not policy:
                continue
            if policy not in policies:
                raise Bad(
                    f"policy {policy[:100]!r} has no episode of this task; one of: {', '.join(policies)}", 404
                )
            first = rows(
                "select episode_id from episodes where env = ? and task_id = ? and policy = ? "
                "order by stage = 'evaluate' desc, iteration desc, sample limit 1",
                [env, task_id, policy],
            )[0]
            columns.append((policy, *conversation(first["episode_id"])))
        return page(
            request, "compare.html", env=env, task_id=task_id, a=a, b=b, policies=policies, columns=columns
        )

    @app.get("/group", response_class=HTMLResponse)
    def group(request: Request, env: str = "", task_id: str = "", iteration: str = "") -> HTMLResponse:
        it = _int({"iteration": iteration}, "iteration")
        if not env or not task_id or it is None:
            raise Bad("give an RL group: /group?env=<env>&task_id=<id>&iteration=<n>")
        samples = rows(
            "select e.episode_id, e.policy, e.sample, e.reward, e.success, e.turns, e.end_reason, "
            "avg(t.advantage) as advantage, count(t.advantage) as scored "
            "from episodes e left join turns t on t.episode_id = e.episode_id and t.role = 'assistant' "
            "where e.stage = 'rl' and e.env = ? and e.task_id = ? and e.iteration = ? "
            "group by all order by e.sample",
            [env, task_id, it],
        )
        if not samples:
            raise Bad(f"no RL group for task {task_id[:100]!r} of {env[:50]!r} at iteration {it}", 404)
        convs = [(s, *conversation(s["episode_id"])) for s in samples]
        mean = sum(s["reward"] for s in samples) / len(samples)
        return page(
            request,
            "group.html",
            env=env,
            task_id=task_id,
            iteration=it,
            samples=samples,
            convs=convs,
            mean=mean,
        )

    @app.get("/charts", response_class=HTMLResponse)
    def charts(request: Request) -> HTMLResponse:
        success = rows(
            "select env, policy, avg(success) as success, count(*) as n from episodes "
            "where stage = 'evaluate' and sample = 0 group by all order by env, policy"
        )
        plots = [
            p
            for name in PLOTS
            if (f := paths.under(data, paths.PLOTS) / name).is_file() and (p := read_plot(f))
        ]
        return page(
            request,
            "charts.html",
            success=success,  # as data: the template's `tojson` escapes what could end its <script>
            plots=plots,
            has_success=bool(success),
            plot_names=[p["name"] for p in plots],
            no_success=f"no evaluate episodes yet: run `{WRITERS['evaluate']}`",
            no_plots="no data/plots/*.csv yet: "
            + ", ".join(f"`{cmd}` writes {name}" for name, cmd in PLOTS.items()),
        )

    return app


def serve(data_dir: str | Path = paths.DATA, host: str = "127.0.0.1", port: int = 8300) -> None:
    """Serve the viewer until interrupted."""
    if not Path(data_dir).is_dir():
        raise UserError(
            f"no data folder {data_dir}: run the pipeline first (dvc repro), or give --data FOLDER"
        )
    sock = listen(host, port)  # a busy port is a one-line error before the tables load
    app = create_app(data_dir)
    print(f"gymflow view: http://{host}:{port}/ (read-only over {data_dir}; Ctrl-C stops)", flush=True)
    uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning")).run(sockets=[sock])
