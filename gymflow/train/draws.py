"""What each iteration of an iterated stage (AgentEvol's explore, RL) draws, derived from the run's seed: a
fresh draw per iteration, the same one whenever the iteration is run again (a resumed run included)."""

from __future__ import annotations

import random

from gymflow.envs.base import Task


def iteration_seed(seed: int, iteration: int) -> int:
    """The seed of iteration `iteration` of a run seeded `seed`: distinct for every (seed, iteration) pair
    with iteration < 10,000."""
    return seed * 10_000 + iteration


def draw_tasks(tasks: list[Task], n: int | None, seed: int, iteration: int) -> list[Task]:
    """The train tasks an iteration plays: all of them, or a draw of `n` that differs per iteration."""
    if n is None or n >= len(tasks):
        return tasks
    return random.Random(iteration_seed(seed, iteration)).sample(tasks, n)
