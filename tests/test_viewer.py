"""`gymflow view` in a real browser: headless Chromium (system package) driven by Selenium over loopback.

The rollout folder is built with gymflow's own writers: expert maze episodes stored as an SFT and an AgentEvol
policy's evaluation (the SFT replies carry token ids of a tokenizer saved under data/models/sft, the evol1
ones ids only), an RL group of 4 samples with advantages, and small plots CSVs; a second viewer starts on an
empty folder, which then gets the evaluation's tables. A screenshot of each view is kept in the test's tmp dir
and copied to tests/output/screens/ (ignored by git).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from gymflow.cli import get_tasks
from gymflow.envs import make_env
from gymflow.models.tokenizer import train_tokenizer
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import Episode, RunInfo
from gymflow.serving import free_port, started
from tests.browser import (  # skips without Chromium or selenium
    EC,
    By,
    Select,
    WebDriverWait,
    chrome,
    keep_screens,
)

pytestmark = pytest.mark.slow  # `gymflow view` and Chromium

N_TASKS, K = 4, 4
BEFORE: dict[Path, int] = {}  # the data folder's files before the viewer started, and their mtimes


def tokenized(ep: Episode, tokenizer, logprob: float) -> Episode:
    """`ep` with each reply's token ids (as a sampler would store them) and a log-probability per token."""
    messages = []
    for m in ep.messages:
        if m.role == "assistant":
            ids = tokenizer(m.text, add_special_tokens=False)["input_ids"]
            m = dataclasses.replace(m, token_ids=ids, logprobs=[logprob * (i % 5) for i in range(len(ids))])
        messages.append(m)
    return dataclasses.replace(ep, messages=messages)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("viewer") / "data"
    env = make_env("maze")
    tasks = get_tasks(data, "maze", "eval", N_TASKS)
    solved = [run_expert(env, t) for t in tasks]
    tokenizer = train_tokenizer([m.text for ep in solved for m in ep.messages] * 3, 400)
    tokenizer.save_pretrained(data / "models" / "sft")  # the viewer decodes sft's ids with it
    rollouts = data / "rollouts"
    sft = [tokenized(ep, tokenizer, -0.4) for ep in solved]
    write_episodes(rollouts / "evaluate", "sft.maze", sft, RunInfo("main", "evaluate", 0, "sft"))
    # evol1 stops after one turn, so it fails every task; its ids have no tokenizer folder (shown as ids)
    cut = [tokenized(run_expert(env, t, max_turns=1), tokenizer, -1.0) for t in tasks]
    write_episodes(rollouts / "evaluate", "evol1.maze", cut, RunInfo("main", "evaluate", 1, "evol1"))
    # one RL group: K samples of the first task, two solved, each reply weighted with reward - mean
    group = [
        tokenized(run_expert(env, tasks[0], max_turns=None if k % 2 else 1), tokenizer, -0.2)
        for k in range(K)
    ]
    mean = sum(ep.reward for ep in group) / K
    for k, ep in enumerate(group):
        for m in ep.messages:
            if m.role == "assistant":
                m.advantage = ep.reward - mean
        group[k] = dataclasses.replace(ep, sample=k)
    write_episodes(rollouts / "rl", "loop.maze.1", group, RunInfo("main", "rl", 1, "loop@0"))
    plots = data / "plots"
    plots.mkdir(parents=True)
    (plots / "rl.csv").write_text("iteration,reward,success\n1,0.2,0.1\n2,0.4,0.3\n3,0.5,0.45\n")
    (plots / "evol.csv").write_text("iteration,policy,maze\n0,sft,0.3\n1,evol1,0.35\n")
    return data


@pytest.fixture(scope="module")
def url(data, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.getbasetemp() / "view.log"
    cmd = [sys.executable, "-m", "gymflow", "view", "--data", str(data), "--port", str(port)]
    BEFORE.update({p: p.stat().st_mtime_ns for p in data.rglob("*")})
    with started(cmd, f"http://127.0.0.1:{port}/health", log, timeout=120):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser():
    yield from chrome(1280, 900)


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> Path:
    yield from keep_screens(tmp_path_factory.mktemp("screens"))


def shoot(driver, folder: Path, name: str) -> None:
    """A screenshot of the whole page (at most 6000 px high): the viewport stretched to it through DevTools."""
    height = driver.execute_script("return Math.min(document.documentElement.scrollHeight, 6000)")
    metrics = {"width": 1280, "height": max(height, 600), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        assert driver.save_screenshot(str(folder / f"{name}.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def wait_for(driver, css: str):
    return WebDriverWait(driver, 20).until(EC.presence_of_element_located((By.CSS_SELECTOR, css)))


def count(driver) -> int:
    return int(driver.find_element(By.ID, "count").text)


def choose(driver, name: str, value: str) -> None:
    """Pick `value` in a filter (the form submits on change) and wait for the new page."""
    old = driver.find_element(By.ID, "episodes")
    Select(driver.find_element(By.ID, f"f-{name}")).select_by_value(value)
    WebDriverWait(driver, 20).until(EC.staleness_of(old))
    wait_for(driver, "#episodes")


def test_episode_list_filters_with_counts(browser, url, screens):
    browser.get(url + "/")
    wait_for(browser, "#episodes")
    assert count(browser) == 2 * N_TASKS + K
    options = [o.text for o in Select(browser.find_element(By.ID, "f-policy")).options]
    assert options == ["all", "evol1 (4)", "loop@0 (4)", "sft (4)"]
    shoot(browser, screens, "episodes")
    choose(browser, "stage", "evaluate")
    assert count(browser) == 2 * N_TASKS
    choose(browser, "success", "1")
    assert count(browser) == N_TASKS  # sft solves every task, evol1 none
    assert {
        r.find_elements(By.TAG_NAME, "td")[2].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    } == {"sft"}
    browser.find_element(By.ID, "clear").click()
    wait_for(browser, "#episodes")
    browser.find_element(By.ID, "f-min_reward").send_keys("0.5")
    browser.find_element(By.ID, "apply").click()
    WebDriverWait(browser, 20).until(EC.url_contains("min_reward=0.5"))
    assert count(browser) == N_TASKS + K // 2  # sft's and the group's solved samples
    shoot(browser, screens, "episodes_filtered")


def test_an_episode_reads_as_a_conversation_with_tokens_coloured_by_logprob(browser, url, screens, data):
    browser.get(url + "/?stage=evaluate&policy=sft")
    wait_for(browser, "#episodes")
    browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr a.open").click()
    wait_for(browser, "#episode-id")
    assert browser.find_element(By.ID, "end-reason").text.startswith("done")
    env = make_env("maze")
    assert env.spec.system_prompt.split("\n")[0] in browser.find_element(By.CSS_SELECTOR, ".turn.system").text
    first_reply = browser.find_element(By.CSS_SELECTOR, ".turn.assistant")
    tokens = first_reply.find_elements(By.CSS_SELECTOR, ".tok")
    assert len(tokens) > 3
    text = browser.execute_script(
        "return [...arguments[0].querySelectorAll('.tok')].map(t => t.textContent).join('')", first_reply
    )
    assert text.startswith("Thought:") and "\nAction:" in text  # decoded pieces, not ids
    colours = {t.value_of_css_property("background-color") for t in tokens}
    assert len(colours) > 1  # the log-probabilities differ, and so do the colours
    assert first_reply.find_element(By.CSS_SELECTOR, ".action code").text
    assert browser.find_elements(By.CSS_SELECTOR, ".turn.user")  # the observations
    shoot(browser, screens, "episode")


def test_the_same_task_side_by_side_for_two_policies(browser, url, screens):
    browser.get(url + "/?stage=evaluate&policy=sft")
    wait_for(browser, "#episodes")
    browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr a.open").click()
    wait_for(browser, "#episode-id")
    browser.find_element(By.XPATH, "//a[text()='side by side with evol1']").click()
    wait_for(browser, "#side-by-side")
    columns = browser.find_elements(By.CSS_SELECTOR, "#side-by-side .column")
    assert [c.get_attribute("data-policy") for c in columns] == ["sft", "evol1"]
    rewards = [float(c.find_element(By.CSS_SELECTOR, ".reward").text) for c in columns]
    assert rewards[0] > rewards[1]
    assert not columns[0].find_elements(By.CSS_SELECTOR, ".tokens.ids")  # sft's tokenizer is there
    ids = columns[1].find_element(By.CSS_SELECTOR, ".tokens.ids .tok").text
    assert ids.isdigit()  # evol1 has no model folder: its token ids as numbers
    shoot(browser, screens, "side_by_side")
    Select(browser.find_element(By.ID, "policy-b")).select_by_value("loop@0")
    WebDriverWait(browser, 20).until(EC.url_contains("b=loop%400"))
    policies = [
        c.get_attribute("data-policy")
        for c in browser.find_elements(By.CSS_SELECTOR, "#side-by-side .column")
    ]
    assert policies == ["sft", "loop@0"]


def test_an_rl_group_shows_its_samples_rewards_and_advantages(browser, url, screens):
    browser.get(url + "/?stage=rl")
    wait_for(browser, "#episodes")
    assert count(browser) == K
    browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr a.group").click()
    wait_for(browser, "#group")
    rows = browser.find_elements(By.CSS_SELECTOR, "#group tbody tr")
    assert len(rows) == K
    for row in rows:
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert float(cells[7]) == pytest.approx(float(cells[3]), abs=1e-3)  # advantage = reward - group mean
    assert {float(r.find_elements(By.TAG_NAME, "td")[2].text) > 0.5 for r in rows} == {True, False}
    badges = browser.find_elements(By.CSS_SELECTOR, ".badge.adv")
    assert badges and all(b.text.startswith("advantage") for b in badges)
    tok = browser.find_element(By.CSS_SELECTOR, ".tok")
    by_logprob = tok.value_of_css_property("background-color")
    Select(browser.find_element(By.ID, "colour-by")).select_by_value("adv")
    assert tok.value_of_css_property("background-color") != by_logprob  # recoloured by the reply's advantage
    shoot(browser, screens, "rl_group")


def test_charts_draw_success_per_env_and_policy_and_the_plots_curves(browser, url, screens):
    browser.get(url + "/charts")
    wait_for(browser, "#chart-success svg.main-svg")
    wait_for(browser, "#chart-rl svg.main-svg")
    wait_for(browser, "#chart-evol svg.main-svg")
    legend = browser.find_element(By.CSS_SELECTOR, "#chart-success").text
    assert "sft" in legend and "evol1" in legend and "loop@0" not in legend  # evaluate episodes only
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-success g.trace.bars")) == 2
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-rl g.trace.scatter")) == 2  # reward, success
    assert not browser.find_elements(By.ID, "chart-sft")  # no sft.csv in this folder
    shoot(browser, screens, "charts")


def rewards(driver) -> list[float]:
    return [
        float(r.find_elements(By.TAG_NAME, "td")[7].text)
        for r in driver.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    ]


def click_and_wait(driver, css: str) -> None:
    """Click a link of the episode list and wait for the new page."""
    old = driver.find_element(By.ID, "episodes")
    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 20).until(EC.staleness_of(old))
    wait_for(driver, "#episodes")


def test_a_column_header_sorts_the_list_one_way_then_the_other_keeping_the_filters(browser, url, screens):
    browser.get(url + "/?stage=rl")
    wait_for(browser, "#episodes")
    assert rewards(browser) != sorted(rewards(browser))  # the group's samples alternate: 1 solved, 1 not
    click_and_wait(browser, "#sort-reward")
    assert count(browser) == K and rewards(browser) == sorted(rewards(browser))
    assert browser.find_element(By.CSS_SELECTOR, "th.sorted").get_attribute("aria-sort") == "ascending"
    click_and_wait(browser, "#sort-reward")
    assert rewards(browser) == sorted(rewards(browser), reverse=True)
    assert browser.find_element(By.CSS_SELECTOR, "th.sorted").get_attribute("aria-sort") == "descending"
    shoot(browser, screens, "sorted")
    choose(browser, "success", "0")  # a filter keeps the sort, and the sort the filters
    assert count(browser) == K // 2 and "sort=reward&order=desc" in browser.current_url
    assert "stage=rl" in browser.current_url


def test_search_finds_the_turns_that_hold_the_text_and_no_others(browser, url, screens, data):
    from gymflow.store.db import connect

    db = connect(data)  # the first observation of one task: it names the task's goal and start
    task_id, text = db.execute(
        "select e.task_id, t.text from turns t join episodes e using (episode_id) "
        "where e.policy = 'sft' and t.turn = 1 order by e.task_id limit 1"
    ).fetchone()
    (episodes,) = db.execute("select count(*) from episodes where task_id = ?", [task_id]).fetchone()
    browser.get(url + "/")
    wait_for(browser, "#episodes")
    browser.find_element(By.ID, "q").send_keys(text.upper())  # any case
    browser.find_element(By.ID, "search-go").click()
    wait_for(browser, "#hits")
    hits = browser.find_elements(By.CSS_SELECTOR, "#hits tbody tr")
    assert int(browser.find_element(By.ID, "hit-count").text) == len(hits) == episodes
    assert episodes < 2 * N_TASKS + K  # the other tasks' observations are not listed
    for hit in hits:
        cells = hit.find_elements(By.TAG_NAME, "td")
        assert (cells[4].text, cells[6].text) == (task_id, "user")
        assert hit.find_element(By.TAG_NAME, "mark").text == text
    shoot(browser, screens, "search")
    Select(browser.find_element(By.ID, "role")).select_by_value("assistant")  # it is an observation
    browser.find_element(By.ID, "search-go").click()
    WebDriverWait(browser, 20).until(EC.url_contains("role=assistant"))
    assert browser.find_element(By.ID, "hit-count").text == "0"
    browser.back()  # a hit opens its episode
    wait_for(browser, "#hits")
    browser.find_element(By.CSS_SELECTOR, "#hits tbody tr a.open").click()
    wait_for(browser, "#episode-id")
    assert browser.find_element(By.ID, "episode-id").text.split("/")[-2] == task_id


def test_an_empty_folder_names_the_stage_that_fills_it_and_tables_written_later_are_seen(
    browser, data, tmp_path, screens
):
    empty = tmp_path / "data"
    empty.mkdir()
    port = free_port()
    cmd = [sys.executable, "-m", "gymflow", "view", "--data", str(empty), "--port", str(port)]
    with started(cmd, f"http://127.0.0.1:{port}/health", tmp_path / "view.log", timeout=120):
        browser.get(f"http://127.0.0.1:{port}/")
        wait_for(browser, "#episodes")
        assert count(browser) == 0
        assert browser.find_element(By.ID, "empty").text == (
            "no episodes yet: run `dvc repro trajectories` (expert episodes) or `dvc repro evaluate@sft`"
        )
        shoot(browser, screens, "empty")
        shutil.copytree(data / "rollouts" / "evaluate", empty / "rollouts" / "evaluate")  # as the stage would
        browser.refresh()
        wait_for(browser, "#episodes")
        assert count(browser) == 2 * N_TASKS and not browser.find_elements(By.ID, "empty")
        browser.get(f"http://127.0.0.1:{port}/?stage=rl")
        assert browser.find_element(By.ID, "empty").text == "no rl episodes yet: run `dvc repro rl`"
        browser.get(f"http://127.0.0.1:{port}/charts")
        wait_for(browser, "#chart-success svg.main-svg")  # the evaluate episodes, without a restart
        assert browser.find_element(By.ID, "no-plots").text.startswith(
            "no data/plots/*.csv yet: `dvc repro rl`"
        )


def test_bad_input_is_a_4xx_page_with_one_line(browser, url, screens):
    cases = {
        "/episode?id=main/none": 404,
        "/?iteration=two": 400,
        "/?success=yes": 400,
        "/?min_reward=inf": 400,
        "/?page=0": 400,
        "/compare?env=maze&task_id=nope&a=sft": 404,
        "/group?env=maze&task_id=x&iteration=": 400,
        "/nowhere": 404,
        "/?policy=x%27%20or%201=1%20--": 200,  # a value, never SQL: no episode has that policy
        "/?sort=reward%3B%20drop%20view%20episodes": 400,  # a sort key is a column's name from a fixed list
        "/?sort=reward&order=desc,%20episode_id": 400,
        "/search?q=" + "x" * 201: 400,
        "/search?q=x&role=admin": 400,
        "/search?q=%27%20or%201=1%20--": 200,  # a value: no turn holds it
    }
    for path, status in cases.items():
        assert requests.get(url + path, timeout=10).status_code == status, path
    browser.get(url + "/?policy=x%27%20or%201=1%20--")
    assert count(browser) == 0
    browser.get(url + "/search?q=%27%20or%201=1%20--")
    assert browser.find_element(By.ID, "hit-count").text == "0"
    browser.get(url + "/?sort=reward%3B%20drop%20view%20episodes")
    assert browser.find_element(By.ID, "error").text.startswith(
        "sort must be one of stage, iteration, policy"
    )
    browser.get(url + "/")
    assert count(browser) == 2 * N_TASKS + K  # still there
    browser.get(url + "/episode?id=main/none")
    assert (
        browser.find_element(By.ID, "error").text == "no episode 'main/none'; pick one from the episode list"
    )
    shoot(browser, screens, "error")


def test_the_viewer_wrote_nothing_after_every_page_above(data, url):
    assert BEFORE and {p: p.stat().st_mtime_ns for p in data.rglob("*")} == BEFORE


def test_a_missing_folder_or_a_busy_port_is_a_one_line_error(tmp_path, url):
    port = url.rsplit(":", 1)[1]  # the viewer above holds it
    for args, message in [
        (
            ["--data", str(tmp_path / "nope")],
            f"error: no data folder {tmp_path / 'nope'}: run the pipeline first",
        ),
        (["--data", str(tmp_path), "--port", port], f"error: cannot listen on 127.0.0.1:{port}:"),
    ]:
        out = subprocess.run(
            [sys.executable, "-m", "gymflow", "view", *args], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2 and out.stderr.startswith(message) and len(out.stderr.splitlines()) == 1, (
            out.stderr
        )


def test_a_damaged_page_is_a_page_naming_the_file_and_how_to_rebuild_it(data, tmp_path):
    """The viewer opens on footers only; the request that reads a damaged page gets check_table's one line."""
    from fastapi.testclient import TestClient

    from gymflow.store.db import connect
    from gymflow.viewer.app import create_app
    from tests.test_corrupt_data import flip_middle

    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    query = "select episode_id from episodes where policy = 'sft' limit 1"
    episode_id = connect(copy).execute(query).fetchone()[0]
    turns = copy / "rollouts/evaluate/sft.maze.turns.parquet"
    flip_middle(turns)
    client = TestClient(create_app(copy))
    assert client.get("/").status_code == 200  # the episode list reads only the episodes table
    episode = client.get("/episode", params={"id": episode_id})
    assert episode.status_code == 500
    assert f"{turns} is unreadable" in episode.text and "delete it and run `dvc repro" in episode.text
