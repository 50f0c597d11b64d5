"""TextCraft's own rules: the recipe book, the crafting arithmetic, the messages and the expert."""

from collections import Counter

import pytest

from gymflow.envs.textcraft import (
    COMMAND_LINES,
    DEPTHS,
    TextCraft,
    cookbook,
    make_task,
    match_recipe,
    plan,
)


@pytest.fixture()
def env():
    env = TextCraft()
    env.reset(make_task("golden shovel"))
    return env


def test_recipe_book_is_well_founded():
    book = cookbook()
    assert book.is_base("gold ingot") and book.is_base("oak log")  # ingots are smelted, not crafted
    assert "gold ingot" not in book.recipes  # neither unpacked from gold block nor packed from nuggets
    assert book.chosen("gold block").command() == "craft 1 gold block using 9 gold ingot"
    assert book.chosen("stick").command() == "craft 4 stick using 2 oak planks"
    assert book.chosen("gold nugget").command() == "craft 9 gold nugget using 1 gold ingot"
    assert [book.depth(i) for i in ("oak log", "oak planks", "stick", "golden shovel")] == [0, 1, 2, 3]
    per_depth = Counter(str(book.depth(g)) for g in TextCraft.goals())
    assert set(per_depth) == set(DEPTHS) and min(per_depth.values()) >= 30, per_depth


def test_task_lists_needed_commands_and_distractors():
    task = make_task("golden shovel")
    lines = task.instruction.splitlines()
    assert lines[0] == "Crafting commands:" and lines[-1] == "Goal: craft golden shovel."
    commands = lines[1:-1]
    assert len(commands) == COMMAND_LINES and len(set(commands)) == len(commands)
    needed = task.hidden["recipes"]
    assert set(needed) <= set(commands)
    assert "craft 1 golden shovel using 1 gold ingot, 2 stick" in needed
    assert task.difficulty == "3" and task.task_id == "textcraft-golden_shovel"
    assert (
        make_task("golden shovel", split="eval").instruction == task.instruction
    )  # depends on the goal only


def test_get_craft_and_goal_reward(env):
    assert env.step("get 1 oak log").observation == "Got 1 oak log"
    assert env.step("craft 4 oak planks using 1 oak log").observation == "Crafted 4 oak planks"
    assert env.step("craft 4 stick using 2 oak planks").observation == "Crafted 4 stick"
    assert env.step("get 1 gold ingot").observation == "Got 1 gold ingot"
    assert env.step("inventory").observation == "Inventory: [oak planks] (2) [stick] (4) [gold ingot] (1)"
    step = env.step("craft 1 golden shovel using 2 stick, 1 gold ingot")  # ingredient order is free
    assert step.reward == 1.0 and step.done and step.observation.startswith("Crafted 1 golden shovel")


def test_counts_are_whole_multiples_of_a_recipe(env):
    env.step("get 2 oak log")
    assert env.step("craft 8 oak planks using 2 oak log").observation == "Crafted 8 oak planks"
    assert env.step("craft 8 stick using 4 oak planks").observation == "Crafted 8 stick"
    step = env.step("craft 4 stick using 3 oak planks")
    assert step.observation.startswith("Wrong counts for stick: use craft 4 stick using 2 oak planks")
    # the written result count is ignored, as in TextCraft: the ingredients decide what is made
    assert env.step("craft 1 stick using 2 oak planks").observation == "Crafted 4 stick"
    assert env.inventory == {"oak planks": 2, "stick": 12}


def test_other_wood_variants_are_valid_recipes(env):
    env.step("get 1 birch log")
    env.step("craft 4 birch planks using 1 birch log")
    assert env.step("craft 4 stick using 2 birch planks").observation == "Crafted 4 stick"


def test_invalid_actions_say_what_is_wrong(env):
    assert env.step("get 2 stick").observation == "Could not find stick: it is crafted, not gathered"
    assert env.step("get 1 unobtainium").observation == "Could not find unobtainium"
    assert env.step("get oak log").observation == "Say how many: get 1 oak log"
    step = env.step("craft 1 golden shovel using 1 gold ingot, 2 stick")
    assert step.observation.startswith(
        "Could not find enough items to craft golden shovel: need 1 gold ingot"
    )
    assert step.reward == 0.0 and not step.done and env.inventory == {}
    assert "using those ingredients" in env.step("craft 4 stick using 2 cobblestone").observation
    assert "base item" in env.step("craft 1 oak log using 1 oak planks").observation
    assert env.step("craft 4 stick using oak planks").observation.startswith("Wrong item format: oak planks")
    assert env.step("jump").observation.startswith("Could not execute jump")


def test_names_are_forgiving(env):
    assert env.step("get 2 minecraft:oak_log").observation == "Got 2 oak log"
    assert env.step("get 1 Oak Logs").observation == "Got 1 oak log"
    assert env.inventory == {"oak log": 3}


def test_match_recipe_needs_one_multiple_for_all_ingredients():
    recipes = cookbook().recipes["golden shovel"]
    assert match_recipe(recipes, {"gold ingot": 2, "stick": 4})[1] == 2
    assert match_recipe(recipes, {"gold ingot": 2, "stick": 2}) is None
    assert match_recipe(recipes, {"gold ingot": 0, "stick": 0}) is None
    assert match_recipe(recipes, {"gold ingot": 1}) is None


def run_expert(env, max_turns):
    step = None
    for _ in range(max_turns):
        thought, action = env.expert_step()
        assert thought.strip()
        step = env.step(action)
        if step.done:
            break
    return step


def test_expert_replays_the_stored_plan():
    task = make_task("purple banner")
    env = TextCraft()
    env.reset(task)
    actions = []
    while not env.done:
        actions.append(env.expert_step()[1])
        env.step(actions[-1])
    assert actions == task.hidden["plan"] == plan(cookbook(), "purple banner")
    assert env.reward == 1.0


def test_expert_replans_from_the_current_inventory(env):
    env.step("get 1 birch log")
    env.step("craft 4 birch planks using 1 birch log")
    env.step("craft 8 stick using 4 birch planks")  # sticks made another way: no oak needed any more
    thought, action = env.expert_step()
    assert action == "get 1 gold ingot" and "base item" in thought
    env.step(action)
    assert env.expert_step()[1] == "craft 1 golden shovel using 1 gold ingot, 2 stick"


def test_expert_solves_every_goal_within_the_turn_limit():
    env = TextCraft()
    turns = Counter()
    for goal in TextCraft.goals():
        task = make_task(goal)
        env.reset(task)
        step = run_expert(env, env.spec.max_turns)
        assert step is not None and step.reward == 1.0, goal
        turns[task.difficulty] = max(turns[task.difficulty], env.turns)
    assert max(turns.values()) <= env.spec.max_turns
