"""The policy-gradient presets against each other (LOOP Table 1), and ScalingInter-RL against a short and a long
fixed horizon (AgentGym-RL Figure 7): DVC experiments behind one command.

    python -m flows.rl_compare              # every preset and horizon x seed as `dvc exp run --temp`, then tables
    python -m flows.rl_compare --table      # only the tables of the experiments already run

Every experiment starts from the same agent (`rl.start`; DVC restores it from its cache) and plays the same
rollout budget: `rl.iterations` x `rl.tasks` x `rl.samples`. Only the algorithm (or the turn limit of training
rollouts) and `rl.seed` change. The tables (held-out greedy success per environment of the trained agent, mean
and range over seeds; the starting agent on top) are printed, written to data/compare/rl.md and posted as a
Prefect artifact.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow

from flows.command_line import parse
from flows.experiments import cell, experiment, finished, publish
from gymflow.config import load_params
from gymflow.train.presets import PRESETS

SEEDS = (0, 1)
HEAD = "rl-loop-s0"  # params.yaml as committed: loop, each environment's own turn limit, seed 0


def horizons(iterations: int) -> dict[str, list[str]]:
    """ScalingInter-RL against fixed limits, as `dvc exp run -S` overrides (the long fixed horizon is each
    environment's own, 15-20 turns: the `loop` run itself). The schedule grows 5 -> 10 -> own over thirds."""
    third = max(iterations // 3, 1)
    scaling = f"[{{turns:5,iterations:{third}}},{{turns:10,iterations:{third}}},{{turns:20}}]"
    return {"short (5 turns)": ["rl.horizon=[{turns:5}]"], "scaling 5-10-20": [f"rl.horizon={scaling}"]}


def name(variant: str, seed: int) -> str:
    slug = variant.split(" ")[0]
    return f"rl-{slug}-s{seed}" if variant in PRESETS else f"rl-horizon-{slug}-s{seed}"


def tables(repo: str, envs: list[str], iterations: int) -> str:
    """Markdown: held-out success of the RL agent per preset, then per horizon, mean (range) over seeds."""
    runs = finished(repo, HEAD)
    header = ["| {} | seeds | " + " | ".join(envs) + " |", "|---" * (len(envs) + 2) + "|"]

    def rows(variants: list[str]) -> list[str]:
        out = []
        start = next((run["sft"] for run in runs.values() if "sft" in run), None)
        if start:
            out.append(
                "| start (SFT) | 1 | " + " | ".join(f"{start[e]['all']['success']:.2f}" for e in envs) + " |"
            )
        for variant in variants:
            by_seed = [runs[name(variant, s)]["rl"] for s in SEEDS if "rl" in runs.get(name(variant, s), {})]
            if by_seed:
                cells = [cell([run[env]["all"]["success"] for run in by_seed]) for env in envs]
                out.append(f"| {variant} | {len(by_seed)} | " + " | ".join(cells) + " |")
        return out

    presets = [header[0].format("algorithm"), header[1], *rows(list(PRESETS))]
    horizon = [header[0].format("turn limit of training rollouts (loop)"), header[1]]
    horizon += rows(["loop", *horizons(iterations)])
    return (
        "\n".join(presets)
        + "\n\n"
        + "\n".join(horizon).replace("| loop |", "| fixed, each env's own (15-20) |")
    )


@flow(name="gymflow-rl-compare", log_prints=True)
def compare(repo: str = ".", run: bool = True) -> str:
    params = load_params(Path(repo) / "params.yaml")
    if params.rl is None or params.evaluate is None:
        raise SystemExit("error: params.yaml needs `rl:` and `evaluate:` sections to compare RL algorithms")
    envs = list(params.rl.tasks)
    if run:
        done = finished(repo, HEAD)  # a rerun resumes: experiments already there are not run again
        plan = {variant: [f"rl.algorithm={variant}"] for variant in PRESETS}
        plan |= horizons(params.rl.iterations)
        for seed in SEEDS:  # every variant of one seed before the next seed
            for variant, overrides in plan.items():
                if name(variant, seed) not in done:
                    experiment.with_options(name=name(variant, seed))(
                        name(variant, seed), [*overrides, f"rl.seed={seed}"], repo
                    )
    return publish(repo, "rl", tables(repo, envs, params.rl.iterations), "RL presets and horizons")


if __name__ == "__main__":
    args = parse("flows.rl_compare", __doc__, {"--table": "only the tables of the experiments already run"})
    compare(repo=str(Path.cwd()), run=not args.table)
