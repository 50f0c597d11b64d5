"""Made-up names the generated worlds share (people in academia and search, places in weather and search):
the lists and the way a place's name is drawn, so two worlds built from the same seed stay the same."""

from __future__ import annotations

from typing import Any

# fmt: off
GIVEN = [
    "Ana", "Bo", "Cai", "Dara", "Eli", "Femi", "Gus", "Hiro", "Ines", "Jae", "Kai", "Lea", "Mio", "Nils",
    "Ola", "Priya", "Quan", "Rosa", "Sven", "Tao", "Uri", "Vera"
]
FAMILY = [
    "Arendt", "Bose", "Chen", "Dubois", "Eze", "Fonseca", "Gill", "Haas", "Iqbal", "Jansen", "Kato",
    "Lopez", "Moss", "Nowak", "Okafor", "Pike", "Quist"
]
SYLLABLES = [
    "or", "va", "le", "mi", "ra", "to", "ne", "sa", "ki", "lu", "be", "an", "co", "di", "fe", "ga", "ho",
    "ri"
]
# fmt: on


def full_names(given: int = len(GIVEN), family: int = len(FAMILY)) -> list[str]:
    """Every "Given Family" pair of the first `given` given names and `family` family names, in a fixed order
    (a world that drew from shorter lists passes their lengths and keeps its draws)."""
    return [f"{g} {f}" for g in GIVEN[:given] for f in FAMILY[:family]]


def place_name(rng: Any, used: set[str], parts: int = 3) -> str:
    """A name of 2 to `parts` syllables not in `used` (added to it): Orvale, Kilu."""
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, parts))).capitalize()
        if name not in used:
            used.add(name)
            return name
