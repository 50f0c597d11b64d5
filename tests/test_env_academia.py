"""The academia environment (gymflow/envs/academia.py): networks loaded before they are read, answers found
through node and edge checks, and unknown nodes as observations."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.academia import TEMPLATES, Academia, literature
from gymflow.envs.base import BadTask

TASKS = list(itertools.islice(Academia.generate("eval", 4), 150))


def do(env, tool: str, **args) -> str:
    return env.step(f"{tool} with Action Input: {json.dumps(args)}").observation


def test_every_template_is_drawn_and_the_expert_solves_50_through_the_tools():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    env, solved = make_env("academia"), 0
    for task in TASKS[:50]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 50


def test_a_network_is_read_only_once_loaded():
    env = make_env("academia")
    env.reset(TASKS[0])
    title = sorted(literature()["papers"])[0]
    assert "load the paper network first" in do(env, "paperNodeCheck", node=title)
    do(env, "loadPaperNet")
    assert (
        json.loads(do(env, "paperNodeCheck", node=title))["venue"] == literature()["papers"][title]["venue"]
    )
    name = sorted(literature()["authors"])[0]
    assert "load the author network first" in do(env, "authorNodeCheck", node=name)


def test_citations_only_point_back_in_time_and_the_edge_check_agrees():
    papers = literature()["papers"]
    assert all(papers[c]["year"] < p["year"] for p in papers.values() for c in p["cites"])
    env = make_env("academia")
    env.reset(TASKS[0])
    do(env, "loadPaperNet")
    citing = next(p for p in papers.values() if p["cites"])
    assert json.loads(do(env, "paperEdgeCheck", node1=citing["title"], node2=citing["cites"][0])) == {
        "cites": True
    }
    assert json.loads(do(env, "paperEdgeCheck", node1=citing["cites"][0], node2=citing["title"])) == {}


def test_coauthors_are_the_authors_of_shared_papers():
    env = make_env("academia")
    env.reset(TASKS[0])
    do(env, "loadAuthorNet")
    name = next(
        n
        for n in sorted(literature()["authors"])
        if len(literature()["authors"])
        and any(n in p["authors"] and len(p["authors"]) > 1 for p in literature()["papers"].values())
    )
    others = json.loads(do(env, "neighbourCheck", graph="AuthorNet", node=name))["neighbors"]
    for other in others:
        papers = json.loads(do(env, "authorEdgeCheck", node1=name, node2=other))["papers"]
        assert papers and all(name in literature()["papers"][p["title"]]["authors"] for p in papers)


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("neighbourCheck", {"graph": "SocialNet", "node": "x"}, "PaperNet"),
        ("paperNodeCheck", {"node": "A Paper Nobody Wrote"}, "no paper titled"),
        ("authorNodeCheck", {"node": "Nobody"}, "no author named"),
    ],
)
def test_unknown_nodes_and_graphs_are_observations(tool, args, says):
    env = make_env("academia")
    env.reset(TASKS[0])
    do(env, "loadPaperNet")
    do(env, "loadAuthorNet")
    step = env.step(f"{tool} with Action Input: {json.dumps(args)}")
    assert says in step.observation and not step.done


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = TASKS[0]
    with pytest.raises(BadTask, match="not what the template makes"):
        make_env("academia").reset(replace(task, hidden={**task.hidden, "answer": "Nowhere"}))
