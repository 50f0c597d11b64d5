"""The viewer's episode list, turn search and empty pages over plain HTTP (no browser): tables written after it
started are seen, columns sort, turns are searched, an empty page names the stage that fills it, and hostile
sort keys or searches get a 4xx page and change nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gymflow.envs.base import Task
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.records import Episode, Message, RunInfo
from gymflow.viewer.app import HITS, SORTS, create_app

INFO = RunInfo("main", "evaluate", 0, "sft")


def episode(task_id: str, reward: float, reply: str, difficulty: str = "easy") -> Episode:
    """An episode of one exchange: the reply's text is what a search looks for."""
    task = Task("maze", task_id, "eval", difficulty, 0, f"solve {task_id}")
    messages = [
        Message("system", "you are in a maze"),
        Message("user", f"observation of {task_id}"),
        Message("assistant", reply, action="go north"),
    ]
    return Episode(task, messages, reward, reward >= 1.0, 1, 10, "done")


# known rows: each column sorts them differently from the default (task id) order
KNOWN = [
    episode("t1", 0.5, "Thought: the door is NORTH.", "hard"),
    episode("t2", 1.0, "Thought: a red key lies east.", "easy"),
    episode("t3", 0.0, "Thought: nothing here.", "medium"),
]


def ids(html: str) -> list[str]:
    """The task ids of the episode list's rows, in order."""
    body = html.split('<table id="episodes">', 1)[1]
    return re.findall(r"<td>(t\d+)</td>", body)


def count(html: str) -> int:
    return int(re.search(r'<b id="count">(\d+)</b>', html)[1])


@pytest.fixture
def data(tmp_path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    return data


@pytest.fixture
def known(data) -> TestClient:
    write_episodes(data / "rollouts" / "evaluate", "sft.maze", KNOWN, INFO)
    return TestClient(create_app(data))


def test_tables_written_replaced_or_removed_after_start_are_seen(data):
    client = TestClient(create_app(data))  # an empty folder, as before the first stage ran
    assert count(client.get("/").text) == 0
    folder = data / "rollouts" / "evaluate"
    write_episodes(folder, "sft.maze", KNOWN, INFO)
    assert count(client.get("/").text) == 3
    write_episodes(folder, "rl.maze", KNOWN[:1], RunInfo("main", "rl", 1, "grpo@0"))
    assert count(client.get("/").text) == 4
    assert "grpo@0 (1)" in client.get("/").text  # in the facets too
    write_episodes(folder, "sft.maze", [episode("t4", 0.2, "Thought: a fresh reply.")], INFO)  # a rerun
    assert count(client.get("/").text) == 2
    assert '<b id="hit-count">1</b>' in client.get("/search", params={"q": "fresh reply"}).text
    assert '<b id="hit-count">0</b>' in client.get("/search", params={"q": "red key"}).text
    for f in folder.glob("rl.maze.*.parquet"):
        f.unlink()
    assert count(client.get("/").text) == 1


def test_a_damaged_file_written_after_start_is_a_page_naming_it_until_it_goes(known, data):
    bad = data / "rollouts" / "evaluate" / "half.maze.episodes.parquet"
    bad.write_bytes(b"PAR1 not a table")
    res = known.get("/")
    assert res.status_code == 500 and f"{bad} is unreadable" in res.text
    bad.unlink()
    assert count(known.get("/").text) == 3


def test_episodes_sort_by_any_column_both_ways(known):
    assert ids(known.get("/").text) == ["t1", "t2", "t3"]
    expected = {"reward": ["t3", "t1", "t2"], "difficulty": ["t2", "t1", "t3"], "success": ["t1", "t3", "t2"]}
    for column, order in expected.items():
        assert ids(known.get("/", params={"sort": column}).text) == order, column
        descending = ids(known.get("/", params={"sort": column, "order": "desc"}).text)
        if column == "success":  # two ties, kept in the default order
            assert descending == ["t2", "t1", "t3"]
        else:
            assert descending == order[::-1], column
    for column in SORTS:
        assert known.get("/", params={"sort": column, "order": "desc"}).status_code == 200, column


def test_sorting_keeps_the_filters_and_the_headers_link_the_other_way(known):
    html = known.get("/", params={"sort": "reward", "order": "desc", "min_reward": "0.2"}).text
    assert ids(html) == ["t2", "t1"]
    assert 'id="sort-reward" href="/?min_reward=0.2&amp;sort=reward&amp;order=asc"' in html
    assert 'id="sort-turns" href="/?min_reward=0.2&amp;sort=turns&amp;order=asc"' in html
    assert '<input type="hidden" name="sort" value="reward">' in html  # the filter form keeps the sort


def test_search_finds_the_turns_that_hold_the_text_and_no_others(known):
    html = known.get("/search", params={"q": "red KEY"}).text
    assert '<b id="hit-count">1</b>' in html
    assert "<mark>red key</mark> lies east." in html and "t2" in html
    assert "t1" not in html and "t3" not in html
    both = known.get("/search", params={"q": "thought:"}).text
    assert '<b id="hit-count">3</b>' in both
    users = known.get("/search", params={"q": "OF T", "role": "user"}).text
    assert (
        '<b id="hit-count">3</b>' in users
        and "observation <mark>of t</mark>1" in users
        and "Thought" not in users
    )
    # the list's filters apply
    hard = known.get("/search", params={"q": "thought", "difficulty": "hard"}).text
    assert '<b id="hit-count">1</b>' in hard and "NORTH" in hard
    none = known.get("/search", params={"q": "no such words"}).text
    assert '<b id="hit-count">0</b>' in none


def test_search_lists_at_most_hits_turns(data):
    many = [episode(f"t{i}", 0.0, "the same reply") for i in range(HITS + 5)]
    write_episodes(data / "rollouts" / "evaluate", "sft.maze", many, INFO)
    html = TestClient(create_app(data)).get("/search", params={"q": "same"}).text
    assert f'<b id="hit-count">{HITS}</b>' in html and f"the first {HITS}" in html
    assert html.count("<mark>") == HITS


def test_an_empty_page_names_the_stage_that_fills_it(data):
    client = TestClient(create_app(data))
    hint = "no episodes yet: run `dvc repro trajectories` (expert episodes) or `dvc repro evaluate@sft`"
    assert hint in client.get("/").text
    assert "no turns yet: run `dvc repro trajectories`" in client.get("/search", params={"q": "x"}).text
    charts = client.get("/charts").text
    assert "no evaluate episodes yet: run `dvc repro evaluate@sft`" in charts
    assert "`dvc repro rl` writes rl.csv" in charts and "`dvc repro plot_evol` writes evol.csv" in charts
    write_episodes(data / "rollouts" / "evaluate", "sft.maze", KNOWN, INFO)
    html = client.get("/", params={"stage": "rl"}).text
    assert "no rl episodes yet: run `dvc repro rl`" in html
    assert "no episode matches these filters" in client.get("/", params={"min_reward": "2"}).text
    assert 'id="empty"' not in client.get("/").text


HOSTILE = [
    ("/", {"sort": "reward; drop view episodes"}, "sort must be one of"),
    ("/", {"sort": "(select 1)"}, "sort must be one of"),
    ("/", {"sort": "reward", "order": "desc, episode_id"}, "order must be asc or desc"),
    ("/", {"order": "sideways"}, "order must be asc or desc"),
    ("/search", {"q": "x" * 201}, "q must be at most 200 characters"),
    ("/search", {"q": "x", "role": "user' or 1=1 --"}, "role must be one of"),
    ("/search", {"q": "x", "iteration": "1 or 1=1"}, "iteration must be a whole number"),
]


@pytest.mark.parametrize(("path", "params", "message"), HOSTILE)
def test_a_hostile_sort_or_search_is_a_4xx_page(known, path, params, message):
    res = known.get(path, params=params)
    assert res.status_code == 400 and message in res.text
    assert "<script" not in res.text.split("<main>", 1)[1]  # the value is escaped
    assert count(known.get("/").text) == 3  # and nothing changed


def test_a_search_is_a_value_never_sql(known):
    for q in ("' or 1=1 --", "%", "_", "') union select 1 --", "\\", "<script>alert(1)</script>"):
        res = known.get("/search", params={"q": q})
        assert res.status_code == 200, q
        assert '<b id="hit-count">0</b>' in res.text, q  # no turn holds these, and no pattern matches all
    html = known.get("/search", params={"q": "<script>alert(1)</script>"}).text
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
