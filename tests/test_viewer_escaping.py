"""The viewer's pages with hostile names in the data (a shared DVC remote's episodes or plots CSVs): nothing
they hold runs as script. Plain HTTP through the app, so it runs without the browser tests' Chromium."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from fastapi.testclient import TestClient

from gymflow.envs import make_env
from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.viewer.app import create_app

EVIL = "</script><script>window.pwned = 1</script><!--"
EVIL_ENV = "maze</SCRIPT ><script>alert('env')</script>&'\u2028"


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    data = tmp_path_factory.mktemp("viewer") / "data"
    task = build_splits(Maze, 0, 1, seed=0)["eval"][0]
    episode = run_expert(make_env("maze"), task)
    episode = dataclasses.replace(episode, task=dataclasses.replace(task, env=EVIL_ENV))
    write_episodes(data / "rollouts" / "evaluate", "evil", [episode], RunInfo("main", "evaluate", 0, EVIL))
    plots = data / "plots"
    plots.mkdir(parents=True)
    (plots / "rl.csv").write_text(f'iteration,"{EVIL}"\n1,0.5\n')
    (plots / "evol.csv").write_text(f'iteration,policy,maze\n0,"{EVIL}",0.3\n')
    return TestClient(create_app(data))


def scripts(html: str) -> list[str]:
    """The bodies of the page's inline scripts, as a browser's HTML parser delimits them."""
    return re.findall(r"<script>(.*?)</script", html, flags=re.DOTALL | re.IGNORECASE)


def constant(script: str, name: str) -> object:
    """The JSON value a script assigns to `const name`, as JavaScript would read it."""
    match = re.search(rf"const {name} = (.*?);\n", script)
    assert match, f"no const {name}"
    return json.loads(match.group(1))


def test_charts_keep_hostile_names_as_data(client):
    res = client.get("/charts")
    assert res.status_code == 200
    html = res.text
    assert len(scripts(html)) == 1, "a name opened a script of its own"
    assert html.lower().count("</script") == 2  # plotly's tag and the charts' own: no name closes one
    assert EVIL not in html
    script = scripts(html)[0]
    success = constant(script, "success")
    plots = constant(script, "plots")
    assert [(r["env"], r["policy"]) for r in success] == [(EVIL_ENV, EVIL)]
    by_name = {p["name"]: p for p in plots}
    assert list(by_name["rl"]["columns"]) == [EVIL]
    assert by_name["evol"]["labels"] == [EVIL]


def test_the_other_pages_escape_the_names_too(client):
    for path in ("/", "/?policy=" + EVIL, "/?sort=policy&order=desc", "/search?q=a", "/search?q=" + EVIL):
        html = client.get(path).text
        assert EVIL not in html
        assert not any("pwned" in s for s in scripts(html))
