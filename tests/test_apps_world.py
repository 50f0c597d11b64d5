"""The apps world (gymflow.envs.apps, without the sandbox): seeded generation, every API's documented errors,
hostile input to World.call, the docs, and each template's gold program against its checks."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from gymflow.envs.apps import api as A
from gymflow.envs.apps.api import APPS, BAD_ARGS, LIMIT, MAX_CALLS, ApiError, World, access_token
from gymflow.envs.apps.checks import run_checks, same, same_answer
from gymflow.envs.apps.scenarios import LEVELS, TEMPLATES, VARIANTS, make_task, scenario_tasks
from gymflow.envs.apps.world import NOW, build_world

SEED = 11
ALL_APIS = [(app, name) for app, spec in APPS.items() for name in spec.apis]


# ---- test-only: run code cells in-process, `apis.<app>.<api>(...)` going through World.call as JSON --------
class _App:
    def __init__(self, world: World, app: str) -> None:
        self._world, self._app = world, app

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = self._world.call(
                self._app, name, json.loads(json.dumps(args)), json.loads(json.dumps(kwargs))
            )
            self._world.sizes.append(len(repr(result)))  # type: ignore[attr-defined]
            return result

        return call


class _Apis:
    def __init__(self, world: World) -> None:
        self._world = world

    def __getattr__(self, app: str) -> _App:
        return _App(self._world, app)


def run_cells(hidden: dict, codes: list[str]) -> tuple[list[tuple[str, bool]], World, list[str]]:
    """Run `codes` in one namespace on the task's world: (check results, world, what each cell printed)."""
    initial = build_world(hidden["world_seed"])
    world = World(initial)
    world.sizes = []  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"apis": _Apis(world)}
    printed = []
    for code in codes:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
        printed.append(out.getvalue())
    return run_checks(hidden, initial, world.state, world.answer, world.completed), world, printed


def gold(hidden: dict) -> list[str]:
    return [cell["code"] for cell in hidden["gold"]]


def token(world: World, app: str) -> str:
    return access_token(world.state, app)


# ---- generation ----------------------------------------------------------------------------------------
@pytest.mark.slow  # a Python process
def test_build_world_is_plain_data_deterministic_and_seeded():
    state = build_world(SEED)
    assert state == build_world(SEED)
    assert json.loads(json.dumps(state)) == state  # plain JSON data
    assert state != build_world(SEED + 1)
    assert len({json.dumps(build_world(s), sort_keys=True) for s in range(10)}) == 10
    # the same in another process, whose str hashes are salted differently
    code = "import json; from gymflow.envs.apps.world import build_world; print(json.dumps(build_world(11), sort_keys=True))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "77"}
    )
    assert json.loads(other.stdout) == state
    contacts = state["phone"]["contacts"]
    assert len({c["first_name"] for c in contacts}) == len(contacts)  # "my roommate Kristin" names one person
    assert len({c["phone_number"] for c in contacts}) == len(contacts)
    owed = [m for m in state["phone"]["messages"] if "owe" in m["message"]]
    assert len(owed) == 3 and len({m["sender"] for m in owed}) == 3


def test_world_keeps_its_own_copy_and_login_changes_nothing():
    state = build_world(SEED)
    world = World(state)
    world.call("phone", "login", [state["user"]["phone_number"], state["passwords"]["phone"]], {})
    assert world.state == state
    notes = world.call("simple_note", "search_notes", [token(world, "simple_note")], {})
    notes[0]["title"] = "changed by the caller"
    world.call("simple_note", "delete_note", [], {"access_token": token(world, "simple_note"), "note_id": 1})
    assert state == build_world(SEED)  # the caller's dict never changes
    assert all(n["title"] != "changed by the caller" for n in world.state["simple_note"]["notes"])
    with pytest.raises(
        ApiError, match="^401 venmo.show_account: access token"
    ):  # a token is for its app only
        world.call("venmo", "show_account", [token(world, "phone")], {})


def test_scenario_tasks_variants_splits_levels():
    first = [t for _, t in zip(range(30), scenario_tasks("train", 0), strict=False)]
    assert first == [t for _, t in zip(range(30), scenario_tasks("train", 0), strict=False)]
    assert first != [t for _, t in zip(range(30), scenario_tasks("train", 1), strict=False)]
    for i in range(0, 30, VARIANTS):
        group = first[i : i + VARIANTS]
        assert len({tid.rsplit("_", 1)[0] for tid, *_ in group}) == 1 and [
            tid.rsplit("_", 1)[1] for tid, *_ in group
        ] == ["1", "2", "3"]
        assert len({level for _, level, *_ in group}) == 1
        assert len({seed for _, _, seed, *_ in group}) == VARIANTS  # each variant has its own world
        assert all(hidden["scenario"] == tid.rsplit("_", 1)[0] for tid, *_, hidden in group)
    ids = {
        split: [t[0] for _, t in zip(range(300), scenario_tasks(split, 0), strict=False)]
        for split in ("train", "eval")
    }
    scenario = {split: {tid.rsplit("_", 1)[0] for tid in tids} for split, tids in ids.items()}
    assert not scenario["train"] & scenario["eval"]
    levels = {t[1] for _, t in zip(range(300), scenario_tasks("eval", 0), strict=False)}
    assert levels == set(LEVELS)
    with pytest.raises(ValueError, match="splits"):
        next(scenario_tasks("test", 0))


# ---- documented errors ---------------------------------------------------------------------------------
def _pending_received(w: World) -> int:
    me = w.state["user"]["email"]
    return next(
        r["payment_request_id"]
        for r in w.state["venmo"]["payment_requests"]
        if r["receiver"] == me and r["approved_at"] is None
    )


def _sent(w: World, approved: bool) -> int:
    me = w.state["user"]["email"]
    request = next(r for r in w.state["venmo"]["payment_requests"] if r["sender"] == me)
    request["approved_at"] = NOW if approved else None  # setup through the state: no API approves your own
    return request["payment_request_id"]


def _feed_id(w: World, liked: bool) -> int:
    t = w.call("venmo", "show_social_feed", [token(w, "venmo")], {})[0]
    if t["liked"] != liked:
        w.call(
            "venmo",
            "like_transaction" if liked else "unlike_transaction",
            [token(w, "venmo"), t["transaction_id"]],
            {},
        )
    return t["transaction_id"]


def _broke(w: World) -> dict:
    w.state["venmo"]["balance"] = 0.0
    return {"payment_request_id": _pending_received(w)}


def _completed(w: World) -> dict:
    w.call("supervisor", "complete_task", [], {})
    return {}


NEW = {"first_name": "Ann", "last_name": "Lee", "phone_number": "2025550123"}
FILE = "~/documents/new.txt"
# (app, api, documented error) -> the arguments that trigger it (access_token filled in when absent); setup may
# call APIs or edit the state. TOKEN, BAD_ARGS and LIMIT are triggered for every API by `_generic`.
TRIGGERS: dict[tuple[str, str, str], Callable[[World], dict]] = {
    ("supervisor", "complete_task", A.DONE): _completed,
    ("api_docs", "show_api_descriptions", A.NO_APP): lambda w: {"app_name": "mail"},
    ("api_docs", "show_api_doc", A.NO_APP): lambda w: {"app_name": "mail", "api_name": "login"},
    ("api_docs", "show_api_doc", A.NO_API): lambda w: {"app_name": "phone", "api_name": "show_account"},
    ("phone", "add_contact", A.EMPTY_NAME): lambda w: {**NEW, "first_name": "  "},
    ("phone", "add_contact", A.BAD_PHONE): lambda w: {**NEW, "phone_number": "555-0123"},
    ("phone", "add_contact", A.BAD_RELATION): lambda w: {**NEW, "relationship": "boss"},
    ("phone", "add_contact", A.PHONE_TAKEN): lambda w: {
        **NEW,
        "phone_number": w.state["phone"]["contacts"][0]["phone_number"],
    },
    ("phone", "send_text_message", A.BAD_PHONE): lambda w: {"phone_number": "12345", "message": "hi"},
    ("phone", "send_text_message", A.EMPTY_MESSAGE): lambda w: {
        "phone_number": "2025550123",
        "message": " \n",
    },
    ("phone", "delete_text_message", A.NO_MESSAGE): lambda w: {"message_id": 99_999},
    ("venmo", "show_transactions", A.BAD_DIRECTION): lambda w: {"direction": "up"},
    ("venmo", "create_transaction", A.NO_USER): lambda w: {"receiver_email": "nobody@x.com", "amount": 5},
    ("venmo", "create_transaction", A.SELF): lambda w: {
        "receiver_email": w.state["user"]["email"],
        "amount": 5,
    },
    ("venmo", "create_transaction", A.BAD_AMOUNT): lambda w: {
        "receiver_email": w.state["venmo"]["friends"][0],
        "amount": 1.005,
    },
    ("venmo", "create_transaction", A.BROKE): lambda w: {
        "receiver_email": w.state["venmo"]["friends"][0],
        "amount": 1e8,
    },
    ("venmo", "like_transaction", A.NO_TRANSACTION): lambda w: {"transaction_id": 99_999},
    ("venmo", "like_transaction", A.LIKED): lambda w: {"transaction_id": _feed_id(w, liked=True)},
    ("venmo", "unlike_transaction", A.NO_TRANSACTION): lambda w: {"transaction_id": 0},
    ("venmo", "unlike_transaction", A.NOT_LIKED): lambda w: {"transaction_id": _feed_id(w, liked=False)},
    ("venmo", "show_received_payment_requests", A.BAD_STATUS): lambda w: {"status": "open"},
    ("venmo", "show_sent_payment_requests", A.BAD_STATUS): lambda w: {"status": "Pending"},
    ("venmo", "create_payment_request", A.NO_USER): lambda w: {"user_email": "nobody@x.com", "amount": 5},
    ("venmo", "create_payment_request", A.SELF): lambda w: {
        "user_email": w.state["user"]["email"],
        "amount": 5,
    },
    ("venmo", "create_payment_request", A.BAD_AMOUNT): lambda w: {
        "user_email": w.state["venmo"]["friends"][0],
        "amount": -5,
    },
    ("venmo", "approve_payment_request", A.NO_RECEIVED): lambda w: {
        "payment_request_id": _sent(w, approved=False)
    },
    ("venmo", "approve_payment_request", A.APPROVED): lambda w: {
        "payment_request_id": w.call(
            "venmo", "show_received_payment_requests", [token(w, "venmo"), "approved"], {}
        )[0]["payment_request_id"]
    },
    ("venmo", "approve_payment_request", A.BROKE): _broke,
    ("venmo", "remind_payment_request", A.NO_SENT): lambda w: {"payment_request_id": _pending_received(w)},
    ("venmo", "remind_payment_request", A.APPROVED): lambda w: {
        "payment_request_id": _sent(w, approved=True)
    },
    ("simple_note", "show_note", A.NO_NOTE): lambda w: {"note_id": 99},
    ("simple_note", "create_note", A.EMPTY_TITLE): lambda w: {"title": ""},
    ("simple_note", "update_note", A.NO_NOTE): lambda w: {"note_id": 99, "title": "x"},
    ("simple_note", "update_note", A.EMPTY_TITLE): lambda w: {"note_id": 1, "title": "  "},
    ("simple_note", "update_note", A.NOTHING): lambda w: {"note_id": 1},
    ("simple_note", "delete_note", A.NO_NOTE): lambda w: {"note_id": -1},
    ("file_system", "show_directory", A.BAD_DIR): lambda w: {"directory_path": "bills"},
    ("file_system", "show_directory", A.NO_DIR): lambda w: {"directory_path": "~/music/"},
    ("file_system", "show_file", A.BAD_FILE): lambda w: {"file_path": "~/documents/"},
    ("file_system", "show_file", A.NO_FILE): lambda w: {"file_path": FILE},
    ("file_system", "create_file", A.BAD_FILE): lambda w: {"file_path": "/etc/passwd"},
    ("file_system", "create_file", A.EXISTS): lambda w: {
        "file_path": w.state["file_system"]["files"][0]["path"]
    },
    ("file_system", "delete_file", A.BAD_FILE): lambda w: {"file_path": "~/../x.txt"},
    ("file_system", "delete_file", A.NO_FILE): lambda w: {"file_path": FILE},
}
for _app in ("phone", "venmo", "simple_note", "file_system"):
    TRIGGERS[(_app, "login", A.CREDENTIALS)] = lambda w, app=_app: {
        "username": A.username(w.state, app),
        "password": w.state["passwords"][app] + "x",
    }


def _plausible(param: A.Param, world: World, app: str) -> Any:
    """A well-typed value for a parameter (the right token for access_token)."""
    if param.name == "access_token":
        return token(world, app)
    return {"string": "x", "integer": 1, "number": 1.0, "boolean": True, "list[string]": ["x"], "any": None}[
        param.type
    ]


def _generic(app: str, name: str, error: str) -> Callable[[World], dict] | None:
    spec = APPS[app].apis[name]
    required = {p.name: p for p in spec.params if p.required}
    if error == A.TOKEN:
        return lambda w: {
            n: "bad-token" if n == "access_token" else _plausible(p, w, app) for n, p in required.items()
        }
    if error == BAD_ARGS:
        return lambda w: {**{n: _plausible(p, w, app) for n, p in required.items()}, "page_limit": 20}
    if error == LIMIT:
        return lambda w: (
            setattr(w, "calls", MAX_CALLS),
            {n: _plausible(p, w, app) for n, p in required.items()},
        )[1]
    return None


def test_every_documented_error_is_raised_as_documented():
    documented = {(app, name, error) for app, name in ALL_APIS for error in APPS[app].apis[name].errors}
    assert set(TRIGGERS) <= documented, f"triggers for undocumented errors: {set(TRIGGERS) - documented}"
    for app, name, error in sorted(documented):
        trigger = TRIGGERS.get((app, name, error)) or _generic(app, name, error)
        assert trigger is not None, f"no test triggers {app}.{name}'s documented error {error!r}"
        world = World(build_world(SEED))
        kwargs = trigger(world)
        params = [p.name for p in APPS[app].apis[name].params]
        if "access_token" in params and "access_token" not in kwargs:
            kwargs["access_token"] = token(world, app)
        with pytest.raises(ApiError) as caught:
            world.call(app, name, [], kwargs)
        code, text = error.split(" ", 1)
        assert caught.value.error == error, (app, name, str(caught.value))
        assert str(caught.value).startswith(f"{code} {app}.{name}: {text}")


def test_errors_raised_are_documented_and_calls_fail_atomically():
    """A failing call changes nothing (checked where a partial change could happen: payments)."""
    world = World(build_world(SEED))
    before = json.dumps(world.state, sort_keys=True)
    friend = world.state["venmo"]["friends"][0]
    for amount in (0, -1, 1e8, 2.999):
        with pytest.raises(ApiError) as caught:
            world.call("venmo", "create_transaction", [token(world, "venmo"), friend, amount], {})
        assert caught.value.error in APPS["venmo"].apis["create_transaction"].errors
    assert json.dumps(world.state, sort_keys=True) == before


# ---- hostile input -------------------------------------------------------------------------------------
def _deep(levels: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


JUNK = [None, True, -1, 1.5, 10**400, float("nan"), float("inf"), "", "x" * 100_000, _deep(100_000),
        {"$gt": ""}, ["a", 1], [], (1, 2), {1, 2}, b"bytes"]  # fmt: skip


def test_hostile_calls_raise_api_error_only():
    world = World(build_world(SEED))
    phone = world.state["user"]["phone_number"]
    calls = [
        (None, "login", [], {}),
        ("phone", None, [], {}),
        (5, 5, [], {}),
        ("x" * 1_000_000, "y" * 1_000_000, [], {}),
        ("phone", "__init__", [], {}),
        ("__class__", "__dict__", [], {}),
        ("phone", "login", "not a list", {}),
        ("phone", "login", [], ["not", "a", "dict"]),
        ("phone", "login", [], {1: "non-str key"}),
        ("phone", "login", [phone, "pw", "extra"], {}),
        ("phone", "login", [phone], {"username": phone, "password": "pw"}),
        ("phone", "login", [], {"username": phone}),
        ("phone", "login", [], {"username": phone, "password": "pw", "remember": True}),
        ("phone", "login", [], {"username": _deep(100_000), "password": {"a": _deep(1000)}}),
        ("phone", "send_text_message", [token(world, "phone"), phone, "x" * 10**6], {}),
        ("venmo", "show_social_feed", [token(world, "venmo")], {"page_index": -1}),
        ("venmo", "show_social_feed", [token(world, "venmo")], {"page_index": 10**30}),
        ("venmo", "like_transaction", [token(world, "venmo"), True], {}),
        ("simple_note", "create_note", [token(world, "simple_note"), "t", "c", ["x" * 101]], {}),
        ("simple_note", "create_note", [token(world, "simple_note"), "t", "c", ["x"] * 21], {}),
        ("supervisor", "complete_task", [], {"answer": {"a": 1}}),
    ]
    for app, name, args, kwargs in calls:
        with pytest.raises(ApiError) as caught:
            world.call(app, name, args, kwargs)
        message = str(caught.value)
        assert len(message) < 400 and not message.startswith("500"), message
    assert world.calls == len(calls)
    assert not world.completed
    assert world.call("venmo", "show_social_feed", [token(world, "venmo")], {"page_index": 999}) == []


def test_every_parameter_of_every_api_survives_junk():
    for app, name in ALL_APIS:
        spec = APPS[app].apis[name]
        for target in spec.params:
            for junk in JUNK:
                world = World(build_world(SEED))
                kwargs = {p.name: _plausible(p, world, app) for p in spec.params if p.required}
                kwargs[target.name] = junk
                try:
                    result = world.call(app, name, [], kwargs)
                except ApiError as e:
                    assert e.error in spec.errors and not str(e).startswith("500"), (
                        app,
                        name,
                        target.name,
                        str(e),
                    )
                    continue
                assert len(json.dumps(result)) < 10_000, (app, name, target.name)


# ---- docs ----------------------------------------------------------------------------------------------
def test_docs_list_every_parameter_and_error():
    world = World(build_world(SEED))
    apps = world.call("api_docs", "show_app_descriptions", [], {})
    assert [a["name"] for a in apps] == list(APPS)
    for app, spec in APPS.items():
        listed = world.call("api_docs", "show_api_descriptions", [], {"app_name": app})
        assert [a["name"] for a in listed] == list(spec.apis)
        for name, api_spec in spec.apis.items():
            doc = world.call("api_docs", "show_api_doc", [app, name], {})
            signature = list(inspect.signature(api_spec.fn).parameters.values())[1:]  # after the world
            assert [p["name"] for p in doc["parameters"]] == [p.name for p in signature], (app, name)
            for documented, actual in zip(doc["parameters"], signature, strict=True):
                required = actual.default is inspect.Parameter.empty
                assert documented["required"] == required
                assert documented["default"] == (None if required else actual.default)
                assert set(documented) == {"name", "type", "required", "default", "description"}
            assert doc["errors"] == list(api_spec.errors) and doc["errors"][-2:] == [BAD_ARGS, LIMIT]
            assert len(json.dumps(doc)) < 1_500, (app, name)  # the small model reads these
    assert 30 <= len(ALL_APIS) <= 40


# ---- checks --------------------------------------------------------------------------------------------
def test_check_matching_is_loose_where_harmless():
    assert same_answer("$1,054.00", 1054) and same_answer(54.004, 54) and not same_answer("54 dollars", 54)
    assert not same_answer(True, 1) and not same_answer(None, 0)
    assert same("  it IS   done. ", "It is done.") and not same("It is done", "It is done.")
    assert same("Maya\n\nJason\n", {"lines": ["jason", "Maya"]}) and not same(
        "Maya", {"lines": ["Maya", "Jason"]}
    )
    assert same(12.001, 12) and not same("12", 12)


# ---- templates: gold passes, a no-op fails, collateral damage is caught -------------------------------
EXTRA = {
    "a text to someone else": 'apis.phone.send_text_message(access_token=apis.phone.login(username=profile["phone_number"], '
    'password=passwords["phone"])["access_token"], phone_number="2025550199", message="hi")',
    "deleting a note": 'apis.simple_note.delete_note(access_token=apis.simple_note.login(username=profile["email"], '
    'password=passwords["simple_note"])["access_token"], note_id=1)',
}


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_gold_passes_noop_fails_and_collateral_is_caught(template):
    sizes = []
    for scenario in (0, 1):
        for variant in range(1, VARIANTS + 1):
            task_id, level, seed, instruction, hidden = make_task(template, scenario, variant)
            assert task_id == f"{hidden['scenario']}_{variant}" and level == TEMPLATES[template][0]
            assert json.loads(json.dumps(hidden)) == hidden and hidden["world_seed"] == seed
            codes = gold(hidden)
            assert 3 <= len(codes) <= 8 and all(len(code) <= 300 for code in codes)
            assert "complete_task" in codes[-1] and all("complete_task" not in code for code in codes[:-1])
            results, world, printed = run_cells(hidden, codes)
            assert all(ok for _, ok in results), (task_id, instruction, results)
            assert world.answer == hidden["answer"] or same_answer(world.answer, hidden["answer"])
            sizes += world.sizes  # type: ignore[attr-defined]
            assert max(len(p) for p in printed) < 1_500

            noop, _, _ = run_cells(hidden, ["apis.supervisor.complete_task()"])
            assert not all(ok for _, ok in noop), task_id
            assert noop[-1] == ("nothing else changed in any app", True)  # a no-op damages nothing

            for what, extra in EXTRA.items():
                damaged, _, _ = run_cells(hidden, [*codes[:-1], extra, codes[-1]])
                failed = [text for text, ok in damaged if not ok]
                assert failed == ["nothing else changed in any app"], (task_id, what, failed)
    assert max(sizes) < 5_000
