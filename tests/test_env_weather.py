"""The weather environment (gymflow/envs/weather.py) and what tool environments share (gymflow/envs/tools.py):
AgentGym's action format, AgentBoard's progress rate, the world's rules (history before today, forecasts after,
stations within 50 km), and malformed calls answered as observations. The protocol's general properties are
tests/test_env_conformance.py's."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import date, timedelta

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.tools import same_answer
from gymflow.envs.weather import TEMPLATES, Weather, cities, day_weather, distance_km

TASKS = list(itertools.islice(Weather.generate("eval", 3), 80))


def call(env, tool: str, **args) -> str:
    return env.step(f"{tool} with Action Input: {json.dumps(args)}").observation


def _task(template: str):
    return next(t for t in TASKS if t.hidden["template"] == template)


def test_every_template_and_level_is_drawn_and_the_expert_solves_50_through_the_tools():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    env, solved = make_env("weather"), 0
    for task in TASKS[:50]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 50


def test_progress_rate_counts_the_subgoals_met_and_a_right_finish_is_one():
    """yesterday_mean's five subgoals (the city, today's date, its latitude and longitude, the answer) and a right
    finish: six."""
    env = make_env("weather")
    task = _task("yesterday_mean")
    hidden = task.hidden
    env.reset(task)
    assert env.step("get_user_current_location with Action Input: {}").reward == pytest.approx(1 / 6)
    assert env.step("get_user_current_date with Action Input: {}").reward == pytest.approx(2 / 6)
    call(env, "get_latitude_longitude", name=hidden["current_location"])
    again = env.step("get_user_current_date with Action Input: {}")  # a subgoal met twice counts once
    assert again.reward == pytest.approx(4 / 6)
    day = (date.fromisoformat(hidden["current_date"]) - timedelta(days=1)).isoformat()
    place = cities()[hidden["current_location"]]
    at = {"latitude": place["latitude"], "longitude": place["longitude"], "start_date": day, "end_date": day}
    assert env.step(f"get_historical_temp with Action Input: {json.dumps(at)}").reward == pytest.approx(5 / 6)
    wrong = env.step('finish with Action Input: {"answer": -999}')  # every value seen, a wrong answer given
    assert wrong.done and wrong.reward == pytest.approx(5 / 6) and not Weather.spec.is_success(wrong.reward)
    env.reset(task)
    assert env.step(f"finish with Action Input: {json.dumps({'answer': hidden['answer']})}").reward == 1.0


def test_yesterdays_mean_is_the_historical_tools_number():
    env = make_env("weather")
    task = _task("yesterday_mean")
    env.reset(task)
    home, today = task.hidden["current_location"], date.fromisoformat(task.hidden["current_date"])
    place = cities()[home]
    day = (today - timedelta(days=1)).isoformat()
    out = json.loads(
        call(
            env,
            "get_historical_temp",
            latitude=place["latitude"] + 0.1,
            longitude=place["longitude"],
            start_date=day,
            end_date=day,
        )
    )
    assert out["daily"]["time"] == [day]
    assert (
        out["daily"]["temperature_2m_mean"]
        == [task.hidden["answer"]]
        == [day_weather(home, today - timedelta(days=1))["temperature_2m_mean"]]
    )
    assert out["daily"]["temperature_2m_min"][0] < out["daily"]["temperature_2m_mean"][0]


def test_the_tools_keep_history_forecast_and_today_apart():
    env = make_env("weather")
    task = _task("tomorrow_mean")
    env.reset(task)
    place = cities()[task.hidden["current_location"]]
    at = {"latitude": place["latitude"], "longitude": place["longitude"]}
    today = date.fromisoformat(task.hidden["current_date"])
    iso = today.isoformat()
    assert "ends the day before today" in call(env, "get_historical_rain", **at, start_date=iso, end_date=iso)
    far = (today + timedelta(days=20)).isoformat()
    assert "forecasts cover today" in call(env, "get_temp_forecast", **at, start_date=far, end_date=far)
    before = (today - timedelta(days=3)).isoformat()
    assert "today" in call(env, "get_current_temp", **at, current_date=before)
    assert "1 to 31 days" in call(
        env, "get_historical_temp", **at, start_date="2022-01-01", end_date="2022-03-01"
    )
    assert "not a date" in call(env, "get_historical_temp", **at, start_date="soon", end_date="later")
    assert "no data for" in call(
        env, "get_historical_temp", **at, start_date="1999-01-01", end_date="1999-01-01"
    )
    assert "no weather station within 50 km" in call(env, "get_elevation", latitude=-89.0, longitude=0.0)
    assert json.loads(call(env, "get_current_temp", **at, current_date=iso))["daily"]["time"] == [iso]


def test_a_lookup_lists_a_namesake_after_the_city():
    name = next(n for n, c in cities().items() if c["namesake"])
    env = make_env("weather")
    env.reset(TASKS[0])
    results = json.loads(call(env, "get_latitude_longitude", name=name.upper()))["results"]
    assert [r["name"] for r in results] == [name, name]
    assert results[0]["latitude"] == cities()[name]["latitude"] != results[1]["latitude"]
    assert "no location named" in call(env, "get_latitude_longitude", name="Atlantis")


def test_distance_is_the_haversine_by_hand():
    """London (51.5074, -0.1278) to Paris (48.8566, 2.3522) is about 343.6 km."""
    assert distance_km(51.5074, -0.1278, 48.8566, 2.3522) == pytest.approx(343.6, abs=0.5)
    assert distance_km(10, 20, 10, 20) == 0.0


@pytest.mark.parametrize(
    ("action", "says"),
    [
        ("get_weather with Action Input: {}", 'No action "get_weather"'),
        ("get_elevation with Action Input: {latitude: 1}", "is not JSON"),
        ("get_elevation with Action Input: [1, 2]", "must be a JSON object"),
        (
            'get_elevation with Action Input: {"latitude": "north", "longitude": 2}',
            "latitude must be a number",
        ),
        ('get_elevation with Action Input: {"latitude": true, "longitude": 2}', "latitude must be a number"),
        ('get_elevation with Action Input: {"latitude": NaN, "longitude": 2}', "finite number"),
        ('get_elevation with Action Input: {"latitude": 1e400, "longitude": 2}', "finite number"),
        ('get_elevation with Action Input: {"latitude": 1}', "missing longitude"),
        ('get_elevation with Action Input: {"latitude": 1, "longitude": 2, "x": 3}', "unknown x"),
        ('finish with Action Input: {"value": 3}', "finish takes one parameter"),
        ("tell me the weather", "Invalid action"),
    ],
)
def test_a_malformed_call_is_an_observation_and_the_episode_goes_on(action, says):
    env = make_env("weather")
    env.reset(TASKS[0])
    step = env.step(action)
    assert says in step.observation and not step.done and step.reward == 0.0


def test_answers_compare_with_tolerance_and_without_case():
    assert same_answer(17.4, 17.4) and same_answer("17.4", 17.4) and same_answer(17.43, 17.4)
    assert not same_answer(17.6, 17.4) and not same_answer("warm", 17.4) and not same_answer(True, 1.0)
    assert (
        same_answer(" yes ", "Yes")
        and same_answer(["b", "a"], ["a", "b"])
        and not same_answer(["a"], ["a", "b"])
    )


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = _task("distance")
    for hidden in (
        {**task.hidden, "answer": task.hidden["answer"] + 1},
        {**task.hidden, "choices": task.hidden["choices"] + 1},
    ):
        with pytest.raises(BadTask, match="not what the template makes"):
            make_env("weather").reset(replace(task, hidden=hidden))
    for field, value in (
        ("template", "flood"),
        ("current_date", "2031-01-01"),
        ("current_location", "Atlantis"),
    ):
        with pytest.raises(BadTask, match=f"hidden.{field}"):
            Weather.check_task(replace(task, hidden={**task.hidden, field: value}))
