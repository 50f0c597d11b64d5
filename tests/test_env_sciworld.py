"""SciWorld's own rules: official splits, score mapping, failure ends the episode, gold-path expert, JVM shutdown."""

import itertools

import pytest

from gymflow.envs.base import NoExpert, Task
from gymflow.envs.sciworld import (
    NO_MATCH,
    NOT_A_CHOICE_HINT,
    TASK_TYPES,
    SciWorld,
    compact,
    explain,
    kind_sought,
    make_task,
    usable_variations,
)

pytestmark = pytest.mark.slow  # ScienceWorld's JVM

FIND = make_task(
    "find-non-living-thing",
    0,
    "train",
    "Your task is to find a(n) non-living thing. First, focus on the thing. Then, move it to the red box in the kitchen.",
    ["open door to kitchen", "go to kitchen", "look around", "focus on cupboard", "move cupboard to red box"],
)
LIFESPAN = make_task(
    "lifespan-longest-lived",
    0,
    "train",
    "Your task is to find the animal with the longest life span. The animals are in the 'outside' location. "
    "Focus on the animal with the longest life span.",
    [
        "open door to greenhouse",
        "go to greenhouse",
        "open door to outside",
        "go to outside",
        "focus on baby baby brown bear",
    ],
)


@pytest.fixture(scope="module")
def env():
    env = SciWorld()
    yield env
    process = env.sw._gateway.java_process if env.sw is not None else None
    env.close()
    if process is not None:
        process.wait(timeout=10)  # close() must end the JVM, not leave it running


def test_compact_keeps_lines_and_drops_tabs():
    raw = "This room is called the kitchen. In it, you see: \n\tthe agent\n\ta stove,  which is off. \n\n"
    assert (
        compact(raw) == "This room is called the kitchen. In it, you see:\nthe agent\na stove, which is off."
    )


def test_first_observation_is_task_then_room(env):
    obs = env.reset(FIND)
    task_line, room = obs.split("\n", 1)
    assert task_line == FIND.instruction
    assert room.startswith("This room is called the hallway.")
    assert "A door to the kitchen (that is closed)" in room
    assert "\t" not in obs


def test_score_is_mapped_and_completion_ends_the_episode(env):
    env.reset(FIND)
    rewards = [env.step(action).reward for action in FIND.hidden["gold"]]
    assert all(0.0 <= r <= 1.0 for r in rewards)
    assert rewards == sorted(rewards) and 0.0 < rewards[3] < 1.0  # partial credit for focusing first
    assert rewards[-1] == 1.0 and env.done


def test_wrong_focus_fails_with_zero_reward(env):
    env.reset(LIFESPAN)
    step = env.step("focus on picture")  # not an animal: ScienceWorld scores this as a failure
    assert step.done and step.reward == 0.0 and step.info["score"] < 0


def test_invalid_actions_explain_what_to_do(env):
    env.reset(FIND)
    for action in ["", "x" * 250, "pour cup into jug", "fly to the moon"]:  # 250: under the length cap
        step = env.step(action)
        assert step.observation.startswith(NO_MATCH) and "look around" in step.observation
        assert not step.done and step.reward == 0.0
    step = env.step("go to kitchen")
    assert step.observation == "The door is not open."


def test_ambiguous_action_asks_for_a_number(env):
    env.reset(FIND)
    question = env.step("pick up door").observation
    assert question.startswith("Ambiguous request") and "\n0: pick up door" in question
    assert env.step("look around").observation == NOT_A_CHOICE_HINT  # not a number: the question is dropped
    assert env.step("look around").observation.startswith("This room is called the hallway.")


def test_expert_follows_gold_and_skips_over_detours(env):
    env.reset(LIFESPAN)
    env.step("look around")  # a detour the gold path does not have: the expert resumes where it was
    thought, action = env.expert_step()
    assert action == "open door to greenhouse"
    assert "outside" in thought and thought.startswith("My task is to find the animal")
    for _ in range(10):
        thought, action = env.expert_step()
        step = env.step(action)
        if step.done:
            break
    assert step.reward == 1.0 and "longest life span" in thought and "baby brown bear" in thought
    with pytest.raises(NoExpert):
        env.expert_step()


def test_generate_uses_official_variations(env):
    env.reset(FIND)  # starts the env's simulator, used here to ask for ScienceWorld's own split lists
    for split, official in (("train", env.sw.get_variations_train), ("eval", env.sw.get_variations_test)):
        tasks = list(itertools.islice(SciWorld.generate(split, seed=3), 2))
        assert [t.difficulty for t in tasks] == list(TASK_TYPES)[:2]  # one per type, in difficulties() order
        for task in tasks:
            env.sw.load(task.difficulty, 0, "")
            assert task.seed in official()
            assert 1 <= len(task.hidden["gold"]) <= SciWorld.spec.max_turns
            assert task.task_id == f"sciworld-{task.difficulty}-{task.seed}"


def test_thoughts_say_why():
    task = Task(
        "sciworld", "t", "train", "find-living-thing", 1, "Your task is to find a(n) living thing. Then go."
    )
    plan = [
        "open door to greenhouse",
        "go to greenhouse",
        "open door to outside",
        "go to outside",
        "focus on bee",
    ]
    assert kind_sought(task.instruction) == "living thing"
    assert "outside" in explain(plan, 0, task, []) and "greenhouse" in explain(plan, 0, task, [])
    assert explain(plan, 4, task, []) == "The bee is a living thing, so I focus on it."


@pytest.mark.parametrize("task_name", ["power-component", "identify-life-stages-2", "chemistry-mix"])
def test_declared_capacity_is_usable(task_name):
    # The types whose quota the capacity cuts at the default sizes: more than they have would stall the draw.
    train, test = TASK_TYPES[task_name]
    assert usable_variations(task_name, "train") >= train and usable_variations(task_name, "eval") >= test
