"""Environment registry: a plain dict from name to class, so what a stage uses stays visible.

Importing this loads every environment (minigrid, ScienceWorld's JVM bridge, ...). Code that needs only the
names, such as the params check, takes them from `gymflow.env_names`; tests keep the two in step.
"""

from gymflow.envs.apps.env import Apps
from gymflow.envs.babyai import BabyAI
from gymflow.envs.base import Env, EnvSpec, EpisodeOver, NoExpert, Step, Task
from gymflow.envs.colbench import ColBench, ColBenchSingle
from gymflow.envs.household import Household
from gymflow.envs.maze import Maze
from gymflow.envs.sciworld import SciWorld
from gymflow.envs.textcraft import TextCraft
from gymflow.envs.wordle import Wordle
from gymflow.errors import UserError

ENVS: dict[str, type[Env]] = {
    "maze": Maze,
    "wordle": Wordle,
    "textcraft": TextCraft,
    "babyai": BabyAI,
    "sciworld": SciWorld,
    "household": Household,
    "colbench": ColBench,
    "colbench_single": ColBenchSingle,
    "apps": Apps,
}


def make_env(name: str) -> Env:
    """A fresh environment by registered name, with an error that lists the valid names."""
    if name not in ENVS:
        raise UserError(f"unknown environment {name!r}; choose one of: {', '.join(sorted(ENVS))}")
    return ENVS[name]()


__all__ = ["ENVS", "Env", "EnvSpec", "EpisodeOver", "NoExpert", "Step", "Task", "make_env"]
