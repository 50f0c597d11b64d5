"""Environment registry: a plain dict from name to class, so what a stage uses stays visible.

Importing this loads every environment (minigrid, ScienceWorld's JVM bridge, ...). Code that needs only the
names, such as the params check, takes them from `gymflow.env_names`; tests keep the two in step. An
environment whose library is not installed (a lent GPU machine has no minigrid) is a stand-in that names the
missing package when used, so the others still load (`benchmarks/gpu_check.py` plays maze there).
"""

import importlib

from gymflow.envs.base import Env, EnvSpec, EpisodeOver, NoExpert, Step, Task
from gymflow.errors import UserError


class _Unavailable(type):
    """The metaclass of a stand-in: constructing it or reading its spec says which package is missing."""

    def __getattr__(cls, attr: str):
        raise UserError(cls.why)

    def __call__(cls, *args, **kwargs):
        raise UserError(cls.why)


def _load(name: str, module: str, cls: str) -> type[Env]:
    """`cls` from `gymflow.envs.<module>`, or a stand-in when a package it imports is not installed."""
    try:
        return getattr(importlib.import_module(f"gymflow.envs.{module}"), cls)
    except ModuleNotFoundError as e:
        if not e.name or e.name.split(".")[0] == "gymflow":
            raise  # our own code is broken, not an optional library missing
        why = f"environment {name!r} needs the Python module {e.name.split('.')[0]!r}, which is not installed here"
        return _Unavailable(cls, (), {"why": why})


ENVS: dict[str, type[Env]] = {
    "maze": _load("maze", "maze", "Maze"),
    "wordle": _load("wordle", "wordle", "Wordle"),
    "textcraft": _load("textcraft", "textcraft", "TextCraft"),
    "babyai": _load("babyai", "babyai", "BabyAI"),
    "sciworld": _load("sciworld", "sciworld", "SciWorld"),
    "household": _load("household", "household", "Household"),
    "colbench": _load("colbench", "colbench", "ColBench"),
    "colbench_single": _load("colbench_single", "colbench", "ColBenchSingle"),
    "apps": _load("apps", "apps.env", "Apps"),
}


def make_env(name: str) -> Env:
    """A fresh environment by registered name, with an error that lists the valid names."""
    if name not in ENVS:
        raise UserError(f"unknown environment {name!r}; choose one of: {', '.join(sorted(ENVS))}")
    return ENVS[name]()


__all__ = ["ENVS", "Env", "EnvSpec", "EpisodeOver", "NoExpert", "Step", "Task", "make_env"]
