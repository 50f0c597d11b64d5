"""A task's unit tests: declarative checks (JSON data in `hidden["checks"]`) run on the initial and final state.

    run_checks(hidden, initial, final, answer, completed) -> [("a text ... was sent", True), ...]

The reward is the fraction that pass (LOOP, section 5.2); a task succeeds when all do. Kinds:

    added        a record absent from the initial state is in the final one, its fields matching `match`
    removed      the record with `key` was deleted
    field        the record with `key` has `field` equal to `equals` in the final state
    contains     the record's list `field` contains `item` (a like)
    value        the state at dotted `path` (e.g. venmo.balance) equals `equals`
    answer       complete_task's answer equals `equals`
    completed    complete_task was called
    no_collateral  apart from what the checks above may change, the final state equals the initial one

Each check marks what it may change ("claims"): the record an `added` check matched (one record per check, so a
second identical text is collateral damage), the record or field or path the others name. `no_collateral`
fails on any difference nobody claimed: an extra record, a deletion, a changed field, in any app. Values match
loosely where an agent's output may differ harmlessly: numbers within 0.01, strings ignoring case and runs of
spaces, {"lines": [...]} as the set of a text's non-empty lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pydantic import model_validator

from gymflow.envs.base import Hidden

TOLERANCE = 0.01  # dollars
TABLES = {  # lists of records in the state, by their key field (None: the items are the keys)
    "phone.contacts": "contact_id",
    "phone.messages": "message_id",
    "venmo.users": "email",
    "venmo.friends": None,
    "venmo.transactions": "transaction_id",
    "venmo.payment_requests": "payment_request_id",
    "simple_note.notes": "note_id",
    "file_system.files": "path",
}

Claims = set[tuple]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _number(value: Any) -> float | None:
    """A number, or a string such as "$1,054.50" read as one; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10**300 else None  # float(10**400) overflows
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value.strip().replace("$", "").replace(",", ""))
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def same(got: Any, want: Any) -> bool:
    """`got` matches `want`: numbers within TOLERANCE, strings loosely, {"lines": [...]} as a set of lines."""
    if isinstance(want, dict) and set(want) == {"lines"}:
        if not isinstance(got, str):
            return False
        return {_norm(line) for line in got.splitlines() if line.strip()} == {_norm(x) for x in want["lines"]}
    if isinstance(want, bool) or want is None:
        return got is want
    if isinstance(want, (int, float)):
        number = _number(got) if not isinstance(got, str) else None
        return number is not None and abs(number - want) <= TOLERANCE
    if isinstance(want, str):
        return isinstance(got, str) and _norm(got) == _norm(want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    return got == want


def _rows(state: dict, table: str) -> dict[Any, Any]:
    app, name = table.split(".")
    key = TABLES[table]
    rows = state.get(app, {}).get(name, [])
    return {row if key is None else row[key]: row for row in rows}


def _at(state: dict, path: str) -> Any:
    for part in path.split("."):
        state = state.get(part) if isinstance(state, dict) else None
    return state


def _added(check: dict, initial: dict, final: dict, claims: Claims) -> bool:
    table = check["table"]
    before = _rows(initial, table)
    for key, row in _rows(final, table).items():
        if key in before or ("add", table, key) in claims:
            continue
        if all(same(row.get(field), want) for field, want in check["match"].items()):
            claims.add(("add", table, key))
            return True
    return False


def _removed(check: dict, initial: dict, final: dict, claims: Claims) -> bool:
    table, key = check["table"], check["key"]
    claims.add(("remove", table, key))
    return key in _rows(initial, table) and key not in _rows(final, table)


def _field(check: dict, initial: dict, final: dict, claims: Claims) -> bool:
    table, key, field = check["table"], check["key"], check["field"]
    claims.add(("field", table, key, field))
    row = _rows(final, table).get(key)
    return row is not None and same(row.get(field), check["equals"])


def _contains(check: dict, initial: dict, final: dict, claims: Claims) -> bool:
    table, key, field = check["table"], check["key"], check["field"]
    claims.add(("field", table, key, field))
    row = _rows(final, table).get(key)
    items = row.get(field) if row is not None else None
    return isinstance(items, list) and any(same(item, check["item"]) for item in items)


def _value(check: dict, initial: dict, final: dict, claims: Claims) -> bool:
    claims.add(("path", check["path"]))
    return same(_at(final, check["path"]), check["equals"])


STATE_CHECKS: dict[str, Callable[[dict, dict, dict, Claims], bool]] = {
    "added": _added,
    "removed": _removed,
    "field": _field,
    "contains": _contains,
    "value": _value,
}


# The fields each kind of check reads: a check without them failed only at complete_task, after the episode.
FIELDS: dict[str, tuple[str, ...]] = {
    "added": ("table", "match"),
    "removed": ("table", "key"),
    "field": ("table", "key", "field", "equals"),
    "contains": ("table", "key", "field", "item"),
    "value": ("path", "equals"),
    "answer": ("equals",),
    "completed": (),
    "no_collateral": (),
}


class Check(Hidden):
    """One of a task's checks: a known kind, a text, and the fields of its kind, typed as they are read."""

    kind: str
    text: str

    @model_validator(mode="after")
    def _fields(self) -> Check:
        if self.kind not in FIELDS:
            raise ValueError(f"unknown check kind {self.kind!r}; the kinds are {', '.join(FIELDS)}")
        extra = self.model_extra or {}
        if missing := [f for f in FIELDS[self.kind] if f not in extra]:
            raise ValueError(f"a {self.kind} check needs {', '.join(missing)}")
        if "table" in extra and extra["table"] not in TABLES:
            raise ValueError(f"table {extra['table']!r} is not one of {', '.join(TABLES)}")
        if "key" in extra and (not isinstance(extra["key"], (str, int)) or isinstance(extra["key"], bool)):
            raise ValueError("a check's key is a string or an integer (a record's id)")
        if "match" in extra and not isinstance(extra["match"], dict):
            raise ValueError("an added check's match is an object of field: value")
        for name in ("field", "path"):
            if name in extra and not isinstance(extra[name], str):
                raise ValueError(f"a check's {name} is a string")
        return self


def same_answer(answer: Any, want: Any) -> bool:
    """The answer matches: a number also when given as a string ("$54.00"), a string loosely."""
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        number = _number(answer)
        return number is not None and abs(number - want) <= TOLERANCE
    return same(answer, want)


def damage(initial: dict, final: dict, claims: Claims) -> list[str]:
    """Every difference between the states that no claim covers, as short descriptions."""
    found = []
    for app in sorted(set(initial) | set(final)):
        a, b = initial.get(app), final.get(app)
        if not (isinstance(a, dict) and isinstance(b, dict)):
            if a != b and ("path", app) not in claims:
                found.append(f"{app} changed")
            continue
        for name in sorted(set(a) | set(b)):
            path = f"{app}.{name}"
            if path not in TABLES:
                if a.get(name) != b.get(name) and ("path", path) not in claims:
                    found.append(f"{path} changed")
                continue
            before, after = _rows(initial, path), _rows(final, path)
            for key in after.keys() - before.keys():
                if ("add", path, key) not in claims:
                    found.append(f"{path} {key} added")
            for key in before.keys() - after.keys():
                if ("remove", path, key) not in claims:
                    found.append(f"{path} {key} removed")
            for key in before.keys() & after.keys():
                old, new = before[key], after[key]
                if old == new or not isinstance(old, dict):
                    continue
                for field in sorted(set(old) | set(new)):
                    if old.get(field) != new.get(field) and ("field", path, key, field) not in claims:
                        found.append(f"{path} {key} {field} changed")
    return found


def run_checks(
    hidden: dict, initial: dict, final: dict, answer: Any, completed: bool
) -> list[tuple[str, bool]]:
    """The task's unit tests, in order, as (one-line description, passed). Reward = fraction passed."""
    claims: Claims = set()
    results: list[tuple[str, bool] | None] = []
    for check in hidden["checks"]:
        kind = check["kind"]
        if kind in STATE_CHECKS:
            results.append((check["text"], STATE_CHECKS[kind](check, initial, final, claims)))
        elif kind == "answer":
            results.append((check["text"], completed and same_answer(answer, check["equals"])))
        elif kind == "completed":
            results.append((check["text"], bool(completed)))
        elif kind == "no_collateral":
            results.append(None)  # judged once every claim is known
        else:
            raise ValueError(f"unknown check kind {kind!r}")
    clean = not damage(initial, final, claims)
    texts = [c["text"] for c in hidden["checks"]]
    return [r if r is not None else (texts[i], clean) for i, r in enumerate(results)]
