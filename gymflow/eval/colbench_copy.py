"""Does a colbench agent put the rules it was given into its code? Per submitted function, each rule value of
the task is looked for in the code, by where the agent could have read it: stated in the request, told by the
user in answer to a question, or never told. The expert copies every value it was given; a value never told
can only be guessed.

    python -m gymflow.eval.colbench_copy data/rollouts/offline          # any rollout folder with colbench episodes
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gymflow import paths
from gymflow.envs.colbench import submitted_code
from gymflow.envs.instructions import load_tasks
from gymflow.errors import UserError, run_command
from gymflow.store.db import connect

SOURCES = ("stated", "told", "never told")


def value_in_code(value: object, code: str) -> bool:
    """The value as the reference writes it: a number as a whole token, a string quoted."""
    if isinstance(value, str):
        return f'"{value}"' in code or f"'{value}'" in code
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return re.search(rf"(?<![\w.]){re.escape(text)}(?![\w.])", code) is not None


def copy_rates(
    rollout_dir: str | Path, data_dir: str | Path = paths.DATA, env: str = "colbench"
) -> dict[str, Any]:
    """Per source of a rule value (stated, told, never told): how many values the submitted functions could
    hold and the fraction they do; over the episodes of `env` in `rollout_dir` that submitted code."""
    db = connect(rollout_dir)
    rows = db.execute(
        "select e.episode_id, e.task_id, t.role, t.text, t.action from episodes e join turns t using (episode_id) "
        "where e.env = $env order by e.episode_id, t.turn",
        {"env": env},
    ).fetchall()
    if not rows:
        raise UserError(f"no {env} episodes in {rollout_dir}: point at a rollout folder that has some")
    tasks = {t.task_id: t for t in load_tasks(data_dir, env)}
    episodes: dict[str, dict[str, Any]] = {}
    for episode_id, task_id, role, text, action in rows:
        ep = episodes.setdefault(episode_id, {"task": tasks[task_id], "heard": "", "code": None})
        if role == "user":
            ep["heard"] += "\n" + text
        elif role == "assistant" and action and action.lower().startswith("submit"):
            ep["code"] = submitted_code(action[len("submit") :])
    counts = {source: [0, 0] for source in SOURCES}
    submitted = 0
    for ep in episodes.values():
        if not ep["code"]:
            continue
        submitted += 1
        for rule in ep["task"].hidden["specifics"]:
            told = rule["answer"] in ep["heard"]
            source = "stated" if not rule["hidden"] else "told" if told else "never told"
            for value in rule["values"].values():
                counts[source][0] += 1
                counts[source][1] += value_in_code(value, ep["code"])
    return {
        "episodes": len(episodes),
        "submitted": submitted,
        **{s: {"values": n, "copied": round(k / n, 4) if n else None} for s, (n, k) in counts.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gymflow.eval.colbench_copy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("rollout_dir", metavar="ROLLOUT_DIR", help="a rollout folder with colbench episodes")
    folder = parser.parse_args().rollout_dir
    rates = copy_rates(folder)
    table = Table(
        "rule value",
        "values in submissions",
        "in the code",
        title=f"{folder}: {rates['submitted']} of {rates['episodes']} episodes submitted",
    )
    for source in SOURCES:
        r = rates[source]
        table.add_row(source, str(r["values"]), "-" if r["copied"] is None else f"{r['copied']:.3f}")
    Console().print(table)


if __name__ == "__main__":
    run_command(main)
