"""ColBench's backend-programming tasks: short Python functions whose rules only the user knows.

A family is a code template with four rules ("knobs", e.g. the free-shipping threshold) whose values are
drawn per task from wide ranges. The reference function is the template filled in, so an agent learns per
family which questions to ask and where each answer goes, and cannot solve a new task from memory: the values
are new. Every value in the code appears verbatim in the rule's sentence ("Orders of $60 or more ship free."
-> `if total >= 60:`; the one exception, an empty separator, is "nothing in between"), so a small model
copies instead of computing.

A task hides `difficulty` of its four rules (2, 3 or 4) and states the others in the request. Its 10 unit tests
are chosen to discriminate: each rule's "mutants" (the reference with that rule at the family's usual value, or
at another draw) fail at least one of them. They are balanced too, so that reward cannot be had without the
rules: no function that reads no rule (any constant, an argument handed back; `trivial_passing`) passes more
than the family's `most_same` of them (3; grade 4, having three grades; password 5, a yes/no answer). A task
whose candidate inputs cannot do both, after `POOLS` draws of them, is skipped. Expected outputs come from running the reference, which is our own code, in this process; model code
never runs here (`gymflow.sandbox`).

The simulated human (`answer`) matches a question to rules by keywords and states the best-matching rules (at
most two) in words; a question about nothing it knows gets a vague answer. It never writes code.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gymflow.envs.base import task_rng

N_TESTS = 10
POOLS = 8  # draws of candidate test inputs before a task is given up
LEVELS = ["2", "3", "4"]  # how many of a task's four rules are hidden
MAX_ANSWERED = 2  # rules stated per answer at most (the paper's human answers in two sentences)

Values = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    """One rule of a family: its values (`fields` of the template), how a question names it, how it is said."""

    name: str
    fields: tuple[str, ...]
    topic: str  # what the expert's thought says it still needs, e.g. "the free-shipping threshold"
    question: str  # the expert's question; its keywords match this rule alone
    keywords: tuple[str, ...]  # word starts that make a question about this rule
    say: Callable[[Values], str]  # the rule in words, from the task's values


@dataclass(frozen=True)
class Family:
    name: str
    function: str
    params: str
    about: str  # the request's first sentence, before the signature
    template: str  # the reference's source, `{field}` where a value goes
    knobs: tuple[Knob, ...]
    draws: dict[str, Callable[[random.Random], Any]]  # one value per field
    usual: Values  # the value a guess without asking would use (one mutant per field)
    inputs: Callable[[random.Random, Values], list[list[Any]]]  # candidate test arguments
    valid: Callable[[Values], bool] = field(default=lambda v: True)
    # the most of a task's tests one output may have, so a constant fails most of them: as few as the family's
    # outputs allow (a yes/no family needs half its tests on one answer)
    most_same: int = 3

    @property
    def signature(self) -> str:
        return f"def {self.function}({self.params})"

    def source(self, values: Values) -> str:
        return self.template.format(**values)


# ---- value helpers --------------------------------------------------------------------------------------
def money(rng: random.Random, lo: float, hi: float) -> int | float:
    """A dollar amount with cents, written as Python writes it (4.5, 12.99); whole amounts as int."""
    cents = rng.randint(round(lo * 100), round(hi * 100))
    return cents // 100 if cents % 100 == 0 else cents / 100


def ints(lo: int, hi: int) -> Callable[[random.Random], int]:
    return lambda rng: rng.randint(lo, hi)


def choices(*options: Any) -> Callable[[random.Random], Any]:
    return lambda rng: rng.choice(options)


def dollars(x: Any) -> str:
    return f"${x}"


# ---- families -------------------------------------------------------------------------------------------
def _shipping_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    edge = v["free_over"]
    totals = [edge, edge - 0.01, edge + 0.01, edge - 1] + [money(rng, 1, edge - 0.01) for _ in range(20)]
    totals += [money(rng, edge, edge * 3) for _ in range(4)]
    return [[t, round(rng.uniform(0.1, 40), 1), rng.random() < 0.5] for t in totals]


SHIPPING = Family(
    name="shipping",
    function="shipping_fee",
    params="total, weight, express",
    about=(
        "I need a Python function that returns the shipping fee in dollars for an order, given the order "
        "total in dollars, its weight in kg and whether it ships express."
    ),
    template=(
        "def shipping_fee(total, weight, express):\n"
        "    if total >= {free_over}:\n"
        "        return 0\n"
        "    fee = {base} + {per_kg} * weight\n"
        "    if express:\n"
        "        fee += {surcharge}\n"
        "    return round(fee, 2)"
    ),
    knobs=(
        Knob(
            "free",
            ("free_over",),
            "the free-shipping threshold",
            "Above what order total is shipping free?",
            ("free", "waive", "threshold"),
            lambda v: f"Orders of {dollars(v['free_over'])} or more ship free.",
        ),
        Knob(
            "base",
            ("base",),
            "the base fee",
            "What is the base fee?",
            ("base", "flat", "fixed", "basic", "start"),
            lambda v: f"Other orders pay a base fee of {dollars(v['base'])}.",
        ),
        Knob(
            "weight",
            ("per_kg",),
            "the charge per kg",
            "How much does each kg of weight add?",
            ("weight", "kg", "kilo", "heav", "per kg", "pound"),
            lambda v: f"Each kg of weight adds {dollars(v['per_kg'])}.",
        ),
        Knob(
            "express",
            ("surcharge",),
            "the express surcharge",
            "How much extra is express shipping?",
            ("express", "fast", "rush", "expedit", "priority", "urgent"),
            lambda v: f"Express shipping adds {dollars(v['surcharge'])}.",
        ),
    ),
    draws={
        "free_over": lambda rng: 5 * rng.randint(4, 40),
        "base": lambda rng: money(rng, 1, 12),
        "per_kg": lambda rng: money(rng, 0.1, 4),
        "surcharge": ints(2, 30),
    },
    usual={"free_over": 50, "base": 5, "per_kg": 1, "surcharge": 10},
    inputs=_shipping_inputs,
)


def _discount_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    edge = v["bulk_qty"]
    qty = [edge, edge - 1, edge + 1, 1] + [rng.randint(1, 2 * edge + 5) for _ in range(24)]
    return [[money(rng, 0.5, 120), q, rng.random() < 0.5] for q in qty if q >= 1]


DISCOUNT = Family(
    name="discount",
    function="order_price",
    params="price, quantity, member",
    about=(
        "I need a Python function that returns what an order costs in dollars, given the unit price, the "
        "quantity and whether the buyer is a member."
    ),
    template=(
        "def order_price(price, quantity, member):\n"
        "    total = price * quantity\n"
        "    if quantity >= {bulk_qty}:\n"
        "        total *= 1 - {bulk_pct} / 100\n"
        "    if member:\n"
        "        total *= 1 - {member_pct} / 100\n"
        "    total *= 1 + {tax} / 100\n"
        "    return round(total, {digits})"
    ),
    knobs=(
        Knob(
            "bulk",
            ("bulk_qty", "bulk_pct"),
            "the bulk discount",
            "How many items earn a bulk discount, and how much is it?",
            ("bulk", "quantit", "volume", "large", "items", "wholesale"),
            lambda v: f"Orders of {v['bulk_qty']} or more items get {v['bulk_pct']}% off.",
        ),
        Knob(
            "member",
            ("member_pct",),
            "the member discount",
            "What discount do members get?",
            ("member", "loyal", "club", "subscri", "vip"),
            lambda v: f"Members get another {v['member_pct']}% off.",
        ),
        Knob(
            "tax",
            ("tax",),
            "the sales tax",
            "What sales tax applies?",
            ("tax", "vat", "duty"),
            lambda v: f"Add {v['tax']}% sales tax after the discounts.",
        ),
        Knob(
            "rounding",
            ("digits",),
            "how to round",
            "How should the price be rounded?",
            ("round", "decimal", "cent", "precision", "places"),
            lambda v: f"Round the price to {v['digits']} decimal places.",
        ),
    ),
    draws={
        "bulk_qty": ints(3, 60),
        "bulk_pct": ints(5, 40),
        "member_pct": ints(2, 25),
        "tax": ints(1, 25),
        "digits": choices(0, 1, 2),
    },
    usual={"bulk_qty": 10, "bulk_pct": 10, "member_pct": 5, "tax": 8, "digits": 2},
    inputs=_discount_inputs,
)


def _grade_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    out = [[100, v["max_late"] + 1], [100, v["max_late"]], [rng.randint(0, 100), 0]]
    for mark in (v["top"], v["pass_mark"]):
        latest = min(v["max_late"], (100 - mark) // v["penalty"])  # a later one cannot reach the mark
        for _ in range(6):
            late = rng.randint(0, latest)
            edge = mark + v["penalty"] * late
            out += [
                [edge, late],
                [edge - 1, late],
                [rng.randint(edge, 100), late],
            ]  # the last: a top mark is rare
    out += [[rng.randint(0, 100), rng.randint(0, v["max_late"] + 2)] for _ in range(10)]
    return out


GRADE = Family(
    name="grade",
    function="final_grade",
    params="score, late_days",
    about=(
        'I need a Python function that grades a piece of work as "distinction", "pass" or "fail", given its '
        "score out of 100 and how many days late it was handed in."
    ),
    template=(
        "def final_grade(score, late_days):\n"
        "    if late_days > {max_late}:\n"
        '        return "fail"\n'
        "    score -= {penalty} * late_days\n"
        "    if score >= {top}:\n"
        '        return "distinction"\n'
        "    if score >= {pass_mark}:\n"
        '        return "pass"\n'
        '    return "fail"'
    ),
    knobs=(
        Knob(
            "max_late",
            ("max_late",),
            "how late work may be",
            "How many days late is too late?",
            ("too late", "how late", "late", "outright", "maximum", "max", "accept", "reject", "limit"),
            lambda v: f"Work more than {v['max_late']} days late fails outright.",
        ),
        Knob(
            "penalty",
            ("penalty",),
            "the late penalty",
            "How many points does each late day cost?",
            ("penalt", "deduct", "lose", "cost", "per day", "each day", "per late", "each late", "late"),
            lambda v: f"Each late day costs {v['penalty']} points.",
        ),
        Knob(
            "top",
            ("top",),
            "the distinction mark",
            "What score earns a distinction?",
            ("distinction", "honou", "honor", "top", "excellent", "best", "highest"),
            lambda v: f"A distinction needs {v['top']} points or more.",
        ),
        Knob(
            "pass",
            ("pass_mark",),
            "the pass mark",
            "What score is needed to pass?",
            ("pass", "minimum", "fail"),
            lambda v: f"A pass needs {v['pass_mark']} points or more.",
        ),
    ),
    draws={"max_late": ints(1, 10), "penalty": ints(1, 10), "top": ints(70, 98), "pass_mark": ints(30, 65)},
    usual={"max_late": 7, "penalty": 5, "top": 85, "pass_mark": 50},
    inputs=_grade_inputs,
    most_same=4,  # three grades
    # a full score one day past the limit would still pass, or the limit could not be told apart
    valid=lambda v: v["pass_mark"] + v["penalty"] * (v["max_late"] + 1) <= 100,
)


def _parking_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    free, rate, cap = v["free_hours"], v["rate"], v["cap"]
    to_cap = free + math.ceil(cap / rate)  # about where the cap starts to bite
    hours = [0, free, free + 1, free + 2, to_cap - 1, to_cap, to_cap + 1]
    hours += [rng.randint(free + 1, max(free + 2, to_cap - 1)) for _ in range(14)] + [
        rng.randint(0, 36) for _ in range(5)
    ]
    return [[h, rng.random() < 0.5] for h in hours if h >= 0]


PARKING = Family(
    name="parking",
    function="parking_fee",
    params="hours, weekend",
    about=(
        "I need a Python function that returns the parking fee in dollars for a stay, given its length in "
        "whole hours and whether it is on a weekend."
    ),
    template=(
        "def parking_fee(hours, weekend):\n"
        "    if hours <= {free_hours}:\n"
        "        return 0\n"
        "    fee = {rate} * (hours - {free_hours})\n"
        "    if weekend:\n"
        "        fee += {surcharge}\n"
        "    return min(fee, {cap})"
    ),
    knobs=(
        Knob(
            "free",
            ("free_hours",),
            "how many hours are free",
            "How many hours are free?",
            ("free", "grace", "no charge"),
            lambda v: f"Stays of up to {v['free_hours']} hours are free.",
        ),
        Knob(
            "rate",
            ("rate",),
            "the hourly rate",
            "How much does each hour cost?",
            ("rate", "per hour", "hourly", "each hour", "every hour", "beyond", "after"),
            lambda v: f"Each hour beyond the free time costs {dollars(v['rate'])}.",
        ),
        Knob(
            "weekend",
            ("surcharge",),
            "the weekend surcharge",
            "How much extra on weekends?",
            ("weekend", "saturday", "sunday"),
            lambda v: f"Weekends add {dollars(v['surcharge'])} to the fee.",
        ),
        Knob(
            "cap",
            ("cap",),
            "the fee cap",
            "What is the most the fee can be?",
            ("cap", "max", "most", "limit", "exceed", "ceiling", "daily", "upper"),
            lambda v: f"The fee never exceeds {dollars(v['cap'])}.",
        ),
    ),
    draws={
        "free_hours": ints(1, 4),
        "rate": lambda rng: money(rng, 0.5, 9),
        "surcharge": ints(1, 15),
        "cap": ints(15, 80),
    },
    usual={"free_hours": 1, "rate": 2, "surcharge": 5, "cap": 20},
    inputs=_parking_inputs,
)

# fmt: off
PRODUCT_NAMES = (
    "anchor", "bell", "brush", "candle", "clock", "cup", "desk", "drum", "fan", "fork", "globe", "hat", "jar",
    "kettle", "kite", "lamp", "map", "mat", "mirror", "mug", "pan", "pen", "plate", "quilt", "radio", "rope",
    "rug", "scarf", "shelf", "sock", "spoon", "stool", "tent", "towel", "tray", "vase", "wallet", "whistle",
)
# fmt: on
CATEGORIES = ("toys", "books", "garden", "food", "tools", "music", "sports", "beauty", "games", "office")


def _products_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    def product(name: str, good: bool) -> dict[str, Any]:
        """A product that passes every rule (`good`), or one that breaks one rule, often just past its edge."""
        top, least = v["max_price"], v["min_stock"]
        others = [c for c in CATEGORIES if c != v["skip"]]
        item = {
            "name": name,
            "price": rng.choice([top, top - 1, rng.randint(1, top)]),
            "stock": rng.choice([least, least + 1, rng.randint(least, 3 * least + 3)]),
            "category": rng.choice(others),
        }
        broken = "" if good else rng.choice(["price", "stock", "category"])
        if broken == "price":
            item["price"] = rng.choice([top + 1, rng.randint(top + 1, 3 * top)])
        elif broken == "stock":
            item["stock"] = rng.choice([least - 1, rng.randint(0, least - 1)])
        elif broken == "category":
            item["category"] = v["skip"]
        return item

    cases = []
    for _ in range(30):
        names = rng.sample(PRODUCT_NAMES, rng.randint(3, 8))
        share = rng.choice([0.3, 0.6, 0.9])
        cases.append([[product(n, rng.random() < share) for n in names]])
    return cases


PRODUCTS = Family(
    name="products",
    function="pick_products",
    params="products",
    about=(
        'I need a Python function that picks the products to show from a list of dicts with keys "name", '
        '"price", "stock" and "category", and returns their names in alphabetical order.'
    ),
    template=(
        "def pick_products(products):\n"
        "    names = []\n"
        "    for p in products:\n"
        '        if p["price"] <= {max_price} and p["stock"] >= {min_stock}:\n'
        '            if p["category"] != "{skip}":\n'
        '                names.append(p["name"])\n'
        "    return sorted(names)[:{limit}]"
    ),
    knobs=(
        Knob(
            "price",
            ("max_price",),
            "the price limit",
            "What is the highest price allowed?",
            ("price", "expensive", "cost", "budget", "cheap", "afford", "dollar"),
            lambda v: f"Only products priced at most {dollars(v['max_price'])} count.",
        ),
        Knob(
            "stock",
            ("min_stock",),
            "the stock requirement",
            "What stock level does a product need?",
            ("stock", "inventor", "available", "supply", "units"),
            lambda v: f"A product needs at least {v['min_stock']} in stock.",
        ),
        Knob(
            "category",
            ("skip",),
            "which category to leave out",
            "Which category should be left out?",
            ("categor", "exclude", "skip", "leave out", "left out", "kind", "omit", "type"),
            lambda v: f"Leave out the {v['skip']} category.",
        ),
        Knob(
            "limit",
            ("limit",),
            "how many names to return",
            "How many names should it return at most?",
            ("how many", "limit", "at most", "number", "count", "return", "names"),
            lambda v: f"Return at most {v['limit']} names.",
        ),
    ),
    draws={
        "max_price": ints(10, 300),
        "min_stock": ints(1, 20),
        "skip": choices(*CATEGORIES),
        "limit": ints(1, 5),
    },
    usual={"max_price": 100, "min_stock": 1, "skip": "toys", "limit": 3},
    inputs=_products_inputs,
)

# fmt: off
FIRST_NAMES = (
    "Al", "Bo", "Ann", "Eve", "Ida", "Lee", "Liam", "Nora", "Omar", "Rosa", "Sven", "Aiden", "Chloe", "Diego",
    "Fatima", "Hiroshi", "Isabel", "Mateo",
)
LAST_NAMES = (
    "Li", "Ng", "Fox", "Diaz", "Kahn", "Moreau", "Novak", "Okafor", "Petrov", "Schmidt", "Tanaka", "Williams",
    "Zielinski", "Andersson",
)
# fmt: on


def _username_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    return [[rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES), rng.randint(1940, 2015)] for _ in range(30)]


USERNAME = Family(
    name="username",
    function="make_username",
    params="first, last, year",
    about=(
        "I need a Python function that makes a lower-case username from a person's first name, last name and "
        "birth year."
    ),
    template=(
        "def make_username(first, last, year):\n"
        '    name = first[:{n_first}] + "{sep}" + last[:{n_last}]\n'
        "    return name.lower() + str(year)[-{digits}:]"
    ),
    knobs=(
        Knob(
            "first",
            ("n_first",),
            "how much of the first name to use",
            "How many letters of the first name?",
            ("first name", "first part", "given", "forename"),
            lambda v: f"Take the first {v['n_first']} letters of the first name.",
        ),
        Knob(
            "last",
            ("n_last",),
            "how much of the last name to use",
            "How many letters of the last name?",
            ("last name", "surname", "family", "second part"),
            lambda v: f"Take the first {v['n_last']} letters of the last name.",
        ),
        Knob(
            "separator",
            ("sep",),
            "what goes between the names",
            "What goes between the two parts?",
            ("separat", "between", "join", "dot", "underscore", "hyphen", "dash", "connect", "symbol"),
            lambda v: {
                "_": "Join the two parts with an underscore (_).",
                ".": "Join the two parts with a dot (.).",
                "-": "Join the two parts with a hyphen (-).",
                "": "Join the two parts with nothing in between.",
            }[v["sep"]],
        ),
        Knob(
            "year",
            ("digits",),
            "how much of the year to add",
            "How many digits of the year go at the end?",
            ("year", "digit", "end", "birth"),
            lambda v: f"End with the last {v['digits']} digits of the birth year.",
        ),
    ),
    draws={
        "n_first": ints(1, 5),
        "n_last": ints(2, 8),
        "sep": choices("_", ".", "-", ""),
        "digits": ints(1, 4),
    },
    usual={"n_first": 1, "n_last": 5, "sep": ".", "digits": 2},
    inputs=_username_inputs,
)

BANNED = ("password", "admin", "qwerty", "letmein", "welcome", "dragon", "secret", "login", "master", "hello")


def _password_inputs(rng: random.Random, v: Values) -> list[list[Any]]:
    def word(length: int, digits: int, banned: bool) -> str:
        """A password of `length` characters (longer if the rest does not fit) with `digits` digits."""
        word = rng.choice([v["banned"], v["banned"].upper(), v["banned"].title()]) if banned else ""
        digits = max(digits, 0)
        letters = max(length - digits - len(word), 0)
        chars = [rng.choice(string.ascii_letters + "!?#") for _ in range(letters)]
        chars += [rng.choice(string.digits) for _ in range(digits)]
        rng.shuffle(chars)
        at = rng.randint(0, len(chars))
        return "".join(chars[:at]) + word + "".join(chars[at:])

    lo, hi, need = v["min_len"], v["max_len"], v["min_digits"]
    out = [[word(n, need, False)] for n in (lo, lo - 1, hi, hi + 1)]
    out += [[word(rng.randint(lo, hi), need, True)] for _ in range(4)]
    for _ in range(22):
        digits = rng.choice([need, need - 1, rng.randint(0, 6)])
        out.append([word(rng.randint(lo - 2, hi + 2), digits, rng.random() < 0.25)])
    return out


PASSWORD = Family(
    name="password",
    function="password_ok",
    params="password",
    about="I need a Python function that says whether a password is acceptable (True or False).",
    template=(
        "def password_ok(password):\n"
        "    if len(password) < {min_len} or len(password) > {max_len}:\n"
        "        return False\n"
        "    if sum(c.isdigit() for c in password) < {min_digits}:\n"
        "        return False\n"
        '    return "{banned}" not in password.lower()'
    ),
    knobs=(
        Knob(
            "min_len",
            ("min_len",),
            "the minimum length",
            "What is the minimum length?",
            ("min", "short", "least", "length"),
            lambda v: f"A password needs at least {v['min_len']} characters.",
        ),
        Knob(
            "max_len",
            ("max_len",),
            "the maximum length",
            "What is the maximum length?",
            ("max", "long", "most", "length"),
            lambda v: f"It may have at most {v['max_len']} characters.",
        ),
        Knob(
            "digits",
            ("min_digits",),
            "how many digits it needs",
            "How many digits are required?",
            ("digit", "number", "numeric"),
            lambda v: f"It needs at least {v['min_digits']} digits.",
        ),
        Knob(
            "banned",
            ("banned",),
            "the banned word",
            "Which word is banned?",
            ("word", "banned", "forbid", "contain", "common", "not allowed", "blacklist", "block"),
            lambda v: f'It must not contain the word "{v["banned"]}", in any case.',
        ),
    ),
    draws={
        "min_len": ints(5, 12),
        "max_len": ints(14, 40),
        "min_digits": ints(1, 4),
        "banned": choices(*BANNED),
    },
    usual={"min_len": 8, "max_len": 64, "min_digits": 1, "banned": "password"},
    inputs=_password_inputs,
    most_same=5,  # True or False
)

FAMILIES: dict[str, Family] = {
    f.name: f for f in (SHIPPING, DISCOUNT, GRADE, PARKING, PRODUCTS, USERNAME, PASSWORD)
}


# ---- running our own reference code ---------------------------------------------------------------------
def compile_reference(family: Family, values: Values) -> Callable[..., Any]:
    """The reference (or a mutant) as a function: our own template, never model-written code."""
    namespace: dict[str, Any] = {}
    exec(compile(family.source(values), f"<{family.name}>", "exec"), namespace)  # noqa: S102 (our template)
    return namespace[family.function]


def call(fn: Callable[..., Any], args: list[Any]) -> Any:
    """`fn(*args)` as JSON would carry it back (tuples become lists); an exception as a marker."""
    try:
        return json.loads(json.dumps(fn(*json.loads(json.dumps(args)))))
    except Exception as e:  # noqa: BLE001 (a mutant may fail where the reference does not)
        return {"__error__": type(e).__name__}


def same(a: Any, b: Any) -> bool:
    """Equal as a unit test's `==` says on JSON data (True == 1), except that numbers may differ by 1e-6:
    the same formula written in another order differs in its last digits."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# ---- trivial functions: what a submission scores without reading any rule ----------------------------------
CONSTANTS: tuple[Any, ...] = (0, 1, -1, True, False, None, "", [], {})
DEGENERATE: dict[str, Callable[..., Any]] = {  # by its body, as every trivial function is named
    "return args[0]": lambda *args: args[0],
    "return args[-1]": lambda *args: args[-1],
    "return list(args)": lambda *args: list(args),
    "return len(args[0])": lambda *args: len(args[0]),
    "return str(args[0]).lower()": lambda *args: str(args[0]).lower(),
}


def passing(fn: Callable[..., Any], tests: list[list[Any]]) -> set[int]:
    """Which of `tests` `fn` passes, judged as the environment judges a submission (JSON values, `same`)."""
    return {i for i, (args, expected) in enumerate(tests) if same(call(fn, args), expected)}


def trivial_passing(tests: list[list[Any]]) -> dict[str, set[int]]:
    """Which of `tests` each function that needs no rule passes, by its body (`def f(*args): <body>`): the usual
    constants, every output the tests expect (so the best constant of all is among them), the degenerate ones."""
    values = [expected for _, expected in tests] + list(CONSTANTS)  # the tests' spelling first: False, not 0
    out: dict[str, set[int]] = {}
    for value in values:  # a constant needs no call: it is its own (JSON) result
        if f"return {value!r}" not in out:
            out[f"return {value!r}"] = {i for i, (_, expected) in enumerate(tests) if same(value, expected)}
    return out | {name: passing(fn, tests) for name, fn in DEGENERATE.items()}


def trivial_scores(tests: list[list[Any]]) -> dict[str, int]:
    """How many of `tests` each trivial function passes."""
    return {name: len(cases) for name, cases in trivial_passing(tests).items()}


def mutants(family: Family, values: Values, rng: random.Random) -> list[tuple[str, Values]]:
    """(knob, values) with one field of one rule changed: to the family's usual value, and to two other draws."""
    out = []
    for knob in family.knobs:
        for name in knob.fields:
            alternatives = [family.usual[name]] + [family.draws[name](rng) for _ in range(2)]
            for alt in alternatives:
                changed = {**values, name: alt}
                if alt != values[name] and family.valid(changed) and changed not in [v for _, v in out]:
                    out.append((knob.name, changed))
    return out


def choose_tests(family: Family, values: Values, rng: random.Random) -> list[list[Any]] | None:
    """10 [args, expected] cases that every mutant fails at least once and no trivial function passes more than
    `family.most_same` of; None if `POOLS` draws of candidate inputs cannot do it. Each draw adds to the pool,
    so a task whose first draw is lopsided (most passwords too short) is balanced by the next."""
    reference = compile_reference(family, values)
    changed = [compile_reference(family, v) for _, v in mutants(family, values, rng)]
    pool: list[list[Any]] = []  # [args, expected]
    seen: set[str] = set()
    for _ in range(POOLS):
        for args in family.inputs(rng, values):
            key = json.dumps(args, sort_keys=True)
            if key not in seen:
                seen.add(key)
                pool.append([args, call(reference, args)])
        if any(isinstance(e, dict) and "__error__" in e for _, e in pool):
            return None
        chosen = pick_tests(pool, changed, family.most_same, rng)
        if chosen is not None:
            return chosen
    return None


def pick_tests(
    pool: list[list[Any]], changed: list[Callable[..., Any]], most_same: int, rng: random.Random
) -> list[list[Any]] | None:
    """N_TESTS cases of `pool`: greedily those that catch the most mutants (`changed`) not caught yet, then at
    random, skipping any case that would let a trivial function pass more than `most_same`."""
    caught = [passing(fn, pool) for fn in changed]  # the cases each mutant passes
    caught = [set(range(len(pool))) - c for c in caught]  # ... and so fails
    trivial = list(trivial_passing(pool).values())
    chosen: list[int] = []

    def fits(i: int) -> bool:
        return i not in chosen and all(len(p.intersection(chosen)) < most_same for p in trivial if i in p)

    left = set(range(len(caught)))
    while left:
        score = {i: sum(i in caught[m] for m in left) for i in range(len(pool)) if fits(i)}
        best = max(score, key=lambda i: (score[i], -i), default=None)
        if best is None or score[best] == 0 or len(chosen) == N_TESTS:
            return None
        chosen.append(best)
        left = {m for m in left if best not in caught[m]}
    rest = list(range(len(pool)))
    rng.shuffle(rest)
    for i in rest:
        if len(chosen) < N_TESTS and fits(i):
            chosen.append(i)
    if len(chosen) < N_TESTS:
        return None
    rng.shuffle(chosen)
    return [pool[i] for i in chosen]


# ---- tasks ----------------------------------------------------------------------------------------------
def make_hidden(family: Family, values: Values, hidden_knobs: set[str], rng: random.Random) -> dict | None:
    """Everything about a task the agent must not see: the reference, its rules, its tests."""
    tests = choose_tests(family, values, rng)
    if tests is None:
        return None
    return {
        "family": family.name,
        "function": family.function,
        "signature": family.signature,
        "reference": family.source(values),
        "specifics": [
            {
                "name": k.name,
                "values": {f: values[f] for f in k.fields},
                "hidden": k.name in hidden_knobs,
                "answer": k.say(values),
                "keywords": list(k.keywords),
                "question": k.question,
                "topic": k.topic,
            }
            for k in family.knobs
        ],
        "tests": tests,
    }


def instruction(hidden: dict) -> str:
    """The request the agent sees: what the function does, its signature, and the rules that are not hidden."""
    family = FAMILIES[hidden["family"]]
    stated = [s["answer"] for s in hidden["specifics"] if not s["hidden"]]
    return "\n".join(
        [family.about, f"Signature: {family.signature}", *([" ".join(stated)] if stated else [])]
    )


def family_tasks(seed: int) -> Iterator[tuple[str, str, int, dict]]:
    """An endless seeded stream of (task_id, difficulty, seed, hidden). The id is a digest of the task's
    content (family, values, hidden rules), so the same task drawn twice, in any split, has the same id."""
    rng = task_rng("colbench-tasks", seed)
    names = sorted(FAMILIES)
    while True:
        family = FAMILIES[rng.choice(names)]
        level = rng.choice(LEVELS)
        values = {name: draw(rng) for name, draw in family.draws.items()}
        while not family.valid(values):  # redrawn within the family, so families stay equally frequent
            values = {name: draw(rng) for name, draw in family.draws.items()}
        hidden_knobs = set(rng.sample([k.name for k in family.knobs], int(level)))
        key = json.dumps([family.name, values, sorted(hidden_knobs)], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()
        hidden = make_hidden(family, values, hidden_knobs, task_rng("colbench-tests", digest))
        if hidden is not None:
            yield f"colbench-{family.name}-{digest[:10]}", level, int(digest[:8], 16), hidden


# ---- the simulated human --------------------------------------------------------------------------------
VAGUE = (
    "I'm not sure what you mean. Ask me about one rule at a time.",
    "It should just do what I described. What exactly do you want to know?",
    "I don't know how to answer that. Ask me about a specific rule.",
)
NO_CODE = "I can't write or show code, but I can tell you the rules one at a time."
CODE_REQUEST = re.compile(r"\b(code|write|implement|reference|show|source|program|solution)", re.IGNORECASE)


def matched(question: str, specifics: list[dict]) -> list[dict]:
    """The rules a question is about: those whose keywords it hits most (at most MAX_ANSWERED, family order)."""
    text = " " + re.sub(r"[^a-z0-9%$ ]+", " ", question.lower()) + " "
    text = re.sub(r"\s+", " ", text)
    hits = [sum(f" {kw}" in text for kw in s["keywords"]) for s in specifics]
    top = max(hits, default=0)
    if top == 0:
        return []
    return [s for s, h in zip(specifics, hits, strict=True) if h == top][:MAX_ANSWERED]


def answer(question: str, specifics: list[dict]) -> tuple[str, list[str]]:
    """The rule-based human's answer to `question`, and the names of the rules it states."""
    found = matched(question, specifics)
    if found:
        return " ".join(s["answer"] for s in found), [s["name"] for s in found]
    if CODE_REQUEST.search(question):
        return NO_CODE, []
    digest = hashlib.sha256(question.strip().lower().encode()).digest()
    return VAGUE[digest[0] % len(VAGUE)], []


# A line a human's answer must not have: a code fence, a statement, an assignment, a call, an operator.
CODE_LINE = re.compile(
    r"`|^\s*(def|class|return|import|from|if|elif|else|for|while|try|except|with|lambda|print)\b"
    r"|\b(def|lambda|return|import)\s|[=!<>+\-*/%]=|->|\w\(|\w\[|[{};]|^\s{4}|:\s*$",
    re.MULTILINE,
)


def looks_like_code(text: str) -> bool:
    return bool(CODE_LINE.search(text))


def words_only(text: str) -> str:
    """`text` without its code-like lines (a fenced block goes whole); what is left, as one line."""
    text = re.sub(r"```.*?(```|$)", " ", text, flags=re.DOTALL)
    kept = [line for line in text.splitlines() if line.strip() and not looks_like_code(line)]
    return " ".join(" ".join(kept).split())
