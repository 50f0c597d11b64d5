"""Household (TextWorld) rules: the text clean-up, the command checks, the game's rewards and the expert."""

import dataclasses
from itertools import islice

import pytest
from textworld.logic import Proposition, Variable

from gymflow.envs.base import BadTask
from gymflow.envs.household import (
    LEVELS,
    TASK_PREFIX,
    Household,
    World,
    check_command,
    compact,
    explain,
    game_file,
    has_ambiguous_names,
    make_game,
)


@pytest.fixture(scope="module")
def tasks():
    """One task per level (levels come in shuffled rounds, so the first four cover them all)."""
    found = {t.difficulty: t for t in islice(Household.generate("train", 5), len(LEVELS))}
    assert set(found) == set(LEVELS)
    return found


@pytest.fixture()
def env():
    env = Household()
    yield env
    env.close()


@pytest.mark.slow  # a TextWorld game made per level (about a second each)
def test_tasks_name_only_the_goal_and_keep_the_walkthrough(tasks):
    for level, task in tasks.items():
        assert task.instruction.startswith(TASK_PREFIX) and "TextWorld" not in task.instruction
        assert len(task.hidden["walkthrough"]) == int(level) == task.hidden["quest_length"]


def test_compact_drops_headers_score_and_status_bar():
    raw = (
        "\n\n-= Pantry =-\nYou are in the pantry.\n\nThere is a closed coffer here.\n\n"
        "Your score has just gone up by one point.\n\n   *** The End ***\n\nYou scored 1 out of 1.\n"
        ">                     -= Pantry =-0/1"
    )
    assert compact(raw) == "You are in the pantry. There is a closed coffer here."


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("", "Empty action"),
        ("x" * 500, "Action too long"),
        ("go north. take apple", "one command at a time"),
        ("go north then take apple", "one command at a time"),
        ("quit", "Unknown command 'quit'"),
        ("restart", "Unknown command 'restart'"),
        ("go to kitchen", "Use 'go north'"),
        ("take", "'take' needs an object, e.g. 'take bowl from shelf'"),
    ],
)
def test_bad_commands_are_explained(command, expected):
    message = check_command(command, ["go north", "take bowl from shelf"])
    assert message is not None and expected in message


def test_good_commands_pass_the_check():
    for command in ("look", "inventory", "go west", "take Henderson's key from box", "Open Safe"):
        assert check_command(command, []) is None


@pytest.mark.slow  # compiles its game with Inform 7 on a cold cache
def test_walkthrough_pays_only_at_the_end(env, tasks):
    task = tasks["4"]
    obs = env.reset(task)
    assert obs.startswith(task.instruction) and "You are in the" in obs
    *middle, last = task.hidden["walkthrough"]
    for command in middle:
        step = env.step(command)
        assert step.reward == 0.0 and not step.done and "-=" not in step.observation
    step = env.step(last)
    assert step.reward == 1.0 and step.done and step.observation.endswith("Task complete.")


@pytest.mark.slow  # compiles its game with Inform 7 on a cold cache
def test_invalid_commands_leave_the_game_alone(env, tasks):
    task = tasks["6"]
    env.reset(task)
    for command in ("quit", "restart", "look. look", "go somewhere", "take", "\n\n"):
        step = env.step(command)
        assert step.reward == 0.0 and not step.done
    step = env.step("take unicorn")
    assert step.observation == "You can't see any such thing. Choose one of the available actions."
    assert env.state.policy_commands == task.hidden["walkthrough"]  # nothing moved
    assert env.available_actions() and "look" in env.available_actions()


@pytest.mark.slow  # compiles its game with Inform 7 on a cold cache
def test_expert_replans_after_a_detour(env, tasks):
    task = tasks["8"]
    env.reset(task)
    detour = [
        a for a in env.available_actions() if a.startswith("go ") and a != task.hidden["walkthrough"][0]
    ]
    detour = detour or [a for a in env.available_actions() if a.startswith(("take ", "drop "))]
    env.step(detour[0])
    for _ in range(env.spec.max_turns):
        thought, action = env.expert_step()
        assert thought.endswith(".") and action in env.available_actions()
        if env.step(action).done:
            break
    assert env.reward == 1.0


@pytest.mark.slow  # compiles its game with Inform 7 on a cold cache
def test_reset_refuses_a_task_its_game_no_longer_matches(env, tasks):
    task = tasks["2"]
    changed = dataclasses.replace(task, hidden={**task.hidden, "walkthrough": ["look"]})
    with pytest.raises(BadTask, match="differs from the task"):
        env.reset(changed)
    assert env.task is None and env.done  # no episode to step: a reset must succeed first


@pytest.mark.slow  # compiles its game with Inform 7 on a cold cache
def test_compiled_games_are_cached(tasks):
    task = tasks["2"]
    settings = {k: task.hidden[k] for k in ("quest_length", "rooms", "objects")}
    path = game_file(task.seed, settings)
    before = path.stat()
    assert game_file(task.seed, settings) == path
    after = path.stat()  # the same file, not compiled again; its mtime marks the use (the cache's LRU order)
    assert after.st_ino == before.st_ino and after.st_mtime_ns >= before.st_mtime_ns
    assert path.with_suffix(".json").exists()


def _world(*facts):
    return World([Proposition(name, [Variable(a, "t") for a in args]) for name, *args in facts])


def test_thoughts_say_why():
    world = _world(("at", "P", "pantry"), ("north_of", "kitchen", "pantry"), ("east_of", "hall", "kitchen"))
    plan = ["go north", "go east", "take apple from shelf", "put apple on table"]
    assert explain(plan, "put the apple on the table", world) == (
        "To put the apple on the table, I next have to 'take apple from shelf', which I can do from the hall; "
        "I go north first, to the kitchen."
    )
    plan = ["take key from shelf", "unlock chest with key", "open chest", "take apple from chest"]
    assert (
        explain(plan, "take the apple", world)
        == "I need the key to unlock the chest, so I take it from the shelf."
    )
    assert (
        explain(plan[2:], "take the apple", world)
        == "The apple I need is inside the closed chest, so I open it."
    )
    door_world = _world(("at", "P", "pantry"), ("link", "pantry", "gate", "hall"))
    assert (
        explain(["open gate", "go east"], "x", door_world)
        == "The closed gate blocks the way to the hall, so I open it."
    )


@pytest.mark.slow  # 9 TextWorld games made, and those its draw of 8 tasks made
def test_games_whose_names_clash_are_not_tasks():
    # Seed 1366505497 at quest length 4 has a "box" beside a "Microsoft limited edition box": the parser asks
    # "Which do you mean" to the walkthrough's own "take ... from box", so the expert could never win it.
    assert has_ambiguous_names(make_game(1366505497, LEVELS["4"]))
    assert not any(
        has_ambiguous_names(make_game(t.seed, LEVELS[t.difficulty]))
        for t in islice(Household.generate("train", 5), 8)
    )
