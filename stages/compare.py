"""Stage `compare`: each method against the agent it must beat, paired on the same held-out tasks.

    dvc repro compare             # or: python -m stages.compare
AgentEvol's last iteration against its steps-matched control (`control`: the same steps on the SFT data
alone) and against the SFT agent, the control against SFT, and RL against SFT, per environment both
played (`evaluate.derived`): per-task differences of greedy success, their mean and standard error
(`gymflow.eval.compare`). Writes data/compare/default.md (the table), data/metrics/compare.json and prints
the verdicts, with the CPU this ran on.
"""

import json
import platform
from pathlib import Path

from gymflow import paths
from gymflow.config import load_params
from gymflow.errors import UserError
from gymflow.eval.compare import describe, greedy_success, paired
from gymflow.stage import run_stage, write_metrics
from gymflow.store.io import write_text


def cpu() -> str:
    """The processor's name, for the timings beside the table."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line), "")
    return name or platform.processor() or platform.machine()


def main() -> None:
    params = load_params()
    if params.evol is None or params.evaluate is None:
        raise UserError(
            "params.yaml needs `evaluate:` and `evol:` sections to compare AgentEvol with its control"
        )
    last = list(params.evol.iterations)[-1]
    pairs = [(last, "control"), (last, "sft"), ("control", "sft"), ("rl", "sft")]
    table = [
        "| method | baseline | env | method success | baseline success | paired difference | SE | z | tasks |"
    ]
    table.append("|---|---|---|---|---|---|---|---|---|")
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    lines = []
    for method, baseline in pairs:
        played = params.evaluated_envs(baseline)
        for env in [e for e in params.evaluated_envs(method) if e in played]:
            p = paired(
                greedy_success(paths.EVALUATE_ROLLOUTS, method, env),
                greedy_success(paths.EVALUATE_ROLLOUTS, baseline, env),
            )
            metrics.setdefault(f"{method}_vs_{baseline}", {})[env] = p.to_dict()
            table.append(
                f"| {method} | {baseline} | {env} | {p.method:.3f} | {p.baseline:.3f} | {p.mean:+.3f} | "
                f"{p.se:.3f} | {p.z:+.1f} | {p.n} |"
            )
            if method == last:
                lines.append(
                    describe(
                        f"AgentEvol ({last})",
                        "its steps-matched control" if baseline == "control" else baseline,
                        env,
                        p,
                    )
                )
    trained = {
        stage: json.loads(path.read_text())
        for stage, path in (
            ("sft", paths.metrics("sft")),
            (f"learn@{last}", paths.metrics(f"learn/{last}")),
            ("control", paths.metrics("control")),
        )
    }
    precision = "bf16" if trained["sft"].get("bf16") else "fp32"  # 2-4x apart on a CPU (README)
    seconds = ", ".join(f"{stage} {m.get('wall_seconds')}" for stage, m in trained.items())
    note = f"Run on {cpu()}, training in {precision}; training seconds: {seconds}"
    write_text(paths.comparison("default"), "\n".join([*table, "", *lines, "", note, ""]))
    write_metrics("compare", metrics | {"cpu": cpu(), "precision": precision})
    print("\n".join([*lines, note]))


if __name__ == "__main__":
    run_stage(main)
