"""The search environment (gymflow/envs/search.py): a real index ranks the named entity's document first, the
questions need their hops, and answers are scored as SQuAD scores them (EM for success, F1 as the reward)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.search import LEVELS, QUESTIONS, Search, documents, f1, normalize, search

TASKS = list(itertools.islice(Search.generate("eval", 8), 150))


def test_every_kind_and_level_is_drawn_and_the_expert_solves_50_through_search():
    assert {t.hidden["template"] for t in TASKS} == set(QUESTIONS)
    assert {t.difficulty for t in TASKS} == set(LEVELS)
    env, solved = make_env("search"), 0
    for task in TASKS[:50]:
        env.reset(task)
        actions = []
        while not env.done:
            actions.append(env.expert_step()[1])
            step = env.step(actions[-1])
        solved += step.reward == 1.0
        assert {a.split("[")[0] for a in actions} == {"search", "open", "answer"}
    assert solved == 50


def test_the_index_ranks_the_named_entitys_document_first():
    for task in TASKS[:40]:
        first = task.hidden["chain"][0]
        assert search(first)[0] == first
        assert first in search(task.instruction)


def test_a_later_hop_is_not_in_the_first_document():
    """A 2- or 3-hop question's answer is not written in the document its question names (such draws are
    skipped)."""
    for task in (t for t in TASKS if t.difficulty != "1-hop"):
        assert task.hidden["answer"] not in documents()[task.hidden["chain"][0]]


def test_answers_are_scored_as_squad_scores_them():
    """SQuAD's normalisation drops case, punctuation and articles; F1 over the tokens left."""
    assert normalize("The  Lyon, France!") == "lyon france"
    assert f1("Lyon", "Lyon France") == pytest.approx(2 * 1.0 * 0.5 / 1.5)  # precision 1, recall 1/2
    assert f1("the Lyon", "Lyon") == 1.0 and f1("Paris", "Lyon") == 0.0
    env = make_env("search")
    task = next(t for t in TASKS if " " not in t.hidden["answer"])
    env.reset(task)
    assert env.step(f"answer[the {task.hidden['answer'].upper()}.]").reward == 1.0
    env.reset(task)
    partial = env.step(f"answer[{task.hidden['answer']} city]")
    assert (
        partial.done and partial.reward == pytest.approx(2 / 3) and not Search.spec.is_success(partial.reward)
    )


@pytest.mark.parametrize(
    ("action", "says"),
    [
        ('search["unbalanced AND (]', "[1]"),  # query syntax is never parsed: the words are searched
        ("search[!!!]", "No results"),
        ("open[A Document Nobody Wrote]", "No document titled"),
        ("look around", "Invalid action"),
    ],
)
def test_hostile_and_malformed_actions_are_observations(action, says):
    env = make_env("search")
    env.reset(TASKS[0])
    step = (
        env.step(action) if "AND" not in action else env.step(f"search[{TASKS[0].hidden['chain'][0]} AND (]")
    )
    assert says in step.observation and not step.done


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = TASKS[0]
    with pytest.raises(BadTask, match="not what the template makes"):
        make_env("search").reset(replace(task, hidden={**task.hidden, "answer": "Atlantis"}))
