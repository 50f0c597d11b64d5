"""AgentTraj: expert trajectories over the train instructions, kept only when they succeed.

Writes, per environment, the rollout tables (`<env>.episodes.parquet`, `<env>.turns.parquet`) and
AgentGym's conversation JSON (`item_id`, `conversations` of `from`/`loss`/`value`). An environment
whose files already carry the same config hash is skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gymflow.envs import make_env
from gymflow.envs.base import Task
from gymflow.progress import bar as progress_bar
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Episode, RunInfo, episode_rows
from gymflow.store.io import file_metadata, is_intact, table_path, write_rows, write_text
from gymflow.workers import manager, worker_pool

AGENTGYM_ACK = "OK. I'll follow your instructions and try my best to solve the task."


def to_agentgym(ep: Episode) -> dict[str, Any]:
    """AgentGym's conversation format: the system prompt as a first human turn, acknowledged, then the game."""
    conv = [{"from": "human", "loss": None, "value": ep.messages[0].text}]
    conv.append({"from": "gpt", "loss": False, "value": AGENTGYM_ACK})
    for m in ep.messages[1:]:
        if m.role == "assistant":
            conv.append({"from": "gpt", "loss": True, "value": m.text})
        else:
            conv.append({"from": "human", "loss": None, "value": m.text})
    if conv[-1]["from"] == "human":
        conv.pop()  # AgentGym conversations end on the agent's last move
    return {"item_id": f"{ep.task.env}_{ep.task.task_id}", "conversations": conv}


def is_current(folder: Path, env: str, digest: str) -> bool:
    """Whether an environment's tables were written with these settings and read whole with this schema
    (resume skips it); a damaged one is written again."""
    wanted = {"gymflow.config_hash": digest}
    return all(is_intact(table_path(folder, env, table), table, wanted) for table in ("episodes", "turns"))


def gather_trajectories(
    tasks: dict[str, list[Task]],
    rollout_dir: str | Path,
    json_dir: str | Path,
    info: RunInfo,
    demonstrators: dict[str, str] | None = None,
) -> None:
    """Run the expert (or an env's demonstrator in `demonstrators`) on every task, keep the successes, write
    the tables and the JSON.

    Environments play in parallel, one process per core (the slow ones, TextWorld compiles and ScienceWorld,
    overlap); each writes its own files when done, so an interrupted run keeps the finished ones. The workers
    die with the stage (`gymflow.workers`): a killed stage leaves no process behind that writes later.
    """
    rollout_dir, json_dir = Path(rollout_dir), Path(json_dir)
    bars: dict[str, tqdm] = {}
    with manager() as shared, contextlib.ExitStack() as closing:
        done = shared.Queue()  # one env name per task played: the workers' progress
        jobs = []
        with worker_pool(max(1, min(len(tasks), os.cpu_count() or 1))) as pool:
            for env_name, env_tasks in tasks.items():
                digest = f"{info.config_hash}-{len(env_tasks)}"
                if is_current(rollout_dir, env_name, digest) and (json_dir / f"{env_name}.json").exists():
                    print(f"{env_name}: up to date, skipped", flush=True)
                    continue
                bars[env_name] = closing.enter_context(
                    progress_bar(
                        total=len(env_tasks), desc=f"{env_name:>10}", unit="task", position=len(bars)
                    )
                )
                demonstrator = (demonstrators or {}).get(env_name, "expert")
                args = (env_name, env_tasks, rollout_dir, json_dir, info, digest, done, demonstrator)
                jobs.append(pool.submit(_gather_env, *args))
            while not all(job.done() for job in jobs) or not done.empty():
                with contextlib.suppress(queue.Empty):
                    bars[done.get(timeout=0.2)].update()
            for job in jobs:
                job.result()  # a worker's error surfaces here


def _gather_env(
    env_name: str,
    env_tasks: list[Task],
    rollout_dir: Path,
    json_dir: Path,
    info: RunInfo,
    digest: str,
    done: queue.Queue,
    demonstrator: str = "expert",
) -> None:
    """One environment's AgentTraj, in a worker process; `done` hears of every task played."""
    env = make_env(env_name)
    kept: list[Episode] = []
    try:
        for task in env_tasks:
            ep = run_expert(env, task, demonstrator=demonstrator)
            if ep.success:
                kept.append(ep)
            done.put(env_name)
    finally:
        env.close()
    meta = {"gymflow.config_hash": digest, "gymflow.attempted": str(len(env_tasks))}
    write_episodes(rollout_dir, env_name, kept, info, meta)
    write_text(json_dir / f"{env_name}.json", json.dumps([to_agentgym(ep) for ep in kept], indent=1))


def write_episodes(
    folder: Path, prefix: str, episodes: list[Episode], info: RunInfo, metadata: dict[str, str] | None = None
) -> None:
    """Write episodes and their turns; the turns file first, so a present episodes file implies its turns."""
    rows = [episode_rows(ep, info) for ep in episodes]
    write_rows(table_path(folder, prefix, "turns"), "turns", [t for _, ts in rows for t in ts], metadata)
    write_rows(table_path(folder, prefix, "episodes"), "episodes", [e for e, _ in rows], metadata)


def trajectory_metrics(rollout_dir: str | Path, envs: list[str]) -> dict[str, dict[str, float]]:
    """Per environment: expert success over the attempted tasks, kept episodes, mean turns and characters."""
    from gymflow.store.db import connect  # duckdb: writing episodes (RL on a lent GPU machine) needs none

    db = connect(rollout_dir)
    rows = db.sql(
        """select e.env, count(*) as kept, avg(e.turns) as mean_turns, avg(c.chars) as mean_chars
           from episodes e join (select episode_id, sum(length(text)) as chars from turns group by 1) c
           using (episode_id) group by e.env"""
    ).fetchall()
    found = {env: (kept, turns, chars) for env, kept, turns, chars in rows}
    out = {}
    for env in envs:
        attempted = int(file_metadata(table_path(rollout_dir, env, "episodes"))["gymflow.attempted"])
        kept, turns, chars = found.get(env, (0, 0.0, 0.0))
        out[env] = {
            "attempted": attempted,
            "kept": kept,
            "success": round(kept / max(attempted, 1), 4),
            "mean_turns": round(turns, 2),
            "mean_chars": round(chars, 1),
        }
    return out
