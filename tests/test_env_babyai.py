"""BabyAI's own rules: the text view, the high-level actions, minigrid's reward and the expert."""

import pytest
from minigrid.core.world_object import Ball, Door, Key

from gymflow.envs.babyai import LEVELS, BabyAI, Game, front, solve
from gymflow.envs.base import Task
from gymflow.envs.instructions import build_splits


def make_task(level: str, seed: int, family: str = "goto") -> Task:
    game = Game(level)
    game.reset(seed)
    return Task(
        env="babyai",
        task_id=f"test-{level}-{seed}",
        split="train",
        difficulty=family,
        seed=seed,
        instruction=f"Your goal: {game.mission}",
        hidden={"level": level, "mission": game.mission},
    )


def empty_room(env: BabyAI) -> tuple:
    """Clear the room the agent is in and face it north from the middle of the bottom row."""
    grid = env.game.env.grid
    for i in range(1, 7):
        for j in range(1, 7):
            grid.set(i, j, None)
    env.game.env.agent_pos, env.game.env.agent_dir = (3, 6), 3
    env.game._changed()
    return grid


@pytest.fixture()
def env():
    env = BabyAI()
    yield env
    env.close()


def test_view_names_offsets_and_indices(env):
    env.reset(make_task("BabyAI-GoToRedBallNoDists-v0", 1))
    grid = empty_room(env)
    grid.set(2, 4, Ball("red"))  # 2 ahead, 1 left
    grid.set(5, 5, Ball("red"))  # 1 ahead, 2 right: nearer, so it is red ball 1
    grid.set(3, 3, Key("blue"))  # 3 ahead
    text = env.game.describe()
    assert text == (
        "You see: red ball 1 (1 ahead, 2 right); red ball 2 (2 ahead, 1 left); blue key 1 (3 ahead). "
        "Facing: blue key 1, 3 steps away. Carrying nothing."
    )


def test_go_to_walks_up_to_the_named_object(env):
    env.reset(make_task("BabyAI-GoToRedBallNoDists-v0", 1))
    grid = empty_room(env)
    grid.set(2, 4, Ball("red"))
    grid.set(5, 5, Ball("red"))
    env.step("go to red ball 2")
    assert front(env.game.pose) == (2, 4)
    assert "Facing: red ball 1, 1 step away" in env.game.describe()  # indices follow the new view


def test_success_pays_minigrids_reward():
    env = BabyAI()
    task = make_task("BabyAI-GoToRedBallNoDists-v0", 5)
    first = env.reset(task)
    assert first.startswith("Your goal: go to the red ball\nYou see:")
    step = None
    for _ in range(5):
        _, action = env.expert_step()
        step = env.step(action)
        if step.done:
            break
    minigrid_env = env.game.env
    assert step.done and step.observation == "Mission complete: go to the red ball."
    assert step.reward == pytest.approx(1 - 0.9 * minigrid_env.step_count / minigrid_env.max_steps)
    assert env.spec.is_success(step.reward)


def test_invalid_actions_change_nothing(env):
    env.reset(make_task("BabyAI-GoToRedBallNoDists-v0", 1))
    empty_room(env)
    env.game.env.agent_pos, env.game.env.agent_dir = (3, 1), 3  # facing the north wall
    steps = env.game.env.step_count
    for action, message in [
        ("move forward", "You cannot move forward: wall blocks the way."),
        ("go to", 'Name an object in view after "go to", e.g. "go to red ball 1".'),
        ("go to green box 1", 'No "green box 1" in view; you see: nothing.'),
        ("drop", "You are not carrying anything to drop."),
        ("toggle", "There is nothing in front of you to toggle (only doors and boxes)."),
    ]:
        step = env.step(action)
        assert (step.observation, step.reward, step.done) == (message, 0.0, False)
    assert env.game.env.step_count == steps
    assert env.step("fly away").observation.startswith('Unknown action "fly away".')


def test_locked_door_needs_its_key(env):
    env.reset(make_task("BabyAI-GoToRedBallNoDists-v0", 1))
    grid = empty_room(env)
    grid.set(3, 0, Door("red", is_locked=True))  # in the north wall, 6 ahead
    grid.set(4, 6, Key("red"))  # right of the agent
    step = env.step("toggle and go through red locked door 1")
    assert step.observation == "red locked door 1 is locked; you need to carry the red key."
    env.step("turn right")
    assert env.step("pick up").observation.startswith("You picked up the red key.")
    env.step("turn left")
    env.step("toggle and go through red locked door 1")
    assert grid.get(3, 0).is_open and not grid.get(3, 0).is_locked
    assert env.game.pose[:2] == (3, 0)  # in the doorway: the grid ends beyond it


def test_listed_actions_are_all_accepted():
    errors = ("Unknown action", 'No "', "There is no", "You cannot", "There is nothing", "You are not")
    env = BabyAI()
    for level in [LEVELS["putnext"][0], LEVELS["unlock"][2], LEVELS["open"][0]]:
        task = make_task(level, 3)
        env.reset(task)
        for action in env.available_actions():
            env.reset(task)
            step = env.step(action)
            assert not step.observation.startswith(errors), (level, action, step.observation)


@pytest.mark.parametrize("family", list(LEVELS))
def test_expert_solves_every_family_quickly(family):
    tasks = [t for t in build_splits(BabyAI, n_train=10, n_eval=0, seed=4)["train"] if t.difficulty == family]
    assert tasks
    env = BabyAI()
    for task in tasks:
        env.reset(task)
        actions = []
        while not env.done and len(actions) < env.spec.max_turns:
            _, action = env.expert_step()
            actions.append(action)
            env.step(action)
        assert env.spec.is_success(env.reward), task.task_id
        assert actions == task.hidden["plan"]  # the stored plan replays exactly
        assert len(actions) <= 15


@pytest.mark.parametrize("level", [lv for levels in LEVELS.values() for lv in levels])
def test_expert_on_raw_seeds(level):
    game = Game(level)
    for seed in range(8):
        game.reset(seed)
        assert solve(game, 20) is not None, (level, seed)
