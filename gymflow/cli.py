"""The `gymflow` command.

gymflow envs                                   # environments, tasks per split, reward, turn limit, solver
gymflow play maze [--task-id ID]               # play an episode yourself
gymflow solve maze --n 50 [--split eval] [--json]
gymflow sql "select env, count(*) from episodes group by env"
gymflow view --port 8300                       # browse episodes, policies side by side, charts (read-only)
gymflow serve-model data/models/sft --port 8000   # an OpenAI-compatible /v1/completions server (as vLLM's)
gymflow serve-vllm data/models/sft --port 8000    # the same API, served by vLLM (./install.sh --vllm)
gymflow serve-env textcraft --port 8100          # an environment over HTTP (AgentGym's env-server protocol)
gymflow rl-noise data/models/sft --batches 8  # how much of an RL step (params.yaml's rl) is signal
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import json
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.env_names import ENV_NAMES, over_limit
from gymflow.errors import UserError

if TYPE_CHECKING:
    from gymflow.envs.base import Task

# The environments (gymnasium, minigrid, TextWorld, ...) load only for the commands that play them: they would
# double the start-up time of `gymflow sql`.

console = Console()


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextlib.contextmanager
def _without_pandas() -> Iterator[None]:
    """Imports inside find no pandas. pyarrow.dataset imports pandas only to ask whether it is installed: 0.14-0.18 s
    of a 0.3-0.7 s `gymflow sql` at 10 M turns (benchmarks/store_scale.py). pyarrow imports it again for a call
    that needs it."""
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def get_tasks(data: Path, env: str, split: str, n: int) -> list[Task]:
    """The first `n` tasks of a split: from the instruction set if built, otherwise freshly drawn (seed 0)."""
    from gymflow.envs import ENVS
    from gymflow.envs.instructions import build_splits, load_tasks, tasks_file

    if env not in ENVS:
        raise UserError(f"unknown environment {env!r}; choose one of: {', '.join(sorted(ENVS))}")
    if tasks_file(data, env).exists():
        tasks = load_tasks(data, env, split)
        if len(tasks) < n:
            raise UserError(
                f"{env} has only {len(tasks)} {split} tasks in {data}; ask for --n {len(tasks)} or fewer"
            )
        return tasks[:n]
    sizes = {"n_train": n, "n_eval": 0} if split == "train" else {"n_train": 0, "n_eval": n}
    return build_splits(ENVS[env], seed=0, **sizes)[split]


def cmd_envs(args: argparse.Namespace) -> None:
    """One row per environment; the experts' descriptions in the table where it fits, else listed below it."""
    from gymflow.envs import ENVS
    from gymflow.envs.instructions import load_tasks, tasks_file

    columns = ("env", "train", "eval", "reward", "success", "turns")
    rows, experts = [], {}
    for name, cls in sorted(ENVS.items()):
        spec, counts = cls.spec, Counter()
        if tasks_file(args.data, name).exists():
            counts = Counter(t.split for t in load_tasks(args.data, name))
        lo, hi = spec.reward_range
        rows.append(
            [
                name,
                str(counts.get("train", "-")),
                str(counts.get("eval", "-")),
                f"[{lo:g}, {hi:g}]",
                f">= {spec.success_threshold:g}",
                str(spec.max_turns),
            ]
        )
        experts[name] = spec.expert
    wide = Table(*columns, "expert")
    for row in rows:
        wide.add_row(*row, experts[row[0]])
    if console.measure(wide, options=console.options.update_width(10_000)).maximum <= console.width:
        console.print(wide)
        return
    # A pipe or a narrow terminal: in the table each description wrapped to a word a line (48 lines at 80).
    narrow = Table(*columns)
    for row in rows:
        narrow.add_row(*row)
    console.print(narrow)
    print("expert (what `gymflow solve` runs):")
    width = max(map(len, experts))
    for name, text in experts.items():
        lead, rest = f"  {name:<{width}}  ", " " * (width + 4)
        print(textwrap.fill(text, console.width, initial_indent=lead, subsequent_indent=rest))


def cmd_solve(args: argparse.Namespace) -> None:
    from gymflow.envs import make_env
    from gymflow.rollout.expert import run_expert

    if over := over_limit(args.env, *((args.n, 0) if args.split == "train" else (0, args.n))):
        raise UserError(  # a fresh draw holds all its tasks in memory before the first is solved
            f"{args.env} makes at most {over[1]:,} {args.split} tasks; ask for --n {over[1]} or fewer"
        )
    tasks = get_tasks(args.data, args.env, args.split, args.n)
    env = make_env(args.env)
    try:
        episodes = [run_expert(env, task) for task in tasks]
    finally:
        env.close()
    n = len(episodes)
    result = {
        "env": args.env,
        "n": n,
        "success": sum(e.success for e in episodes) / n,
        "mean_reward": sum(e.reward for e in episodes) / n,
        "mean_turns": sum(e.turns for e in episodes) / n,
    }
    if args.json:
        print(json.dumps(result))
    else:
        table = Table(*result)
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in result.values()))
        console.print(table)


def cmd_play(args: argparse.Namespace) -> None:
    from gymflow.envs import make_env
    from gymflow.envs.instructions import load_tasks

    if args.task_id:
        tasks = [t for t in load_tasks(args.data, args.env) if t.task_id == args.task_id]
        if not tasks:
            raise UserError(
                f'no task {args.task_id!r} for {args.env}; list ids with: gymflow sql "select task_id '
                f"from tasks where env = '{args.env}'\""
            )
        task = tasks[0]
    else:
        task = get_tasks(args.data, args.env, "eval", 1)[0]
    env = make_env(args.env)
    lines = env.spec.multiline_actions  # code: an action is every line up to an empty one
    console.print(
        f"[bold]{args.env}[/] task {task.task_id} ({task.difficulty}). "
        f"Type an action{' (end it with an empty line)' if lines else ''}; 'actions' lists valid ones, "
        "'hint' asks the expert, 'quit' stops."
    )
    console.print(env.reset(task), markup=False, highlight=False)
    try:
        while not env.done and env.turns < env.spec.max_turns:
            action = _read_action(f"[bold cyan]{env.turns + 1}>[/] ", lines)
            if action == "quit":
                break
            if action == "actions":
                console.print(", ".join(env.available_actions() or ["(this environment does not list them)"]))
                continue
            if action == "hint":
                thought, move = env.expert_step()
                console.print(f"expert: {thought} -> {move}", markup=False)
                continue
            step = env.step(action)
            console.print(step.observation, markup=False, highlight=False)
        verdict = "success" if env.spec.is_success(env.reward) else "no success"
        console.print(f"[bold]episode over[/]: reward {env.reward:g} ({verdict}) in {env.turns} turns")
    except EOFError:
        pass
    finally:
        env.close()


def _read_action(prompt: str, lines: bool) -> str:
    """One action typed at the prompt: a line, or (`lines`) every line up to an empty one."""
    action = [console.input(prompt).rstrip()]
    while lines and action[-1].strip() and action[0].strip() not in ("quit", "actions", "hint"):
        action.append(console.input("... ").rstrip())
    return "\n".join(action).strip()


# The stages that write each table: what an empty result from it is missing.
FILLED_BY = {
    "tasks": "`dvc repro instructions` writes it",
    "episodes": "`dvc repro trajectories` writes the experts' episodes, `dvc repro evaluate@sft` a policy's",
    "turns": "`dvc repro trajectories` writes the experts' turns, `dvc repro evaluate@sft` a policy's",
    "critic_scores": "SWEET-RL's critics write it (`dvc repro sweet/dvc.yaml`)",
}


def cmd_sql(args: argparse.Namespace) -> None:
    """Read-only SQL over the tables, in bounded time and memory; values printed as DuckDB writes them, never
    read as markup."""
    for flag, meaning in (("limit", "every row"), ("timeout", "no bound"), ("memory", "no bound")):
        if not getattr(args, flag) >= 0:  # NaN too
            raise UserError(f"--{flag} must be 0 ({meaning}) or more")
    with _without_pandas():
        from gymflow.store.db import (
            QueryTimeout,
            box,
            damaged_file,
            empty_tables,
            read_only,
            run_query,
            visible,
        )
    try:
        db = read_only(args.data, args.memory)
        result = run_query(db, args.query, args.limit, args.timeout, args.memory)
    except QueryTimeout as e:
        raise UserError(f"SQL: {e} (--timeout 0 lifts the bound)") from None
    # OSError: a run-time error met while streaming the rows; MemoryError: Python's, past --memory
    except (duckdb.Error, OSError, MemoryError) as e:
        if damage := damaged_file(e, args.data):
            raise damage from None
        message = visible(str(e).splitlines()[0]) if str(e) else type(e).__name__
        hint = "tables: tasks, episodes, turns"
        out_of_memory = (
            isinstance(e, (duckdb.OutOfMemoryException, MemoryError)) or "Out of Memory" in message
        )
        if out_of_memory and args.memory:
            message = f"query stopped: it needed more than {args.memory} MB"
            hint = "--memory 0 lifts the bound"
        elif isinstance(e, duckdb.PermissionException) or "configuration has been locked" in message:
            hint = "gymflow sql reads only the tables tasks, episodes, turns; see the README for plain duckdb"
        raise UserError(f"SQL: {message} ({hint})") from None
    if result is None:
        return
    columns, rows, total = result
    try:
        empty = empty_tables(db, args.query) if total == 0 else []
    except (duckdb.Error, OSError):  # only a hint: a query that reads a damaged table says so itself
        empty = []
    try:
        print(box(columns, rows))
        if total > len(rows):
            print(f"{total - len(rows)} more rows not shown ({total} in all); --limit 0 shows every row")
        for table in empty:
            print(f"table {table} is empty in {args.data}: {FILLED_BY[table]}")
        sys.stdout.flush()
    except BrokenPipeError:  # `gymflow sql ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def cmd_view(args: argparse.Namespace) -> None:
    from gymflow.viewer.app import serve  # the web stack loads only for this command

    serve(args.data, args.host, args.port)


def cmd_serve_model(args: argparse.Namespace) -> None:
    from gymflow.models.server import Limits, serve  # torch and the web stack load only for this command

    names = ("max_n", "max_batch", "max_tokens", "max_batch_tokens", "max_in_flight", "max_body_mb")
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    serve(args.path, args.host, args.port, Limits(**given))


def cmd_serve_vllm(args: argparse.Namespace) -> None:
    from gymflow.models.vllm import serve  # vLLM itself runs in .venv-vllm

    serve(args.path, args.port, args.host, max_model_len=args.max_model_len, extra_args=args.vllm_args)


def cmd_serve_env(args: argparse.Namespace) -> None:
    from gymflow.envs.instructions import load_tasks, tasks_file
    from gymflow.remote.env_server import EnvLimits, serve  # the web stack loads only for this command

    if args.env not in ENV_NAMES:
        raise UserError(f"unknown environment {args.env!r}; choose one of: {', '.join(sorted(ENV_NAMES))}")
    limits = EnvLimits(args.max_sessions, args.ttl, args.max_body_kb, args.max_turns)
    if args.env == "household":  # a bad bound of its game cache stops the server before it serves
        from gymflow.envs.household import cache_limit

        cache_limit()
    if tasks_file(args.data, args.env).exists():
        tasks = load_tasks(args.data, args.env, args.split)
    else:
        if over := over_limit(args.env, *((args.n, 0) if args.split == "train" else (0, args.n))):
            raise UserError(
                f"{args.env} makes at most {over[1]:,} {args.split} tasks; ask for --n {over[1]} or fewer"
            )
        tasks = get_tasks(args.data, args.env, args.split, args.n)
    serve(args.env, tasks, args.host, args.port, limits, args.step_rewards)


def cmd_rl_noise(args: argparse.Namespace) -> None:
    from gymflow.config import load_params  # torch loads only for this command
    from gymflow.envs.instructions import load_tasks, tasks_file
    from gymflow.models.build import resolve
    from gymflow.train.grad_noise import measure

    if args.batches < 2:
        raise UserError("--batches must be at least 2: the signal is what independent batches share")
    params = load_params()
    if params.rl is None:
        raise UserError("params.yaml has no `rl:` section; add one (see the README)")
    if not args.agent.is_dir():
        raise UserError(f"no agent in {args.agent}: pass a model folder a stage wrote, e.g. data/models/sft")
    for env in params.rl.tasks:
        if not tasks_file(args.data, env).exists():
            raise UserError(f"no {env} tasks in {args.data}: run `dvc repro instructions` first")
    tasks = {env: load_tasks(args.data, env, "train") for env in params.rl.tasks}
    rows = measure(resolve(args.agent), tasks, params.rl, params.rollout, args.batches, args.seed)
    table = Table("env", "episodes / batch", "kept", "signal share", "control", "noise scale (episodes)")
    for r in rows:
        scale = f"{r['noise_scale']:.0f}"
        if r["at_least"]:
            scale = f">= {r['noise_scale_bound']:.0f}"
        table.add_row(
            r["env"],
            f"{r['episodes']:.0f}",
            f"{r['kept']:.1f}",
            f"{r['share']:+.3f} +- {r['stderr']:.3f}",
            f"{r['control']:+.3f}",
            scale,
        )
    console.print(table)
    console.print(
        "signal share: |mean gradient|^2 / mean |batch gradient|^2 over disjoint batches of fresh train tasks "
        "(+- its jackknife standard error); control: the same with rewards permuted within each group; "
        "noise scale: the batch at which signal and noise are equal (>=: the share is within 2 standard errors "
        "of 0, so only a lower bound)."
    )


ENV_HELP = f"the environment: {', '.join(sorted(ENV_NAMES))}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gymflow", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--data", type=Path, default=paths.DATA, help=f"the data folder (default: {paths.DATA})")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list environments").set_defaults(func=cmd_envs)
    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("env", help=ENV_HELP)
    play.add_argument(
        "--task-id",
        help='a task of the instruction set (ids: gymflow sql "select task_id from tasks"); default: the first '
        "eval task",
    )
    play.set_defaults(func=cmd_play)
    solve = sub.add_parser("solve", help="run the expert solver on N tasks")
    solve.add_argument("env", help=ENV_HELP)
    solve.add_argument(
        "--n",
        type=int,
        default=50,
        help="tasks to solve: the split's first in --data's instruction set, else drawn with seed 0 (default 50)",
    )
    solve.add_argument(
        "--split", choices=["train", "eval"], default="train", help="the split they come from (default train)"
    )
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.set_defaults(func=cmd_solve)
    sql = sub.add_parser("sql", help="query the rollout tables (tasks, episodes, turns) with DuckDB SQL")
    sql.add_argument("query", help="read-only: other files, COPY, ATTACH, INSTALL/LOAD, settings are refused")
    sql.add_argument("--limit", type=int, default=100, help="rows to print (default 100; 0: every row)")
    sql.add_argument(
        "--timeout",
        type=float,
        default=30,
        metavar="SECONDS",
        help="stop the query after this (default 30; 0: never)",
    )
    sql.add_argument(
        "--memory",
        type=int,
        default=2048,
        metavar="MB",
        help="memory the query may take (default 2048; 0: no bound)",
    )
    sql.set_defaults(func=cmd_sql)
    view = sub.add_parser("view", help="browse the rollout tables in a local web page (read-only)")
    view.add_argument(  # also after `view`; SUPPRESS keeps the top-level --data when it is not given here
        "--data", type=Path, default=argparse.SUPPRESS, help="the data folder (default: data)"
    )
    view.add_argument(
        "--port", type=int, default=8300, help="the page's port: http://HOST:PORT (default 8300)"
    )
    view.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    view.set_defaults(func=cmd_view)
    serve = sub.add_parser(
        "serve-model", help="serve a saved model over an OpenAI-compatible completions API"
    )
    serve.add_argument("path", help="a model folder a stage wrote, e.g. data/models/sft")
    serve.add_argument("--port", type=int, default=8000, help="(default 8000)")
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    limit = serve.add_argument_group("limits (a request over one is answered 4xx before the model runs)")
    limit.add_argument("--max-n", type=int, help="completions per prompt (default 64)")
    limit.add_argument("--max-batch", type=int, help="sequences per request, prompts x n (default 256)")
    limit.add_argument("--max-tokens", type=int, help="per completion (default: the model's context)")
    limit.add_argument(
        "--max-batch-tokens",
        type=int,
        help="prompts x n x (longest prompt + max_tokens): the cache one request holds (default 262144, "
        "about 3 GB for the CPU default model)",
    )
    limit.add_argument(
        "--max-in-flight", type=int, help="requests running or waiting; more get 429 (default 8)"
    )
    limit.add_argument("--max-body-mb", type=int, help="request body size (default 4)")
    serve.set_defaults(func=cmd_serve_model)
    vserve = sub.add_parser("serve-vllm", help="serve a saved model with vLLM (./install.sh --vllm first)")
    vserve.add_argument("path", help="a model folder a stage wrote, e.g. data/models/sft")
    vserve.add_argument("--port", type=int, default=8000, help="(default 8000)")
    vserve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    vserve.add_argument("--max-model-len", type=int, help="context (default: the model's)")
    vserve.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        dest="vllm_args",
        help="passed to vLLM as it is, e.g. --vllm-arg=--enforce-eager (repeatable)",
    )
    vserve.set_defaults(func=cmd_serve_vllm)
    env_server = sub.add_parser(
        "serve-env",
        help="serve an environment over HTTP (AgentGym's protocol; rollout.env_servers)",
        epilog="household keeps the games clients name in $GYMFLOW_CACHE/textworld, least recently used "
        "deleted past $GYMFLOW_HOUSEHOLD_CACHE_MB (default 1024)",
    )
    env_server.add_argument("env", help=ENV_HELP)
    env_server.add_argument(
        "--port", type=int, default=8100, help="clients' rollout.env_servers: http://HOST:PORT (default 8100)"
    )
    env_server.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    env_server.add_argument(
        "--split",
        choices=["train", "eval"],
        default="eval",
        help="the tasks AgentGym's data_idx indexes (default eval)",
    )
    env_server.add_argument(
        "--n",
        type=int,
        default=100,
        help="tasks drawn (seed 0) when --data has no instruction set (default 100)",
    )
    env_server.add_argument(
        "--max-sessions", type=int, default=64, help="live environments; more get 503 (default 64)"
    )
    env_server.add_argument("--ttl", type=float, default=600.0, help="seconds idle before a session closes")
    env_server.add_argument("--max-body-kb", type=int, default=256, help="request body size (default 256)")
    env_server.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="turns after which an episode ends (done, truncated); default: the environment's own",
    )
    env_server.add_argument(
        "--step-rewards",
        action="store_true",
        help="a step's reward is what it added (AgentGym's maze and Wordle clients sum them); score stays "
        "the episode's reward so far",
    )
    env_server.set_defaults(func=cmd_serve_env)
    noise = sub.add_parser(
        "rl-noise", help="measure how much of an RL step is signal (the gradient noise scale)"
    )
    noise.add_argument(
        "agent",
        type=Path,
        nargs="?",
        default=paths.model("sft"),
        help=f"a model folder (default {paths.model('sft')})",
    )
    noise.add_argument(
        "--batches", type=int, default=8, help="independent batches (one iteration's draw each)"
    )
    noise.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the tasks' draw and the control's reward permutation (default 0)",
    )
    noise.set_defaults(func=cmd_rl_noise)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if getattr(args, "n", 1) < 1:
        print("error: --n must be at least 1", file=sys.stderr)
        sys.exit(2)
    try:
        args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
