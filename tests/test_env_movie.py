"""The movie environment (gymflow/envs/movie.py): answers found through the tools, one id a question (so train
and eval share no question), unknown titles and ids as observations."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.instructions import build_splits
from gymflow.envs.movie import TEMPLATES, Movie, world

TASKS = list(itertools.islice(Movie.generate("eval", 2), 150))


def do(env, tool: str, **args) -> str:
    return env.step(f"{tool} with Action Input: {json.dumps(args)}").observation


def test_every_template_is_drawn_and_the_expert_solves_50_through_the_tools():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    env, solved = make_env("movie"), 0
    for task in TASKS[:50]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 50


def test_the_directors_birthplace_is_read_off_the_crew_and_the_person():
    task = next(t for t in TASKS if t.hidden["template"] == "director_birthplace")
    env = make_env("movie")
    env.reset(task)
    title = task.instruction.removeprefix("Where was the director of ").split(" born?")[0]
    movie_id = json.loads(do(env, "get_search_movie", movie_name=title.lower()))["id"]
    crew = json.loads(do(env, "get_movie_crew", movie_id=movie_id))["crew"]
    director = next(c for c in crew if c["job"] == "Director")
    place = json.loads(do(env, "get_person_details", person_id=director["id"]))["place_of_birth"]
    assert place == task.hidden["answer"] == world()["people"][director["id"]]["place_of_birth"]
    step = env.step(f"finish with Action Input: {json.dumps({'answer': place})}")
    assert step.done and step.reward == 1.0


def test_train_and_eval_share_no_question():
    splits = build_splits(Movie, 300, 90, seed=0)
    assert not {t.instruction for t in splits["train"]} & {t.instruction for t in splits["eval"]}


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("get_search_movie", {"movie_name": "The Nonexistent Film"}, "no movie named"),
        ("get_movie_cast", {"movie_id": "1"}, "no movie with id"),
        ("get_person_details", {"person_id": "x"}, "no person with id"),
        ("get_movie_cast", {"movie_id": 512}, "movie_id must be a string"),
    ],
)
def test_unknown_titles_and_ids_are_observations(tool, args, says):
    env = make_env("movie")
    env.reset(TASKS[0])
    step = env.step(f"{tool} with Action Input: {json.dumps(args)}")
    assert says in step.observation and not step.done


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = TASKS[0]
    with pytest.raises(BadTask, match="not what the template makes"):
        make_env("movie").reset(replace(task, hidden={**task.hidden, "answer": "someone else"}))
    with pytest.raises(BadTask, match="hidden.template"):
        Movie.check_task(replace(task, hidden={**task.hidden, "template": "box_office"}))
