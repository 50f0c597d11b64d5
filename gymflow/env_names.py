"""The environments' names and how many tasks each can make, without importing the environments.

`gymflow.config` checks params.yaml with these, so reading params never loads minigrid, ScienceWorld's JVM
bridge or TextWorld. `gymflow.envs.ENVS` maps the same names to the classes; tests/test_config.py keeps the
two in step and the finite pools below equal to what the generators yield.
"""

from __future__ import annotations

# name -> the most tasks its instruction set can hold. "total" bounds train + eval together: the size of a
# pool both splits draw from, or, for an endless generator, a cap that keeps one draw within minutes (per task:
# maze ~1 ms and 3 KB, babyai ~25 ms, household a TextWorld compile of 1-2 s). "train" and "eval" bound a
# split with its own pool (ScienceWorld's official variations whose gold path fits the turn limit).
TASK_LIMITS: dict[str, dict[str, int]] = {
    "maze": {"total": 100_000},
    "wordle": {"total": 2_315},  # the answer list
    "textcraft": {"total": 543},  # the craftable goals of depth 1 to 4
    "babyai": {"total": 20_000},
    "sciworld": {"train": 1_858, "eval": 887},  # sum of sciworld.TASK_TYPES' usable variations per split
    "household": {"total": 2_000},
    "colbench": {"total": 20_000},  # endless; ~3 ms and ~3 KB per task (the paper: 10k train, 1k test)
    "colbench_single": {"total": 20_000},  # the same tasks
    "apps": {
        "total": 20_000
    },  # endless (12 templates x scenario seeds x 3 variants); ~0.6 ms, ~2 KB per task
    "sql": {"total": 5_000},  # endless (3 schemas x 40 databases x 24 templates and their values)
    "weather": {"total": 20_000},  # endless (8 templates x 40 cities x 700 days)
    "todo": {"total": 20_000},  # endless (8 templates x generated accounts)
    "movie": {"total": 1_500},  # 10 templates over a fixed world; 600 easy questions, balanced draws
    "academia": {"total": 900},  # 9 templates over a fixed literature; 410 easy questions, balanced draws
    "sheet": {"total": 20_000},  # endless (7 templates x generated workbooks)
    "search": {"total": 800},  # 7 question kinds over a fixed world; 270 3-hop questions, balanced draws
    "webshop": {"total": 6_000},  # instructions drawn from 3,000 products (~40 ms each: a search)
    "webnav": {"total": 750},  # 11 templates over a fixed site; 264 easy objectives, balanced draws
}
ENV_NAMES: tuple[str, ...] = tuple(TASK_LIMITS)
# name -> the observation formats it can show (`instructions.views`; the first is the default) and who can play
# its AgentTraj (`trajectories.demonstrators`), where there is a choice. The classes declare the same.
VIEWS: dict[str, tuple[str, ...]] = {"maze": ("coords", "verbal")}
DEMONSTRATORS: dict[str, tuple[str, ...]] = {"maze": ("expert", "greedy")}


def over_limit(env: str, n_train: int, n_eval: int) -> tuple[str, int] | None:
    """The first of `env`'s limits that a split of `n_train` and `n_eval` tasks exceeds, as ("total", "train"
    or "eval"; the limit). None when the sizes fit, or `env` is no name here."""
    limits = TASK_LIMITS.get(env, {})
    for part, asked in (("total", n_train + n_eval), ("train", n_train), ("eval", n_eval)):
        if part in limits and asked > limits[part]:
            return part, limits[part]
    return None
