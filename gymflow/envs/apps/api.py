"""The apps' APIs, their documentation (`APPS`, the registry) and `World`, the one door API calls go through.

    world = World(build_world(seed))  # keeps its own copy of the state (`world.py`); it changes as APIs are called
    world.call("phone", "login", [], {"username": "3383946795", "password": "..."})  # -> {"access_token": ...}

Each API is a function `fn(world, **arguments)` registered with `@api(app, name, description, returns,
errors, **parameters)`: its parameters' types and descriptions (the defaults come from the function), and the
errors it raises (`Fail(error)`). The documentation the agent reads (`api_docs.show_api_doc`) is made from the
same registration, so what is documented is what `World.call` binds and checks, and every API also lists the
two errors any call can raise (BAD_ARGS, LIMIT). Descriptions are a few words: the agent's model is small.

Logging in changes no state: an access token is a digest of (app, username, password), so the same login gives
the same token, and a token is good for its app only.

`World.call` takes (app, api, args, kwargs) as JSON data from the agent's interpreter, so it treats them as
hostile: it binds and type-checks them against the API's documented parameters (`APPS`) and answers anything
wrong, and any failure inside an API, with ApiError, never another exception.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymflow.envs.apps.world import NOW, RELATIONSHIPS

PAGE = 10  # items per page of every list API
MAX_CALLS = 2_000  # API calls per task; later ones fail (a careful gold program makes about 10-20)
MAX_STRING = 2_000  # longest text argument (a message, a note's or a file's content, an answer)
SHORT_STRING = 200  # longest other string argument (names, titles, paths, queries), so results stay small
MAX_LIST = 20  # longest list argument (a note's tags), each item at most TAG_CHARS
TAG_CHARS = 100
MAX_NUMBER = 1e9  # larger numbers (or NaN, infinity) are bad arguments
ECHO = 40  # how much of an unknown name an error quotes

# Documented errors, "<code> <text>"; an API's docs list those it can raise.
TOKEN = "401 access token missing, invalid or expired"
CREDENTIALS = "401 wrong username or password"
DONE = "409 task already completed"
NO_APP = "404 no app with this app_name"
NO_API = "404 no API with this api_name in the app"
BAD_PHONE = "422 phone_number must be 10 digits"
EMPTY_NAME = "422 first_name is empty"
BAD_RELATION = "422 unknown relationship"
PHONE_TAKEN = "409 a contact already has this phone_number"
EMPTY_MESSAGE = "422 message is empty"
NO_MESSAGE = "404 no text message with this message_id"
BAD_DIRECTION = "422 direction must be 'sent' or 'received'"
BAD_STATUS = "422 status must be 'pending' or 'approved'"
NO_USER = "404 no user with this email"
SELF = "422 that email is yours"
BAD_AMOUNT = "422 amount must be positive, with at most 2 decimals"
BROKE = "400 insufficient balance"
NO_TRANSACTION = "404 no transaction you can see with this transaction_id"
LIKED = "409 already liked"
NOT_LIKED = "409 not liked"
NO_RECEIVED = "404 no payment request to you with this payment_request_id"
NO_SENT = "404 no payment request from you with this payment_request_id"
APPROVED = "409 payment request already approved"
NO_NOTE = "404 no note with this note_id"
EMPTY_TITLE = "422 title is empty"
NOTHING = "422 nothing to update"
BAD_DIR = "422 directory_path must start with ~/ and end with /"
NO_DIR = "404 no such directory"
BAD_FILE = "422 file_path must start with ~/ and not end with /"
NO_FILE = "404 no such file"
EXISTS = "409 file already exists"


BAD_ARGS = "422 bad arguments"  # every API may raise these two, so every API's docs list them
LIMIT = f"429 more than {MAX_CALLS} API calls in this task"


class ApiError(Exception):
    """What an API raises for a documented error or a misuse; str(e) is the one-line message the agent sees,
    '<code> <app>.<api>: <documented error>[; detail]'. `error` is the documented error, e.g.
    '401 access token missing, invalid or expired' ("" for an unknown app or API)."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


class Fail(Exception):
    """What an API function raises: one of its documented errors (`error`, "<code> <text>") and a detail;
    `World.call` turns it into the ApiError the agent sees."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(error)
        self.error, self.detail = error, detail


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # string, integer, number, boolean, list[string], any (see _typed)
    description: str
    required: bool
    default: Any
    max_chars: int = SHORT_STRING  # for strings: MAX_STRING for texts, SHORT_STRING for the rest


@dataclass(frozen=True)
class ApiSpec:
    name: str
    description: str
    returns: str
    params: tuple[Param, ...]
    errors: tuple[str, ...]  # documented errors, "<code> <text>", the generic BAD_ARGS and LIMIT last
    fn: Callable[..., Any]


@dataclass
class AppSpec:
    name: str
    description: str
    apis: dict[str, ApiSpec] = field(default_factory=dict)


APPS: dict[str, AppSpec] = {
    app: AppSpec(app, description)
    for app, description in (
        ("supervisor", "Your profile, your app passwords, and complete_task. No login."),
        ("api_docs", "Documentation of the apps' APIs. No login."),
        ("phone", "Contacts and text messages. Log in with your phone number."),
        ("venmo", "Payments, friends, social feed and payment requests. Log in with your email."),
        ("simple_note", "Notes. Log in with your email."),
        ("file_system", "Your files under ~/. Log in with your email."),
    )
}


def api(
    app: str, name: str, description: str, returns: str, errors: tuple[str, ...] = (), /, **params: tuple
):
    """Register `fn` as `apis.<app>.<name>`; `params` maps each parameter to (type, description), in order, or
    (type, description, max_chars) for a long text."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn).parameters
        specs = []
        for pname, (ptype, pdescription, *chars) in params.items():
            default = signature[pname].default
            required = default is inspect.Parameter.empty
            specs.append(Param(pname, ptype, pdescription, required, None if required else default, *chars))
        spec = ApiSpec(name, description, returns, tuple(specs), (*errors, BAD_ARGS, LIMIT), fn)
        APPS[app].apis[name] = spec
        return fn

    return register


def doc(app: str, name: str) -> dict[str, Any]:
    """What show_api_doc prints for one API."""
    spec = APPS[app].apis[name]
    return {
        "app_name": app,
        "api_name": name,
        "description": spec.description,
        "parameters": [
            {
                "name": p.name,
                "type": p.type,
                "required": p.required,
                "default": p.default,
                "description": p.description,
            }
            for p in spec.params
        ],  # fmt: skip
        "returns": spec.returns,
        "errors": list(spec.errors),
    }


# ---- shared helpers ------------------------------------------------------------------------------------
TOKEN_P = ("string", "From login.")
PAGE_P = ("integer", f"Page, from 0; {PAGE} items per page.")
LOGIN_RETURNS = "{access_token, token_type}"


def username(state: dict, app: str) -> str:
    return state["user"]["phone_number" if app == "phone" else "email"]


def access_token(state: dict, app: str) -> str:
    """The token login gives for `app`: a digest, never stored, so logging in changes nothing."""
    key = f"{app}|{username(state, app)}|{state['passwords'][app]}"
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _login(w: World, app: str, user: str, password: str) -> dict[str, str]:
    if user != username(w.state, app) or password != w.state["passwords"][app]:
        raise Fail(CREDENTIALS, "passwords are in apis.supervisor.show_account_passwords()")
    return {"access_token": access_token(w.state, app), "token_type": "Bearer"}


def _auth(w: World, app: str, token: str) -> None:
    if token != access_token(w.state, app):
        raise Fail(TOKEN, f"get one with apis.{app}.login")


def _page(rows: list, page_index: int) -> list:
    if page_index < 0:
        raise Fail(BAD_ARGS, "page_index must be 0 or more")
    return rows[page_index * PAGE : (page_index + 1) * PAGE]


def _has(text: str, query: str) -> bool:
    return query.casefold().strip() in text.casefold()


def _next_id(rows: list[dict], key: str) -> int:
    return max((row[key] for row in rows), default=0) + 1


def _newest(rows: list[dict], when: str, key: str) -> list[dict]:
    return sorted(rows, key=lambda row: (row[when], row[key]), reverse=True)


def _phone_ok(number: str) -> bool:
    return re.fullmatch(r"[0-9]{10}", number) is not None


def _amount_ok(amount: float) -> bool:
    return amount > 0 and abs(amount * 100 - round(amount * 100)) < 1e-6


# ---- supervisor ----------------------------------------------------------------------------------------
@api(
    "supervisor",
    "show_profile",
    "Your name, email and phone number.",
    "{first_name, last_name, email, phone_number}",
)
def supervisor_show_profile(w: World) -> dict:
    return dict(w.state["user"])


@api("supervisor", "show_account_passwords", "Your app passwords.", "[{account_name, password}]")
def supervisor_show_account_passwords(w: World) -> list:
    return [{"account_name": app, "password": pw} for app, pw in w.state["passwords"].items()]


@api(
    "supervisor", "complete_task", "Mark the task done; give answer= if it asks a question.", "{message}",
    (DONE,), answer=("any", "The answer (string or number), or None.", MAX_STRING),
)  # fmt: skip
def supervisor_complete_task(w: World, answer: Any = None) -> dict:
    if w.completed:
        raise Fail(DONE)
    w.answer, w.completed = answer, True
    return {"message": "Task marked complete."}


# ---- api_docs ------------------------------------------------------------------------------------------
@api("api_docs", "show_app_descriptions", "List the apps.", "[{name, description}]")
def docs_show_app_descriptions(w: World) -> list:
    return [{"name": app.name, "description": app.description} for app in APPS.values()]


@api(
    "api_docs", "show_api_descriptions", "List an app's APIs.", "[{name, description}]", (NO_APP,),
    app_name=("string", "The app."),
)  # fmt: skip
def docs_show_api_descriptions(w: World, app_name: str) -> list:
    if app_name not in APPS:
        raise Fail(NO_APP, f"apps: {', '.join(APPS)}")
    return [{"name": s.name, "description": s.description} for s in APPS[app_name].apis.values()]


@api(
    "api_docs", "show_api_doc", "Show how to call one API.",
    "{app_name, api_name, description, parameters, returns, errors}", (NO_APP, NO_API),
    app_name=("string", "The app."), api_name=("string", "The API."),
)  # fmt: skip
def docs_show_api_doc(w: World, app_name: str, api_name: str) -> dict:
    if app_name not in APPS:
        raise Fail(NO_APP, f"apps: {', '.join(APPS)}")
    if api_name not in APPS[app_name].apis:
        raise Fail(NO_API, f"apis.api_docs.show_api_descriptions(app_name={app_name!r}) lists them")
    return doc(app_name, api_name)


# ---- phone ---------------------------------------------------------------------------------------------
@api(
    "phone", "login", "Log in; gives an access token.", LOGIN_RETURNS, (CREDENTIALS,),
    username=("string", "Your phone number."), password=("string", "Your phone password."),
)  # fmt: skip
def phone_login(w: World, username: str, password: str) -> dict:
    return _login(w, "phone", username, password)


@api(
    "phone", "search_contacts", "Find contacts by name, email or phone number, and relationship.",
    "[{contact_id, first_name, last_name, email, phone_number, relationships}]", (TOKEN,),
    access_token=TOKEN_P, query=("string", "Text to match; empty for all."),
    relationship=("string", "Only contacts with this relationship, e.g. roommate."), page_index=PAGE_P,
)  # fmt: skip
def phone_search_contacts(
    w: World, access_token: str, query: str = "", relationship: str | None = None, page_index: int = 0
) -> list:
    _auth(w, "phone", access_token)
    found = []
    for c in w.state["phone"]["contacts"]:
        text = f"{c['first_name']} {c['last_name']} {c['email'] or ''} {c['phone_number']}"
        if _has(text, query) and (relationship is None or relationship.strip().lower() in c["relationships"]):
            found.append(c)
    return _page(found, page_index)


@api(
    "phone", "show_contact_relationships", "List the relationships contacts can have.", "[string]", (TOKEN,),
    access_token=TOKEN_P,
)  # fmt: skip
def phone_show_contact_relationships(w: World, access_token: str) -> list:
    _auth(w, "phone", access_token)
    return list(RELATIONSHIPS)


@api(
    "phone", "add_contact", "Add a contact.", "{contact_id}",
    (TOKEN, EMPTY_NAME, BAD_PHONE, BAD_RELATION, PHONE_TAKEN),
    access_token=TOKEN_P, first_name=("string", "First name."), last_name=("string", "Last name."),
    phone_number=("string", "10 digits."), email=("string", "Email."),
    relationship=("string", "One of show_contact_relationships."),
)  # fmt: skip
def phone_add_contact(
    w: World,
    access_token: str,
    first_name: str,
    last_name: str,
    phone_number: str,
    email: str | None = None,
    relationship: str | None = None,
) -> dict:
    _auth(w, "phone", access_token)
    if not first_name.strip():
        raise Fail(EMPTY_NAME)
    if not _phone_ok(phone_number):
        raise Fail(BAD_PHONE)
    if relationship is not None and relationship not in RELATIONSHIPS:
        raise Fail(BAD_RELATION, f"one of: {', '.join(RELATIONSHIPS)}")
    contacts = w.state["phone"]["contacts"]
    if any(c["phone_number"] == phone_number for c in contacts):
        raise Fail(PHONE_TAKEN)
    contact_id = _next_id(contacts, "contact_id")
    contacts.append(
        {"contact_id": contact_id, "first_name": first_name, "last_name": last_name, "email": email,
         "phone_number": phone_number, "relationships": [relationship] if relationship else []}
    )  # fmt: skip
    return {"contact_id": contact_id}


@api(
    "phone", "search_text_messages", "Find text messages, newest first.",
    "[{message_id, sender, receiver, message, sent_at}] (phone numbers)", (TOKEN,),
    access_token=TOKEN_P, phone_number=("string", "Only messages with this number."),
    query=("string", "Text the message contains."), page_index=PAGE_P,
)  # fmt: skip
def phone_search_text_messages(
    w: World, access_token: str, phone_number: str | None = None, query: str = "", page_index: int = 0
) -> list:
    _auth(w, "phone", access_token)
    found = [
        m
        for m in w.state["phone"]["messages"]
        if (phone_number is None or phone_number in (m["sender"], m["receiver"]))
        and _has(m["message"], query)
    ]
    return _page(_newest(found, "sent_at", "message_id"), page_index)


@api(
    "phone", "send_text_message", "Send a text message.", "{message_id}", (TOKEN, BAD_PHONE, EMPTY_MESSAGE),
    access_token=TOKEN_P, phone_number=("string", "The receiver's number."), message=("string", "The text.", MAX_STRING),
)  # fmt: skip
def phone_send_text_message(w: World, access_token: str, phone_number: str, message: str) -> dict:
    _auth(w, "phone", access_token)
    if not _phone_ok(phone_number):
        raise Fail(BAD_PHONE)
    if not message.strip():
        raise Fail(EMPTY_MESSAGE)
    messages = w.state["phone"]["messages"]
    message_id = _next_id(messages, "message_id")
    me = w.state["user"]["phone_number"]
    messages.append(
        {"message_id": message_id, "sender": me, "receiver": phone_number, "message": message, "sent_at": NOW}
    )
    return {"message_id": message_id}


@api(
    "phone", "delete_text_message", "Delete a text message.", "{message}", (TOKEN, NO_MESSAGE),
    access_token=TOKEN_P, message_id=("integer", "The message."),
)  # fmt: skip
def phone_delete_text_message(w: World, access_token: str, message_id: int) -> dict:
    _auth(w, "phone", access_token)
    messages = w.state["phone"]["messages"]
    kept = [m for m in messages if m["message_id"] != message_id]
    if len(kept) == len(messages):
        raise Fail(NO_MESSAGE)
    w.state["phone"]["messages"] = kept
    return {"message": "Text message deleted."}


# ---- venmo ---------------------------------------------------------------------------------------------
def _me(w: World) -> str:
    return w.state["user"]["email"]


def _user(w: World, email: str) -> dict:
    for user in w.state["venmo"]["users"]:
        if user["email"] == email:
            return user
    raise Fail(NO_USER)


def _shown(w: World, t: dict) -> dict:
    """A transaction as the APIs show it: likes as a count and whether you liked it."""
    out = {k: t[k] for k in ("transaction_id", "sender", "receiver", "amount", "description", "created_at")}
    return {**out, "like_count": len(t["likes"]), "liked": _me(w) in t["likes"]}


def _visible(w: World, t: dict) -> bool:
    """Your own transactions and your friends' (the social feed)."""
    me, friends = _me(w), w.state["venmo"]["friends"]
    return me in (t["sender"], t["receiver"]) or t["sender"] in friends or t["receiver"] in friends


def _pay(w: World, receiver: str, amount: float, description: str) -> int:
    venmo = w.state["venmo"]
    if amount > venmo["balance"] + 1e-9:
        raise Fail(BROKE, f"balance is {venmo['balance']:.2f}")
    transaction_id = _next_id(venmo["transactions"], "transaction_id")
    venmo["transactions"].append(
        {"transaction_id": transaction_id, "sender": _me(w), "receiver": receiver, "amount": round(amount, 2),
         "description": description, "created_at": NOW, "likes": []}
    )  # fmt: skip
    venmo["balance"] = round(venmo["balance"] - amount, 2)
    return transaction_id


def _requests(w: World, mine: bool, status: str | None) -> list:
    if status not in (None, "pending", "approved"):
        raise Fail(BAD_STATUS)
    side = "sender" if mine else "receiver"
    rows = [
        r
        for r in w.state["venmo"]["payment_requests"]
        if r[side] == _me(w) and (status is None or (r["approved_at"] is None) == (status == "pending"))
    ]
    return _newest(rows, "created_at", "payment_request_id")


def _request(w: World, request_id: int, mine: bool) -> dict:
    side = "sender" if mine else "receiver"
    for r in w.state["venmo"]["payment_requests"]:
        if r["payment_request_id"] == request_id and r[side] == _me(w):
            return r
    raise Fail(NO_SENT if mine else NO_RECEIVED)


@api(
    "venmo", "login", "Log in; gives an access token.", LOGIN_RETURNS, (CREDENTIALS,),
    username=("string", "Your email."), password=("string", "Your venmo password."),
)  # fmt: skip
def venmo_login(w: World, username: str, password: str) -> dict:
    return _login(w, "venmo", username, password)


@api(
    "venmo", "show_account", "Your account and balance.", "{first_name, last_name, email, balance}", (TOKEN,),
    access_token=TOKEN_P,
)  # fmt: skip
def venmo_show_account(w: World, access_token: str) -> dict:
    _auth(w, "venmo", access_token)
    return {**_user(w, _me(w)), "balance": w.state["venmo"]["balance"]}


@api(
    "venmo", "search_users", "Find venmo users by name or email.", "[{first_name, last_name, email}]", (TOKEN,),
    access_token=TOKEN_P, query=("string", "Text to match; empty for all."), page_index=PAGE_P,
)  # fmt: skip
def venmo_search_users(w: World, access_token: str, query: str = "", page_index: int = 0) -> list:
    _auth(w, "venmo", access_token)
    users = [
        u
        for u in w.state["venmo"]["users"]
        if u["email"] != _me(w) and _has(f"{u['first_name']} {u['last_name']} {u['email']}", query)
    ]
    return _page(users, page_index)


@api(
    "venmo", "search_friends", "Find your venmo friends by name or email.", "[{first_name, last_name, email}]",
    (TOKEN,), access_token=TOKEN_P, query=("string", "Text to match; empty for all."), page_index=PAGE_P,
)  # fmt: skip
def venmo_search_friends(w: World, access_token: str, query: str = "", page_index: int = 0) -> list:
    _auth(w, "venmo", access_token)
    friends = w.state["venmo"]["friends"]
    users = [
        u
        for u in w.state["venmo"]["users"]
        if u["email"] in friends and _has(f"{u['first_name']} {u['last_name']} {u['email']}", query)
    ]
    return _page(users, page_index)


@api(
    "venmo", "show_transactions", "Your own transactions, newest first.",
    "[{transaction_id, sender, receiver, amount, description, created_at, like_count, liked}]",
    (TOKEN, BAD_DIRECTION),
    access_token=TOKEN_P, user_email=("string", "Only those with this user."),
    direction=("string", "'sent' or 'received'; None for both."), page_index=PAGE_P,
)  # fmt: skip
def venmo_show_transactions(
    w: World,
    access_token: str,
    user_email: str | None = None,
    direction: str | None = None,
    page_index: int = 0,
) -> list:
    _auth(w, "venmo", access_token)
    if direction not in (None, "sent", "received"):
        raise Fail(BAD_DIRECTION)
    me, rows = _me(w), []
    for t in w.state["venmo"]["transactions"]:
        if me not in (t["sender"], t["receiver"]):
            continue
        other = t["receiver"] if t["sender"] == me else t["sender"]
        sent = t["sender"] == me
        if (user_email is None or other == user_email) and direction in (
            None,
            "sent" if sent else "received",
        ):
            rows.append(t)
    return [_shown(w, t) for t in _page(_newest(rows, "created_at", "transaction_id"), page_index)]


@api(
    "venmo", "show_social_feed", "Your friends' transactions, newest first.",
    "[{transaction_id, sender, receiver, amount, description, created_at, like_count, liked}]", (TOKEN,),
    access_token=TOKEN_P, page_index=PAGE_P,
)  # fmt: skip
def venmo_show_social_feed(w: World, access_token: str, page_index: int = 0) -> list:
    _auth(w, "venmo", access_token)
    me = _me(w)
    rows = [
        t
        for t in w.state["venmo"]["transactions"]
        if _visible(w, t) and me not in (t["sender"], t["receiver"])
    ]
    return [_shown(w, t) for t in _page(_newest(rows, "created_at", "transaction_id"), page_index)]


@api(
    "venmo", "create_transaction", "Send money to a user.", "{transaction_id}",
    (TOKEN, NO_USER, SELF, BAD_AMOUNT, BROKE),
    access_token=TOKEN_P, receiver_email=("string", "Who gets the money."),
    amount=("number", "Dollars."), description=("string", "What it is for."),
)  # fmt: skip
def venmo_create_transaction(
    w: World, access_token: str, receiver_email: str, amount: float, description: str = ""
) -> dict:
    _auth(w, "venmo", access_token)
    _user(w, receiver_email)
    if receiver_email == _me(w):
        raise Fail(SELF)
    if not _amount_ok(amount):
        raise Fail(BAD_AMOUNT)
    return {"transaction_id": _pay(w, receiver_email, amount, description)}


def _transaction(w: World, transaction_id: int) -> dict:
    for t in w.state["venmo"]["transactions"]:
        if t["transaction_id"] == transaction_id and _visible(w, t):
            return t
    raise Fail(NO_TRANSACTION)


@api(
    "venmo", "like_transaction", "Like a transaction.", "{message}", (TOKEN, NO_TRANSACTION, LIKED),
    access_token=TOKEN_P, transaction_id=("integer", "The transaction."),
)  # fmt: skip
def venmo_like_transaction(w: World, access_token: str, transaction_id: int) -> dict:
    _auth(w, "venmo", access_token)
    t = _transaction(w, transaction_id)
    if _me(w) in t["likes"]:
        raise Fail(LIKED)
    t["likes"].append(_me(w))
    return {"message": "Transaction liked."}


@api(
    "venmo", "unlike_transaction", "Remove your like.", "{message}", (TOKEN, NO_TRANSACTION, NOT_LIKED),
    access_token=TOKEN_P, transaction_id=("integer", "The transaction."),
)  # fmt: skip
def venmo_unlike_transaction(w: World, access_token: str, transaction_id: int) -> dict:
    _auth(w, "venmo", access_token)
    t = _transaction(w, transaction_id)
    if _me(w) not in t["likes"]:
        raise Fail(NOT_LIKED)
    t["likes"].remove(_me(w))
    return {"message": "Like removed."}


REQUEST_RETURNS = (
    "[{payment_request_id, sender, receiver, amount, description, created_at, approved_at, reminder_count}]"
)


@api(
    "venmo", "show_received_payment_requests", "Requests others sent you (you pay), newest first.",
    REQUEST_RETURNS, (TOKEN, BAD_STATUS),
    access_token=TOKEN_P, status=("string", "'pending' or 'approved'; None for both."), page_index=PAGE_P,
)  # fmt: skip
def venmo_show_received_payment_requests(
    w: World, access_token: str, status: str | None = None, page_index: int = 0
) -> list:
    _auth(w, "venmo", access_token)
    return _page(_requests(w, False, status), page_index)


@api(
    "venmo", "show_sent_payment_requests", "Requests you sent (others pay you), newest first.",
    REQUEST_RETURNS, (TOKEN, BAD_STATUS),
    access_token=TOKEN_P, status=("string", "'pending' or 'approved'; None for both."), page_index=PAGE_P,
)  # fmt: skip
def venmo_show_sent_payment_requests(
    w: World, access_token: str, status: str | None = None, page_index: int = 0
) -> list:
    _auth(w, "venmo", access_token)
    return _page(_requests(w, True, status), page_index)


@api(
    "venmo", "create_payment_request", "Ask a user for money.", "{payment_request_id}",
    (TOKEN, NO_USER, SELF, BAD_AMOUNT),
    access_token=TOKEN_P, user_email=("string", "Who should pay."), amount=("number", "Dollars."),
    description=("string", "What it is for."),
)  # fmt: skip
def venmo_create_payment_request(
    w: World, access_token: str, user_email: str, amount: float, description: str = ""
) -> dict:
    _auth(w, "venmo", access_token)
    _user(w, user_email)
    if user_email == _me(w):
        raise Fail(SELF)
    if not _amount_ok(amount):
        raise Fail(BAD_AMOUNT)
    rows = w.state["venmo"]["payment_requests"]
    request_id = _next_id(rows, "payment_request_id")
    rows.append(
        {"payment_request_id": request_id, "sender": _me(w), "receiver": user_email, "amount": round(amount, 2),
         "description": description, "created_at": NOW, "approved_at": None, "reminder_count": 0}
    )  # fmt: skip
    return {"payment_request_id": request_id}


@api(
    "venmo", "approve_payment_request", "Pay a request sent to you.", "{transaction_id}",
    (TOKEN, NO_RECEIVED, APPROVED, BROKE),
    access_token=TOKEN_P, payment_request_id=("integer", "The request."),
)  # fmt: skip
def venmo_approve_payment_request(w: World, access_token: str, payment_request_id: int) -> dict:
    _auth(w, "venmo", access_token)
    r = _request(w, payment_request_id, mine=False)
    if r["approved_at"] is not None:
        raise Fail(APPROVED)
    transaction_id = _pay(w, r["sender"], r["amount"], r["description"])
    r["approved_at"] = NOW
    return {"transaction_id": transaction_id}


@api(
    "venmo", "remind_payment_request", "Remind the user to pay your request.", "{message}",
    (TOKEN, NO_SENT, APPROVED),
    access_token=TOKEN_P, payment_request_id=("integer", "The request."),
)  # fmt: skip
def venmo_remind_payment_request(w: World, access_token: str, payment_request_id: int) -> dict:
    _auth(w, "venmo", access_token)
    r = _request(w, payment_request_id, mine=True)
    if r["approved_at"] is not None:
        raise Fail(APPROVED)
    r["reminder_count"] += 1
    return {"message": "Reminder sent."}


# ---- simple_note ---------------------------------------------------------------------------------------
def _note(w: World, note_id: int) -> dict:
    for note in w.state["simple_note"]["notes"]:
        if note["note_id"] == note_id:
            return note
    raise Fail(NO_NOTE)


@api(
    "simple_note", "login", "Log in; gives an access token.", LOGIN_RETURNS, (CREDENTIALS,),
    username=("string", "Your email."), password=("string", "Your simple_note password."),
)  # fmt: skip
def note_login(w: World, username: str, password: str) -> dict:
    return _login(w, "simple_note", username, password)


@api(
    "simple_note", "search_notes", "Find notes by text and tag, newest first.",
    "[{note_id, title, tags, created_at}]", (TOKEN,),
    access_token=TOKEN_P, query=("string", "Text in the title or content; empty for all."),
    tag=("string", "Only notes with this tag."), page_index=PAGE_P,
)  # fmt: skip
def note_search_notes(
    w: World, access_token: str, query: str = "", tag: str | None = None, page_index: int = 0
) -> list:
    _auth(w, "simple_note", access_token)
    notes = [
        n
        for n in w.state["simple_note"]["notes"]
        if _has(f"{n['title']}\n{n['content']}", query) and (tag is None or tag in n["tags"])
    ]
    shown = [{k: n[k] for k in ("note_id", "title", "tags", "created_at")} for n in notes]
    return _page(_newest(shown, "created_at", "note_id"), page_index)


@api(
    "simple_note", "show_note", "Show a note.", "{note_id, title, content, tags, created_at, updated_at}",
    (TOKEN, NO_NOTE), access_token=TOKEN_P, note_id=("integer", "The note."),
)  # fmt: skip
def note_show_note(w: World, access_token: str, note_id: int) -> dict:
    _auth(w, "simple_note", access_token)
    return _note(w, note_id)


@api(
    "simple_note", "create_note", "Create a note.", "{note_id}", (TOKEN, EMPTY_TITLE),
    access_token=TOKEN_P, title=("string", "The title."), content=("string", "The text.", MAX_STRING),
    tags=("list[string]", "Tags."),
)  # fmt: skip
def note_create_note(
    w: World, access_token: str, title: str, content: str = "", tags: list[str] | None = None
) -> dict:
    _auth(w, "simple_note", access_token)
    if not title.strip():
        raise Fail(EMPTY_TITLE)
    notes = w.state["simple_note"]["notes"]
    note_id = _next_id(notes, "note_id")
    notes.append(
        {"note_id": note_id, "title": title, "content": content, "tags": list(tags or []), "created_at": NOW,
         "updated_at": NOW}
    )  # fmt: skip
    return {"note_id": note_id}


@api(
    "simple_note", "update_note", "Change a note's title, content or tags.", "{message}",
    (TOKEN, NO_NOTE, EMPTY_TITLE, NOTHING),
    access_token=TOKEN_P, note_id=("integer", "The note."), title=("string", "New title."),
    content=("string", "New text.", MAX_STRING), tags=("list[string]", "New tags."),
)  # fmt: skip
def note_update_note(
    w: World,
    access_token: str,
    note_id: int,
    title: str | None = None,
    content: str | None = None,
    tags: list[str] | None = None,
) -> dict:
    _auth(w, "simple_note", access_token)
    note = _note(w, note_id)
    if title is None and content is None and tags is None:
        raise Fail(NOTHING)
    if title is not None and not title.strip():
        raise Fail(EMPTY_TITLE)
    for key, value in (("title", title), ("content", content), ("tags", tags)):
        if value is not None:
            note[key] = list(value) if key == "tags" else value
    note["updated_at"] = NOW
    return {"message": "Note updated."}


@api(
    "simple_note", "delete_note", "Delete a note.", "{message}", (TOKEN, NO_NOTE),
    access_token=TOKEN_P, note_id=("integer", "The note."),
)  # fmt: skip
def note_delete_note(w: World, access_token: str, note_id: int) -> dict:
    _auth(w, "simple_note", access_token)
    note = _note(w, note_id)
    w.state["simple_note"]["notes"].remove(note)
    return {"message": "Note deleted."}


# ---- file_system ---------------------------------------------------------------------------------------
_PATH = re.compile(r"~/(?:[A-Za-z0-9_.\- ]+/)*")  # a directory; a file path is one plus a name


def _file_path(path: str) -> str:
    head, _, name = path.rpartition("/")
    if not _PATH.fullmatch(head + "/") or not name or name in (".", "..") or ".." in path.split("/"):
        raise Fail(BAD_FILE)
    return path


def _file(w: World, path: str) -> dict:
    for f in w.state["file_system"]["files"]:
        if f["path"] == path:
            return f
    raise Fail(NO_FILE)


@api(
    "file_system", "login", "Log in; gives an access token.", LOGIN_RETURNS, (CREDENTIALS,),
    username=("string", "Your email."), password=("string", "Your file_system password."),
)  # fmt: skip
def files_login(w: World, username: str, password: str) -> dict:
    return _login(w, "file_system", username, password)


@api(
    "file_system", "show_directory", "List a directory (folders end with /).", "[path]",
    (TOKEN, BAD_DIR, NO_DIR),
    access_token=TOKEN_P, directory_path=("string", "E.g. ~/documents/"), page_index=PAGE_P,
)  # fmt: skip
def files_show_directory(
    w: World, access_token: str, directory_path: str = "~/", page_index: int = 0
) -> list:
    _auth(w, "file_system", access_token)
    if not _PATH.fullmatch(directory_path) or ".." in directory_path.split("/"):
        raise Fail(BAD_DIR)
    entries = set()
    for f in w.state["file_system"]["files"]:
        if f["path"].startswith(directory_path):
            rest = f["path"][len(directory_path) :]
            entries.add(directory_path + (rest.split("/")[0] + "/" if "/" in rest else rest))
    if not entries and directory_path != "~/":
        raise Fail(NO_DIR)
    return _page(sorted(entries), page_index)


@api(
    "file_system", "show_file", "Show a file.", "{path, content, created_at}", (TOKEN, BAD_FILE, NO_FILE),
    access_token=TOKEN_P, file_path=("string", "E.g. ~/documents/a.txt"),
)  # fmt: skip
def files_show_file(w: World, access_token: str, file_path: str) -> dict:
    _auth(w, "file_system", access_token)
    return _file(w, _file_path(file_path))


@api(
    "file_system", "create_file", "Create a file.", "{path}", (TOKEN, BAD_FILE, EXISTS),
    access_token=TOKEN_P, file_path=("string", "E.g. ~/documents/a.txt"), content=("string", "The text.", MAX_STRING),
)  # fmt: skip
def files_create_file(w: World, access_token: str, file_path: str, content: str = "") -> dict:
    _auth(w, "file_system", access_token)
    files, path = w.state["file_system"]["files"], _file_path(file_path)
    if any(f["path"] == path for f in files):
        raise Fail(EXISTS)
    files.append({"path": file_path, "content": content, "created_at": NOW})
    return {"path": file_path}


@api(
    "file_system", "delete_file", "Delete a file.", "{message}", (TOKEN, BAD_FILE, NO_FILE),
    access_token=TOKEN_P, file_path=("string", "E.g. ~/documents/a.txt"),
)  # fmt: skip
def files_delete_file(w: World, access_token: str, file_path: str) -> dict:
    _auth(w, "file_system", access_token)
    f = _file(w, _file_path(file_path))
    w.state["file_system"]["files"].remove(f)
    return {"message": "File deleted."}


# ---- the door ------------------------------------------------------------------------------------------
class World:
    """One task's world: its state, the answer given and whether the task was marked complete."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state: dict[str, Any] = copy.deepcopy(state)
        self.answer: Any = None
        self.completed = False
        self.calls = 0

    def call(self, app: str, api: str, args: list, kwargs: dict) -> Any:
        """Run one API call and return its result as a fresh copy of plain data. Raises ApiError and nothing
        else, whatever the input; positional args bind to the documented parameters in order, like Python."""
        self.calls += 1
        where = f"{_name(app)}.{_name(api)}"
        if not isinstance(app, str) or app not in APPS:
            raise ApiError(
                f"404 No app named {_name(app)!r}; apis.api_docs.show_app_descriptions() lists them."
            )
        spec = APPS[app].apis.get(api) if isinstance(api, str) else None
        if spec is None:
            raise ApiError(
                f"404 No API named {_name(api)!r} found in the {app} app; "
                f"apis.api_docs.show_api_descriptions(app_name={app!r}) lists them."
            )
        try:
            if self.calls > MAX_CALLS:
                raise Fail(LIMIT, f"at most {MAX_CALLS}")
            bound = _bind(spec.params, args, kwargs)
            result = spec.fn(self, **bound)
        except Fail as fail:
            if fail.error == BAD_ARGS:
                fail.detail += f"; see apis.api_docs.show_api_doc(app_name={app!r}, api_name={api!r})"
            code, text = fail.error.split(" ", 1)
            detail = f"; {fail.detail}" if fail.detail else ""
            raise ApiError(f"{code} {where}: {text}{detail}", fail.error) from None
        except Exception as e:  # a bug here must not reach the agent as anything but an API error
            raise ApiError(f"500 {where}: internal error ({type(e).__name__})") from None
        return copy.deepcopy(result)


def _name(value: Any) -> str:
    """An app or API name as an error quotes it: printable, at most ECHO characters."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    text = "".join(ch if ch.isprintable() else "?" for ch in value[: ECHO + 1])
    return text if len(text) <= ECHO else text[:ECHO] + "..."


def _bind(params: tuple, args: Any, kwargs: Any) -> dict[str, Any]:
    """Python's argument binding over the documented parameters, then their types; Fail(BAD_ARGS) if wrong."""
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise Fail(BAD_ARGS, "arguments must be a list and a dict")
    if len(args) > len(params):
        raise Fail(BAD_ARGS, f"takes at most {len(params)} positional arguments, {len(args)} given")
    names = [p.name for p in params]
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if not isinstance(key, str) or key not in names:
            raise Fail(BAD_ARGS, f"unexpected argument {_name(key)!r}")
        if key in bound:
            raise Fail(BAD_ARGS, f"got multiple values for argument {key!r}")
        bound[key] = value
    for p in params:
        if p.name not in bound:
            if p.required:
                raise Fail(BAD_ARGS, f"missing required argument {p.name!r}")
            bound[p.name] = copy.deepcopy(p.default)
        elif not (bound[p.name] is None and p.default is None and not p.required) and not _typed(
            p.type, bound[p.name], p.max_chars
        ):
            words = (
                f"a string of at most {p.max_chars} characters" if p.type == "string" else _TYPE_WORDS[p.type]
            )
            raise Fail(BAD_ARGS, f"{p.name} must be {words}, not {_kind(bound[p.name])}")
    return bound


_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a finite number",
    "boolean": "True or False",
    "list[string]": f"a list of at most {MAX_LIST} short strings",
    "any": "a string, number, boolean or None",
}


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return type(value).__name__


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= MAX_NUMBER and (
        isinstance(value, int) or math.isfinite(value)
    )  # 10**400: no float()


def _typed(kind: str, value: Any, max_chars: int = MAX_STRING) -> bool:
    if kind == "string":
        return isinstance(value, str) and len(value) <= max_chars
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_NUMBER
    if kind == "number":
        return _number(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "list[string]":
        return (
            isinstance(value, list)
            and len(value) <= MAX_LIST
            and all(isinstance(v, str) and len(v) <= TAG_CHARS for v in value)
        )
    if kind == "any":
        return (
            value is None or isinstance(value, bool) or _number(value) or _typed("string", value, MAX_STRING)
        )
    return False
