"""LOOP on `apps` with AppWorld's settings (LOOP section 5.2: difficulties 1 and 2, K = 6, 40 turns in training,
50 in evaluation), scaled to the CPU (8 tasks per iteration, LOOP's 40 is `-S` away), as a DVC experiment of the
default pipeline from its SFT agent; then LOOP's Figure 3a (the behaviour metrics, SFT against LOOP) and
held-out TGC and SGC by difficulty for the initial, SFT and LOOP agents.

    python -m flows.loop_apps            # `dvc exp run --temp` with OVERRIDES (only rl and evaluate@rl rerun)
    python -m flows.loop_apps --table    # only the tables, from the experiment already run

Printed, written to data/compare/loop_apps.md and posted as a Prefect artifact.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import experiment, finished, publish

NAME = "loop-apps"
HEAD = "loop-apps-head"  # the committed run (no RL on apps): its init and sft evaluations are the baselines
OVERRIDES = [  # rl.tasks replaced, not merged into the default's {maze, babyai}
    "~rl.tasks",
    "+rl.tasks={apps: 8}",
    "+rl.difficulties={apps: ['1', '2']}",
    "rl.horizon=[{turns: 40}]",
]
FIGURE_3A = {  # LOOP's Figure 3a rows -> the keys of gymflow.eval.behaviour
    "turns per episode": "turns_per_episode",
    "code characters per episode": "code_chars_per_episode",
    "turns with several code cells": "multi_cell_turn_rate",
    "execution errors per turn": "execution_errors_per_turn",
    "show_api_doc calls per episode": "show_api_doc_per_episode",
    "first API uses after their doc": "doc_before_first_use",
    "failed-API give-up rate": "give_up_rate",
    "'assume' per episode": "assume_per_episode",
    "'dummy' per episode": "dummy_per_episode",
}


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def figure3a(sft: dict, loop: dict) -> str:
    """LOOP / SFT for each behaviour metric (LOOP's Figure 3a shows base -> LOOP the same way)."""
    lines = ["| behaviour | SFT | LOOP | LOOP / SFT |", "|---|---|---|---|"]
    for label, key in FIGURE_3A.items():
        a, b = sft.get(key), loop.get(key)
        ratio = f"{b / a:.2f}x" if a and b is not None else "-"
        lines.append(f"| {label} | {_number(a)} | {_number(b)} | {ratio} |")
    return "\n".join(lines)


LEVELS = ("1", "2", "3")


def per_level(metrics: dict, key: str) -> str:
    return " / ".join(f"{metrics[level][key]:.2f}" for level in LEVELS)


def goals(policies: dict[str, dict]) -> str:
    """Held-out TGC, SGC and reward per difficulty for each policy's apps evaluation, and under them the reward
    of calling complete_task() at once (the evaluation's `noop_reward`): the floor LOOP finds with no success."""
    lines = ["| policy | TGC 1 / 2 / 3 | SGC 1 / 2 / 3 | reward 1 / 2 / 3 |", "|---|---|---|---|"]
    for policy, m in policies.items():
        lines.append(
            f"| {policy} | " + " | ".join(per_level(m, key) for key in ("success", "sgc", "reward")) + " |"
        )
    with_noop = [m for m in policies.values() if all("noop_reward" in m[level] for level in LEVELS)]
    if with_noop:  # the same tasks for every policy; evaluations before it was measured have none
        lines.append(f"| no-op: complete_task() at once | - | - | {per_level(with_noop[0], 'noop_reward')} |")
    return "\n".join(lines)


def tables(repo: str) -> str:
    runs = finished(repo, HEAD)
    if NAME not in runs or "rl" not in runs[NAME]:
        return f"no finished experiment {NAME!r} yet: run `python -m flows.loop_apps`"
    base, loop = runs[NAME], runs[NAME]["rl"]["apps"]
    policies = {p: base[p]["apps"] for p in ("init", "sft") if "apps" in base.get(p, {})} | {"LOOP": loop}
    return (
        "Held-out apps tasks (30 scenarios x 3 variants), greedy:\n\n"
        + goals(policies)
        + "\n\nBehaviour (LOOP's Figure 3a) over the same episodes:\n\n"
        + figure3a(base["sft"]["apps"]["behaviour"], loop["behaviour"])
    )


@flow(name="gymflow-loop-apps", log_prints=True)
def loop_apps(repo: str = ".", run: bool = True) -> str:
    if run and NAME not in finished(repo, HEAD):
        experiment.with_options(name=NAME)(NAME, OVERRIDES, repo)
    return publish(repo, "loop_apps", tables(repo), "LOOP on apps: TGC, SGC and Figure 3a")


if __name__ == "__main__":
    args = parse("flows.loop_apps", __doc__, {"--table": "only the tables, from the experiment already run"})
    loop_apps(repo=str(Path.cwd()), run=not args.table)
