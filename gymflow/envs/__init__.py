"""Environment registry: a plain dict from name to class, so what a stage uses stays visible.

Importing this loads every environment (minigrid, ScienceWorld's JVM bridge, ...). Code that needs only the
names, such as the params check, takes them from `gymflow.env_names`; tests keep the two in step. An
environment whose library is not installed (a lent GPU machine has no minigrid) is a stand-in that names the
missing package when used, so the others still load (`benchmarks/gpu_check.py` plays maze there).
"""

from gymflow.envs.academia import Academia
from gymflow.envs.apps.env import Apps
from gymflow.envs.base import Env, EnvSpec, EpisodeOver, NoExpert, Step, Task
from gymflow.envs.colbench import ColBench, ColBenchSingle
from gymflow.envs.maze import Maze
from gymflow.envs.movie import Movie
from gymflow.envs.sheet import Sheet
from gymflow.envs.todo import Todo
from gymflow.envs.weather import Weather
from gymflow.envs.webnav import Webnav
from gymflow.errors import UserError


class _Unavailable(type):
    """The metaclass of a stand-in: constructing it or reading its spec says which package is missing."""

    def __getattr__(cls, attr: str):
        raise UserError(cls.why)

    def __call__(cls, *args, **kwargs):
        raise UserError(cls.why)


def _unavailable(name: str, error: ModuleNotFoundError) -> type[Env]:
    """A stand-in for environment `name`, whose library `error` says is not installed. Imports stay written out
    (not importlib), so tests/test_dvc_deps.py sees the code each stage runs."""
    if not error.name or error.name.split(".")[0] == "gymflow":
        raise error  # our own code is broken, not an optional library missing
    why = f"environment {name!r} needs the Python module {error.name.split('.')[0]!r}, which is not installed here"
    return _Unavailable(name, (), {"why": why})


try:
    from gymflow.envs.sql import Sql
except ModuleNotFoundError as e:
    Sql = _unavailable("sql", e)
try:
    from gymflow.envs.search import Search
except ModuleNotFoundError as e:
    Search = _unavailable("search", e)
try:
    from gymflow.envs.webshop import WebShop
except ModuleNotFoundError as e:
    WebShop = _unavailable("webshop", e)
try:
    from gymflow.envs.wordle import Wordle
except ModuleNotFoundError as e:
    Wordle = _unavailable("wordle", e)
try:
    from gymflow.envs.textcraft import TextCraft
except ModuleNotFoundError as e:
    TextCraft = _unavailable("textcraft", e)
try:
    from gymflow.envs.babyai import BabyAI
except ModuleNotFoundError as e:
    BabyAI = _unavailable("babyai", e)
try:
    from gymflow.envs.sciworld import SciWorld
except ModuleNotFoundError as e:
    SciWorld = _unavailable("sciworld", e)
try:
    from gymflow.envs.household import Household
except ModuleNotFoundError as e:
    Household = _unavailable("household", e)

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
    "sql": Sql,
    "weather": Weather,
    "todo": Todo,
    "movie": Movie,
    "academia": Academia,
    "sheet": Sheet,
    "search": Search,
    "webshop": WebShop,
    "webnav": Webnav,
}


def make_env(name: str) -> Env:
    """A fresh environment by registered name, with an error that lists the valid names."""
    if name not in ENVS:
        raise UserError(f"unknown environment {name!r}; choose one of: {', '.join(sorted(ENVS))}")
    return ENVS[name]()


__all__ = ["ENVS", "Env", "EnvSpec", "EpisodeOver", "NoExpert", "Step", "Task", "make_env"]
