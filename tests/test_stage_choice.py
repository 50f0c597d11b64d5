"""A stage's one argument (`gymflow.stage.chosen`): which method it runs for, the first by default, a one-line error
naming the choices otherwise (stages.control and stages.compare: evol or sweet)."""

import pytest

from gymflow.errors import UserError
from gymflow.stage import chosen


def test_no_argument_is_the_first_choice_and_a_known_one_is_taken(monkeypatch):
    monkeypatch.setattr("sys.argv", ["stages.control"])
    assert chosen({"evol": 1, "sweet": 2}, "control") == "evol"
    monkeypatch.setattr("sys.argv", ["stages.control", "sweet"])
    assert chosen({"evol": 1, "sweet": 2}, "control") == "sweet"


def test_an_unknown_argument_names_the_choices(monkeypatch):
    monkeypatch.setattr("sys.argv", ["stages.compare", "sweeet"])
    with pytest.raises(UserError, match=r"^no comparison for 'sweeet': name one of evol, sweet$"):
        chosen(("evol", "sweet"), "comparison")
