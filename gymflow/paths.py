"""Where the pipeline keeps its data: each path under data/ that the stages and flows read or write, named once.

Paths are relative to the repository root, where every stage runs (`dvc repro`, `python -m stages.NAME`).
dvc.yaml and sweet/dvc.yaml spell the same paths out as their stages' deps and outs, since DVC reads no Python;
tests/test_paths.py checks that each output named here is a stage's output there.

    paths.model("sft")               data/models/sft
    paths.metrics("learn/evol1")     data/metrics/learn/evol1.json (`dvc metrics show`)
    paths.plot("rl")                 data/plots/rl.csv (`dvc plots show`)

Code that takes a data folder as an argument (`gymflow view --data`, `load_tasks(data_dir, ...)`, the SQL
views) defaults to `DATA` and finds the same layout under the folder it is given (`under`).
"""

from __future__ import annotations

from pathlib import Path

DATA = Path("data")  # every stage's outputs: tracked by DVC, ignored by git (but data/compare/)
PARAMS_OK = DATA / "params.ok"  # stage `params`: params.yaml passed; every other stage depends on it
INSTRUCTIONS = DATA / "instructions"  # <env>.tasks.parquet: each environment's train and eval splits
AGENTTRAJ = DATA / "agenttraj"  # <env>.json: AgentTraj in AgentGym's conversation format
MODELS = DATA / "models"  # <agent>/: a model directory (init, sft, evol<i>, control, rl, sweet, rft, mtdpo)

ROLLOUTS = DATA / "rollouts"  # rollout tables, <env>.{episodes,turns}.parquet, one folder per stage
TRAJECTORY_ROLLOUTS = ROLLOUTS / "trajectories"  # AgentTraj: the expert's successful episodes
EVALUATE_ROLLOUTS = ROLLOUTS / "evaluate"  # <policy>/: AgentEval's episodes
EXPLORE_ROLLOUTS = ROLLOUTS / "explore"  # <iteration>/: AgentEvol's exploration
RL_ROLLOUTS = ROLLOUTS / "rl"  # it<iteration>: RL's training episodes, each reply with its advantage
OFFLINE_ROLLOUTS = ROLLOUTS / "offline"  # SWEET-RL: the episodes every method and baseline learns from
BEST_OF_N_ROLLOUTS = ROLLOUTS / "best_of_n"  # <chooser>.n<N>: Best-of-N's executed turns

KEPT = DATA / "evol"  # <iteration>.kept.parquet: the explored episodes AgentEvol's filter kept
CRITICS = DATA / "critics"  # <name>/: a SWEET-RL critic; <name>.critic_scores.parquet: its score of each turn
PAIRS = DATA / "sweet" / "pairs.parquet"  # SWEET-RL's per-turn pairs (gymflow.train.sweet.PAIRS_SCHEMA)

METRICS = DATA / "metrics"  # <stage>.json
PLOTS = DATA / "plots"  # <stage>.csv
COMPARE = DATA / "compare"  # the comparisons' tables, kept in git


def under(root: str | Path, path: Path) -> Path:
    """`path`, one of the folders above, in the data folder `root` instead of `DATA` (a copy, a test's)."""
    return Path(root) / path.relative_to(DATA)


def model(name: str) -> Path:
    """The model directory of agent `name` (sft, evol1, ...)."""
    return MODELS / name


def explored(iteration: str) -> Path:
    """The rollout tables AgentEvol's iteration `iteration` explored."""
    return EXPLORE_ROLLOUTS / iteration


def kept(iteration: str) -> Path:
    """What AgentEvol's iteration `iteration` kept and learned from."""
    return KEPT / f"{iteration}.kept.parquet"


def critic(name: str) -> Path:
    """SWEET-RL's critic `name` (one of sweet.critics), as `gymflow.train.critic.load_critic` reads it."""
    return CRITICS / name


def critic_scores(name: str) -> Path:
    """Critic `name`'s score of every offline turn (the `critic_scores` table)."""
    return CRITICS / f"{name}.critic_scores.parquet"


def metrics(name: str) -> Path:
    """A stage's metrics file, `name` its stage (with its item: `evaluate/sft`, `learn/evol1`)."""
    return METRICS / f"{name}.json"


def plot(name: str) -> Path:
    """A stage's curve, `name` as for `metrics`."""
    return PLOTS / f"{name}.csv"


def comparison(name: str) -> Path:
    """A comparison's Markdown table (`default`: stage `compare`'s; a flow's under its own name)."""
    return COMPARE / f"{name}.md"
