"""The webshop environment (gymflow/envs/webshop.py): WebShop's reward worked by hand, its pages and clicks, a
real index that finds the instruction's product, and malformed clicks as observations."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.webshop import PER_PAGE, WebShop, catalogue, reward, search

TASKS = list(itertools.islice(WebShop.generate("eval", 9), 120))


def test_every_level_is_drawn_and_the_expert_buys_50_right_through_the_pages():
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    env, solved = make_env("webshop"), 0
    for task in TASKS[:50]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 50
    assert any(t.seed >= PER_PAGE for t in TASKS[:50])  # some targets are past the first page


def test_webshops_reward_by_hand():
    """Goal: 2 attributes, 1 option, a price limit; bought: 1 attribute, the option, within the price, the same
    type: (1 + 1 + 1) / (2 + 1 + 1) = 0.75; of another type of the department, half that; of another, a tenth."""
    item = next(
        p
        for p in catalogue().values()
        if p["type"] == "t-shirt" and "cotton" in p["attributes"] and "hooded" not in p["attributes"]
    )
    color = item["options"]["color"][0]
    goal = {
        "attributes": ["cotton", "hooded"],
        "options": {"color": color},
        "price": item["price"] + 1,
        "type": "t-shirt",
    }
    assert reward(goal, item, {"color": color}) == 0.75
    assert reward({**goal, "type": "rain jacket"}, item, {"color": color}) == 0.375
    assert reward({**goal, "type": "shampoo"}, item, {"color": color}) == 0.075
    assert reward({**goal, "price": item["price"] - 1}, item, {}) == 0.25  # one attribute of four points


def test_the_index_finds_the_instructions_product():
    for task in TASKS[:30]:
        hidden = task.hidden
        found = search(" ".join([*hidden["attributes"], hidden["type"]]))
        assert hidden["target"] in found and all(catalogue()[a]["type"] == hidden["type"] for a in found[:3])


def test_pages_and_clicks():
    env = make_env("webshop")
    task = TASKS[0]
    env.reset(task)
    assert "no search bar" not in env.step("click[Next >]").observation  # not clickable on the search page
    results = env.step(f"search[{task.hidden['type']}]").observation
    assert "Page 1 (Total results: 50)" in results and "Next >" in results and "< Prev" not in results
    assert "There is no search bar" in env.step("search[anything]").observation
    page2 = env.step("click[next >]").observation  # case does not matter
    assert "Page 2" in page2 and "< Prev" in page2
    first = env.results[PER_PAGE]
    item = env.step(f"click[{first}]").observation
    assert "Buy Now" in item and catalogue()[first]["title"] in item
    assert catalogue()[first]["description"] in env.step("click[Description]").observation
    assert "Buy Now" in env.step("click[< Prev]").observation  # back from the description to the item
    assert "Page 2" in env.step("click[< Prev]").observation  # and from the item to its results page
    assert "is not clickable" in env.step("click[Free Shipping]").observation
    assert "Invalid action" in env.step("buy it").observation


def test_a_row_from_outside_is_checked():
    task = TASKS[0]
    for field, value in (("target", "B0NOTREAL1"), ("type", "spaceship")):
        with pytest.raises(BadTask, match=f"hidden.{field}"):
            WebShop.check_task(replace(task, hidden={**task.hidden, field: value}))
    with pytest.raises(BadTask, match="option kinds"):
        make_env("webshop").reset(replace(task, hidden={**task.hidden, "options": {"flavor": "mint"}}))
