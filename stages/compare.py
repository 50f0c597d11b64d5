"""Stage `compare`: each method against the agent it must beat, paired on the same held-out tasks.

    dvc repro compare                          # AgentEvol and RL: python -m stages.compare
    dvc repro sweet/dvc.yaml:compare_sweet     # SWEET-RL's actor: python -m stages.compare sweet
AgentEvol's last iteration against its steps-matched control (`control`: the same steps on the SFT data
alone) and against the SFT agent, the control against SFT, and RL against SFT, per environment both
played (`evaluate.derived`); or SWEET-RL's actor against its control (`sweet_control`) and against the agent it
trained from (`sweet.start`), and that control against the start, on `sweet.env`. Per-task differences of greedy
success, their mean and standard error (`gymflow.eval.compare`). Writes data/compare/default.md (or sweet_actor.md),
data/metrics/compare.json (or compare_sweet.json) and prints the verdicts, with the CPU this ran on.
"""

import json
import platform
from pathlib import Path

from gymflow import paths
from gymflow.config import Params, load_params
from gymflow.errors import UserError
from gymflow.eval.compare import describe, greedy_success, paired
from gymflow.stage import chosen, required, run_stage, write_metrics
from gymflow.store.io import write_text

Pairs = list[tuple[str, str, list[str]]]  # (method, baseline, the environments both played)


def cpu() -> str:
    """The processor's name, for the timings beside the table."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line), "")
    return name or platform.processor() or platform.machine()


def evol_plan(params: Params) -> tuple[str, str, Pairs, dict[str, str]]:
    """AgentEvol's last iteration and RL: (table name, the method named in the verdicts, pairs, trained stages)."""
    evol = required(params.evol, "evol")
    last = list(evol.iterations)[-1]
    pairs = []
    for method, baseline in [(last, "control"), (last, "sft"), ("control", "sft"), ("rl", "sft")]:
        played = params.evaluated_envs(baseline)
        pairs.append((method, baseline, [e for e in params.evaluated_envs(method) if e in played]))
    trained = {"sft": "sft", f"learn@{last}": f"learn/{last}", "control": "control"}
    return "default", last, pairs, trained


def sweet_plan(params: Params) -> tuple[str, str, Pairs, dict[str, str]]:
    """SWEET-RL's actor on sweet.env, against its control and its start."""
    sweet = required(params.sweet, "sweet")
    if sweet.env not in params.evaluated_envs(sweet.start):
        raise UserError(
            f"the start agent {sweet.start!r} is not evaluated on sweet.env {sweet.env!r}: add it to evaluate.envs"
        )
    env = [sweet.env]
    pairs = [
        ("sweet", "sweet_control", env),
        ("sweet", sweet.start, env),
        ("sweet_control", sweet.start, env),
    ]
    trained = {"sft": "sft", "actor": "actor", "sweet_control": "sweet_control"}
    return "sweet_actor", "sweet", pairs, trained


PLANS = {"evol": ("compare", evol_plan), "sweet": ("compare_sweet", sweet_plan)}
NAMES = {
    "sweet": "SWEET-RL's actor",
    "control": "its steps-matched control",
    "sweet_control": "its steps-matched control",
}


def main() -> None:
    method = chosen(PLANS, "comparison")
    params = load_params()
    required(params.evaluate, "evaluate")
    out, named, pairs, trained_stages = PLANS[method][1](params)
    table = [
        "| method | baseline | env | method success | baseline success | paired difference | SE | z | tasks |"
    ]
    table.append("|---|---|---|---|---|---|---|---|---|")
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    lines = []
    for agent, baseline, envs in pairs:
        for env in envs:
            p = paired(
                greedy_success(paths.EVALUATE_ROLLOUTS, agent, env),
                greedy_success(paths.EVALUATE_ROLLOUTS, baseline, env),
            )
            metrics.setdefault(f"{agent}_vs_{baseline}", {})[env] = p.to_dict()
            table.append(
                f"| {agent} | {baseline} | {env} | {p.method:.3f} | {p.baseline:.3f} | {p.mean:+.3f} | "
                f"{p.se:.3f} | {p.z:+.1f} | {p.n} |"
            )
            if agent == named:
                label = NAMES.get(agent, f"AgentEvol ({agent})")
                lines.append(describe(label, NAMES.get(baseline, baseline), env, p))
    trained = {stage: json.loads(paths.metrics(name).read_text()) for stage, name in trained_stages.items()}
    precision = "bf16" if trained["sft"].get("bf16") else "fp32"  # 2-4x apart on a CPU (README)
    seconds = ", ".join(f"{stage} {m.get('wall_seconds')}" for stage, m in trained.items())
    note = f"Run on {cpu()}, training in {precision}; training seconds: {seconds}"
    write_text(paths.comparison(out), "\n".join([*table, "", *lines, "", note, ""]))
    write_metrics(PLANS[method][0], metrics | {"cpu": cpu(), "precision": precision})
    print("\n".join([*lines, note]))


if __name__ == "__main__":
    run_stage(
        main,
        arguments={
            "METHOD": "what to compare: evol (AgentEvol and RL, the default) or sweet (SWEET-RL's actor)"
        },
    )
