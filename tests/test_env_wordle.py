"""Wordle's own rules: official feedback on repeated letters, guess parsing, episode end, expert."""

import random
from collections import Counter

import pytest

from gymflow.envs.base import Task
from gymflow.envs.wordle import (
    MAX_GUESSES,
    Wordle,
    difficulty_of,
    encode,
    feedback,
    guess_index,
    parse_guess,
    pattern_matrix,
    solve,
    word_lists,
)


def make_task(answer: str) -> Task:
    return Task(
        "wordle",
        f"test-{answer}",
        "eval",
        "easy",
        0,
        "Guess the hidden 5-letter word in 6 tries.",
        {"answer": answer},
    )


@pytest.mark.parametrize(
    "answer, guess, marks",
    [
        ("abbey", "babes", "yyggb"),  # one unmatched b left for the first b
        ("crane", "eerie", "bbybg"),  # the green e uses up the only e
        ("abbey", "bobby", "ybgbg"),  # second extra b gets nothing
        ("those", "geese", "bbbgg"),
        ("speed", "eerie", "yybbb"),  # two unmatched e: the first two e are yellow, the third black
        ("crane", "crane", "ggggg"),
        ("trace", "crate", "yggyg"),
    ],
)
def test_feedback_repeated_letters(answer, guess, marks):
    assert feedback(guess, answer) == marks
    assert pattern_matrix()[guess_index()[guess], guess_index()[answer]] == encode(marks)


def test_matrix_matches_feedback_on_a_sample():
    answers, guesses = word_lists()
    matrix, rng = pattern_matrix(), random.Random(3)
    for _ in range(3000):
        g, a = rng.randrange(len(guesses)), rng.randrange(len(answers))
        assert matrix[g, a] == encode(feedback(guesses[g], answers[a])), (guesses[g], answers[a])


def test_word_lists_are_official():
    answers, guesses = word_lists()
    assert len(answers) == 2315 and len(guesses) == 12972
    assert guesses[: len(answers)] == answers and "salet" in guesses and "salet" not in answers


@pytest.mark.parametrize(
    "action, word",
    [("s h i r e", "shire"), ("SHIRE", "shire"), ('"c r a n e"', "crane"), (" T  r a c e ", "trace")],
)
def test_parse_guess_accepts(action, word):
    assert parse_guess(action) == word


@pytest.mark.parametrize("action", ["", "sh ire", "s h i r", "shires", "c r a n 3", "x" * 500, "guess crane"])
def test_parse_guess_rejects(action):
    assert parse_guess(action) is None


def test_a_game_step_by_step():
    env = Wordle()
    assert env.reset(make_task("crane")) == "Guess the hidden 5-letter word in 6 tries."
    step = env.step("t r a c e")
    assert step.observation == "t r a c e -> b g g y g. 5 guesses left." and not step.done
    bad = env.step("xyzzy")  # 5 letters, not in the vocabulary: does not use up a guess
    assert "invalid word" in bad.observation.lower() and "not in the vocabulary" in bad.observation
    assert bad.observation.endswith("5 guesses left.") and bad.reward == 0.0 and not bad.done
    garbage = env.step("I think the answer is crane")
    assert "not a 5-letter word" in garbage.observation and '"s h i r e"' in garbage.observation
    step = env.step("crane")
    assert (
        step.observation == "c r a n e -> g g g g g. Solved in 2 guesses."
        and step.reward == 1.0
        and step.done
    )


def test_six_wrong_guesses_end_the_game():
    env = Wordle()
    env.reset(make_task("abbey"))
    for i, word in enumerate(["trace", "sound", "lipid", "fungi", "hover", "quack"]):
        step = env.step(word)
        assert step.done == (i == MAX_GUESSES - 1) and step.reward == 0.0
    assert step.observation.endswith('No guesses left; the word was "abbey".')


def test_expert_solves_every_answer_within_five():
    answers = word_lists()[0]
    counts = Counter()
    for answer in answers:
        guesses = solve(answer)
        assert guesses[-1] == answer, answer
        counts[len(guesses)] += 1
    assert max(counts) <= 5
    assert sum(n * c for n, c in counts.items()) / len(answers) < 3.5


def test_expert_recovers_after_policy_guesses():
    env = Wordle()
    env.reset(make_task("nymph"))
    for word in ["zebra", "quack", "fjord", "lipid"]:  # four poor guesses, two left
        env.step(word)
    thought, action = env.expert_step()
    assert "Feedback so far:" in thought and parse_guess(action) in guess_index()
    while not env.done:
        step = env.step(env.expert_step()[1])
    assert step.reward == 1.0


def test_tasks_cover_every_answer_in_three_equal_levels():
    tasks = list(Wordle.generate("train", 0))
    assert len({t.task_id for t in tasks}) == len(tasks) == 2315
    assert all(t.hidden["answer"] not in t.task_id for t in tasks)
    levels = Counter(t.difficulty for t in tasks)
    assert set(levels) == {"easy", "medium", "hard"} and max(levels.values()) - min(levels.values()) <= 2
    assert difficulty_of()["about"] == "easy" and difficulty_of()["vaunt"] == "hard"
