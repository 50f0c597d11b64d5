"""The webnav environment (gymflow/envs/webnav.py): WebArena's three kinds of task checked as its evaluators
check them (an answer, a URL, the site's state with nothing else changed), every action and its errors, paging,
and an expert that plays through the pages with the protocol's actions alone."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.webnav import HOST, ME, PER_PAGE, TEMPLATES, Webnav, site

TASKS = list(itertools.islice(Webnav.generate("eval", 5), 200))


def by_template(name: str):
    return next(t for t in TASKS if t.hidden["template"] == name)


def ids(observation: str) -> dict[str, int]:
    """Element name -> id, as an agent reads them off the tree."""
    return {name: int(i) for i, name in re.findall(r"\[(\d+)\] \w+ '([^']*)'", observation)}


def play(env: Webnav, *actions: str):
    step = None
    for action in actions:
        step = env.step(action)
    return step


def test_every_template_and_level_is_drawn_the_same_way_and_the_expert_solves_50():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    again = list(itertools.islice(Webnav.generate("eval", 5), 200))
    assert [t.to_row() for t in again] == [t.to_row() for t in TASKS]
    env, solved = make_env("webnav"), 0
    for task in TASKS[:50]:
        assert env.reset(task).startswith(f"Objective: {task.instruction}\nURL: {HOST}/\n")
        while not env.done:
            thought, action = env.expert_step()
            assert re.fullmatch(r"(click|type|goto|stop) \[.*", action), action  # the protocol's actions only
            step = env.step(action)
        solved += step.reward == 1.0
    assert solved == 50


def test_an_answer_is_checked_without_case_or_extra_spaces():
    task = by_template("order_status")
    order = int(re.search(r"#(\d+)", task.instruction).group(1))
    status = site()["orders"][order]["status"]
    env = make_env("webnav")
    for answer, reward in ((status, 1.0), (f"  {status.upper()} ", 1.0), ("unknown", 0.0), ("", 0.0)):
        env.reset(task)
        assert env.step(f"stop [{answer}]").reward == reward


def test_a_navigation_task_is_checked_by_the_url_at_stop():
    task = by_template("goto_issues")
    name = task.instruction.split()[-1].rstrip(".")
    env = make_env("webnav")
    env.reset(task)
    assert env.step("stop [done]").reward == 0.0  # the home page
    env.reset(task)
    play(env, f"goto [{HOST}/git/{name}/issues]")
    assert env.step("stop [done]").reward == 1.0
    env.reset(task)
    play(env, f"goto [/git/{name}]")
    assert env.step("stop [done]").reward == 0.0  # the repository, not its issues


def test_a_change_is_checked_on_the_whole_site_the_asked_change_and_nothing_else():
    task = by_template("set_price")
    sku, price = task.hidden["goal"]["change"][1:]
    other = next(s for s in sorted(site()["products"]) if s != sku)
    env = make_env("webnav")
    cases = [
        ([f"goto [/shop/products/{sku}]", f"type [3] [{price}] [1]"], 1.0),
        ([f"goto [/shop/products/{sku}]", f"type [3] [${price}] [1]"], 1.0),  # a dollar sign is read past
        ([f"goto [/shop/products/{sku}]", "type [3] [1.00] [1]"], 0.0),  # another price
        ([f"goto [/shop/products/{sku}]", f"type [3] [{price}] [0]"], 0.0),  # typed, never submitted
        ([f"goto [/shop/products/{sku}]", f"type [3] [{price}] [1]", f"goto [/shop/products/{other}]",
          "type [3] [9.99] [1]"], 0.0),  # the change, and another one
    ]  # fmt: skip
    for actions, reward in cases:
        env.reset(task)
        page = env.step(actions[0]).observation
        assert ids(page)[next(n for n in ids(page) if n.startswith("Price"))] == 3
        play(env, *actions[1:])
        assert env.step("stop [done]").reward == reward, actions


def test_forms_reply_open_issues_and_star_as_the_site_shows_them():
    env = make_env("webnav")
    env.reset(by_template("reply"))
    tid = env.task.hidden["goal"]["change"][1]
    page = env.step(f"goto [/forum/t/{tid}]").observation
    box, post = ids(page)["Reply"], ids(page)["Post"]
    assert "The form is empty" in env.step(f"click [{post}]").observation
    assert "value: 'hi there'" in env.step(f"type [{box}] [hi there] [0]").observation
    after = env.step(f"click [{post}]").observation
    assert after.startswith("Saved.") and f"article '{ME}: hi there'" in after
    assert env.state["threads"][tid]["posts"][-1] == (ME, "hi there")

    name = sorted(site()["repos"])[0]
    page = env.step(f"goto [/git/{name}]").observation
    stars = site()["repos"][name]["stars"]
    page = env.step(f"click [{ids(page)['Star']}]").observation
    assert f"Stars: {stars + 1}" in page and "button 'Unstar'" in page
    page = env.step(f"click [{ids(page)['Unstar']}]").observation
    assert f"Stars: {stars}" in page
    page = env.step(f"goto [/git/{name}/issues]").observation
    env.step(f"type [{ids(page)['New issue title']}] [broken build] [1]")
    assert env.state["repos"][name]["issues"][-1] == {"title": "broken build", "state": "open", "author": ME}
    assert site()["repos"][name]["issues"][-1]["author"] != ME  # the episode's copy changed, not the site


def test_lists_page_ten_items_and_back_and_forward_retrace_the_visits():
    env = make_env("webnav")
    env.reset(TASKS[0])
    first = env.step("goto [/shop/orders]").observation
    assert first.count("link 'Order #") == PER_PAGE and "Page 1 of 10" in first
    assert "Previous page" not in first
    second = env.step(f"click [{ids(first)['Next page']}]").observation
    assert f"URL: {HOST}/shop/orders?page=2" in second and "Page 2 of 10" in second
    assert env.step("goto [/shop/orders?page=99]").observation.count("Page 10 of 10") == 1  # the last page
    assert f"URL: {HOST}/shop/orders?page=2\n" in env.step("go_back").observation
    assert f"URL: {HOST}/shop/orders\n" in env.step("go_back").observation
    assert f"URL: {HOST}/shop/orders?page=2\n" in env.step("go_forward").observation
    kitchen = env.step("goto [/shop/products?category=kitchen]").observation
    assert kitchen.count("| kitchen |") == 8 and "| garden |" not in kitchen


@pytest.mark.parametrize(
    "action, says",
    [
        ("fly [3]", 'No action "fly"'),
        ("click", "click needs an element id"),
        ("click [x]", "click needs an element id"),
        ("click [99]", "There is no element [99]"),
        ("type [1] [hello]", "type needs a textbox's id and the text"),
        ("type [1]", "type needs a textbox's id and the text"),
        ("scroll", "scroll takes a direction"),
        ("scroll [left]", "scroll takes a direction"),
        ("goto [https://example.com]", f"Only {HOST} can be reached"),
        ("goto [/nowhere]", "404: no page at /nowhere"),
        ("goto", "goto takes one URL"),
        ("go_back", "There is no page to go back to"),
        ("go_forward", "There is no page to go forward to"),
        ("][", "Invalid action"),
    ],
)
def test_every_actions_mistake_is_an_observation_and_play_goes_on(action: str, says: str):
    env = make_env("webnav")
    env.reset(TASKS[0])
    step = env.step(action)
    assert says in step.observation and not step.done and step.reward == 0.0
    assert f"URL: {HOST}/\n" in step.observation  # still on the home page, shown again


def test_a_bad_price_and_a_textbox_clicked():
    env = make_env("webnav")
    env.reset(TASKS[0])
    sku = sorted(site()["products"])[0]
    page = env.step(f"goto [/shop/products/{sku}]").observation
    box = ids(page)[next(n for n in ids(page) if n.startswith("Price"))]
    assert "is not a price" in env.step(f"type [{box}] [cheap] [1]").observation
    assert "between 0 and 100000" in env.step(f"type [{box}] [-3] [1]").observation
    assert "has the focus" in env.step(f"click [{box}]").observation
    assert env.state["products"][sku]["price"] == site()["products"][sku]["price"]


def test_a_row_the_template_does_not_make_is_refused():
    env = make_env("webnav")
    task = by_template("order_status")
    for hidden in (
        {**task.hidden, "goal": {"answer": "anything"}},
        {**task.hidden, "route": [["Home", "/"]]},
        {**task.hidden, "choices": task.hidden["choices"] + 1},
    ):
        with pytest.raises(BadTask, match="not what the template makes"):
            env.reset(replace(task, hidden=hidden))
    with pytest.raises(BadTask, match="template"):
        Webnav.check_task(replace(task, hidden={**task.hidden, "template": "hack"}))
    with pytest.raises(BadTask, match="goal"):
        Webnav.check_task(replace(task, hidden={**task.hidden, "goal": {"answer": "a", "url": "/"}}))


def test_served_over_http_an_episode_is_the_one_played_in_process():
    from fastapi.testclient import TestClient

    from gymflow.remote.env_server import create_app

    tasks = TASKS[:3]
    client = TestClient(create_app("webnav", tasks))
    sid = client.post("/create").json()["id"]
    local = make_env("webnav")
    reset = client.post("/reset", json={"id": sid, "data_idx": 2}).json()
    assert reset["observation"] == local.reset(tasks[2])
    while not local.done:
        action = local.expert_step()[1]
        out = client.post("/step", json={"id": sid, "action": action}).json()
        step = local.step(action)
        assert (out["observation"], out["reward"], out["done"]) == (step.observation, step.reward, step.done)
    assert out["reward"] == 1.0
