"""Task templates (AppWorld's scenarios) and the seeded stream of tasks drawn from them.

    for task_id, level, task_seed, instruction, hidden in scenario_tasks("train", seed=0): ...

A scenario is one instance of a template (template + scenario seed); its three variants, each with its own
world seed and parameters, come out one after another as "<template>-<scenario seed>_<v>", v = 1, 2, 3 (SGC
counts a scenario when all three pass). Scenario seeds are even in "train" and odd in "eval", so the two
splits never share a scenario.

Difficulty is the number of apps and steps (LOOP's difficulty 1-3):
    1  one app besides supervisor, a few calls: text a contact, create a note, a sum over payments, delete a bill
    2  two apps or a loop: text a group, pay a contact, copy a file into a note, like today's feed payments
    3  three apps or more steps: pay back a debt a text states, remind pending requests and note it, split a
       bill as payment requests, approve requests and thank by text

A template reads its world (`world.build_world(world_seed)`) and returns the instruction, the gold program and
the checks. The gold program is generic code a careful agent could write from the instruction alone: it looks
up passwords, people and values through the APIs (the instruction's words are its only literals), in short
ReAct cells that print what the next cell needs; variables persist across cells. The checks (`checks.py`) end
with complete_task and no collateral damage; a no-op fails at least one of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from gymflow.envs.apps.world import MONTH_NAMES, NOW, PAYMENTS, build_world
from gymflow.envs.base import task_rng

LEVELS = ["1", "2", "3"]
VARIANTS = 3
SPLITS = ("train", "eval")  # a scenario seed's parity is its split
ATTEMPTS = 50  # world seeds a variant may try until its template fits (a few at most in practice)

TEXTS = (
    "Running 10 minutes late.", "Happy birthday!", "Can you call me tonight?", "Dinner at 7 works for me.",
    "Thanks for yesterday!", "I left my keys at your place.", "See you at the gym at 6.",
)  # fmt: skip
NEW_NOTES = (
    ("Gym plan", "Leg day on Monday"),
    ("Party ideas", "Tacos and a karaoke night"),
    ("Call the dentist", "Book a cleaning for next week"),
    ("Weekend plans", "Farmers market on Saturday"),
    ("Car service", "Oil change due in June"),
    ("Birthday list", "Buy candles and a cake"),
)
AMOUNTS = (12.5, 15, 20, 25, 30, 45, 60)
THANKS = ("Paid, thanks!", "Just paid you.", "Done, thanks!")
REPLIES = ("It is done.", "Sent it, thanks!", "Paid you back.")
PAYBACK = ("Paying you back", "Settling up", "Thanks!")
REMINDER_TITLES = ("Reminded", "Payment reminders", "Who I reminded")
TOKENS = {
    "phone": "phone_token",
    "venmo": "venmo_token",
    "simple_note": "note_token",
    "file_system": "file_token",
}

Cell = tuple[str, str]  # (thought, code)


def q(text: str) -> str:
    """A string literal for gold code."""
    return json.dumps(text)


def _plural(relationship: str) -> str:
    return relationship + "s"


def _with(world: dict, relationship: str) -> list[dict]:
    return [c for c in world["phone"]["contacts"] if relationship in c["relationships"]]


def _name(person: dict) -> str:
    return f"{person['first_name']} {person['last_name']}"


# ---- gold cells and checks shared by templates ---------------------------------------------------------
def start() -> Cell:
    return (
        "I get my profile and my app passwords from the supervisor app.",
        "profile = apis.supervisor.show_profile()\n"
        'passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}\n'
        "print(profile)",
    )


def login(*apps: str) -> Cell:
    lines = []
    for app in apps:
        user = 'profile["phone_number"]' if app == "phone" else 'profile["email"]'
        lines.append(
            f'{TOKENS[app]} = apis.{app}.login(username={user}, password=passwords["{app}"])["access_token"]'
        )
    tokens = ", ".join(TOKENS[app] for app in apps)
    return f"I log in to {' and '.join(apps)} with my passwords.", "\n".join([*lines, f"print({tokens})"])


def find_contact(first: str, relationship: str) -> Cell:
    return (
        f"I find my {relationship} {first} in my phone contacts.",
        f"contact = [c for c in apis.phone.search_contacts(access_token=phone_token, query={q(first)}, "
        f'relationship={q(relationship)}) if c["first_name"] == {q(first)}][0]\nprint(contact)',
    )


def collect(var: str, call: str, show: bool = True) -> str:
    """Code that reads every page of a list API (`call` without page_index) into `var`."""
    code = f"{var}, page = [], 0\nwhile True:\n    batch = {call[:-1]}, page_index=page)\n    if not batch:\n"
    return (
        code + f"        break\n    {var} += batch\n    page += 1" + (f"\nprint(len({var}))" if show else "")
    )


def done(answer: str | None = None) -> Cell:
    if answer is None:
        return "The task is done, so I mark it complete.", "apis.supervisor.complete_task()"
    return (
        "I have the answer, so I complete the task with it.",
        f"apis.supervisor.complete_task(answer={answer})",
    )


def text_check(world: dict, contact: dict, message: str) -> dict:
    return {
        "kind": "added",
        "table": "phone.messages",
        "match": {
            "sender": world["user"]["phone_number"],
            "receiver": contact["phone_number"],
            "message": message,
        },
        "text": f'a text "{message}" was sent to {_name(contact)}',
    }


def payment_check(world: dict, receiver: dict, amount: float, description: str | None) -> dict:
    match = {"sender": world["user"]["email"], "receiver": receiver["email"], "amount": amount}
    if description is not None:
        match["description"] = description
    return {
        "kind": "added",
        "table": "venmo.transactions",
        "match": match,
        "text": f"${amount:.2f} was paid to {_name(receiver)} on venmo",
    }


def balance_check(world: dict, paid: float) -> dict:
    balance = round(world["venmo"]["balance"] - paid, 2)
    return {
        "kind": "value",
        "path": "venmo.balance",
        "equals": balance,
        "text": f"the venmo balance is {balance:.2f}",
    }


def note_check(title: str, content: Any) -> dict:
    return {
        "kind": "added",
        "table": "simple_note.notes",
        "match": {"title": title, "content": content},
        "text": f'a note titled "{title}" with the right content was created',
    }


COMPLETED = {"kind": "completed", "text": "complete_task was called"}
COLLATERAL = {"kind": "no_collateral", "text": "nothing else changed in any app"}


def _person(world: dict, email: str) -> dict:
    return next(u for u in world["venmo"]["users"] if u["email"] == email)


def _feed(world: dict) -> list[dict]:
    """The transactions on the user's social feed (as venmo.show_social_feed selects them)."""
    me, friends = world["user"]["email"], world["venmo"]["friends"]
    return [
        t
        for t in world["venmo"]["transactions"]
        if me not in (t["sender"], t["receiver"]) and (t["sender"] in friends or t["receiver"] in friends)
    ]


Made = dict[str, Any]  # params, instruction, gold, checks, answer, apps


# ---- difficulty 1 --------------------------------------------------------------------------------------
def text_contact(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("roommate", "sibling", "coworker", "friend", "parent"))
    contact = rng.choice(_with(world, relationship))
    first, message = contact["first_name"], rng.choice(TEXTS)
    send = (
        f"I send the text to {first}'s phone number.",
        'print(apis.phone.send_text_message(access_token=phone_token, phone_number=contact["phone_number"], '
        f"message={q(message)}))",
    )
    return {
        "params": {"relationship": relationship, "contact": first, "message": message},
        "instruction": f'Send a text message saying "{message}" to my {relationship} {first}.',
        "gold": [start(), login("phone"), find_contact(first, relationship), send, done()],
        "checks": [text_check(world, contact, message), COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["phone"],
    }


def create_note(world: dict, rng: Any) -> Made | None:
    title, content = rng.choice(NEW_NOTES)
    create = (
        "I create the note.",
        f"print(apis.simple_note.create_note(access_token=note_token, title={q(title)}, content={q(content)}))",
    )
    return {
        "params": {"title": title, "content": content},
        "instruction": f'Create a note in SimpleNote titled "{title}" with the content "{content}".',
        "gold": [start(), login("simple_note"), create, done()],
        "checks": [note_check(title, content), COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["simple_note"],
    }


def total_sent(world: dict, rng: Any) -> Made | None:
    me = world["user"]["email"]
    counts: dict[str, int] = {}
    for t in world["venmo"]["transactions"]:
        if t["sender"] == me:
            counts[t["receiver"]] = counts.get(t["receiver"], 0) + 1
    emails = sorted(e for e, n in counts.items() if n >= 2)
    if not emails:
        return None
    person = _person(world, rng.choice(emails))
    name = _name(person)
    total = round(sum(t["amount"] for t in world["venmo"]["transactions"]
                      if t["sender"] == me and t["receiver"] == person["email"]), 2)  # fmt: skip
    find = (
        f"I look up {name}'s email on venmo.",
        f'email = apis.venmo.search_users(access_token=venmo_token, query={q(name)})[0]["email"]\nprint(email)',
    )
    call = 'apis.venmo.show_transactions(access_token=venmo_token, user_email=email, direction="sent")'
    add = (
        f"I read every page of the payments I sent to {name} and add them up.",
        collect("sent", call, show=False)
        + '\ntotal = round(sum(t["amount"] for t in sent), 2)\nprint(total)',
    )
    return {
        "params": {"person": name},
        "instruction": f"How much money have I sent to {name} on Venmo in total? Answer with the number of dollars.",
        "gold": [start(), login("venmo"), find, add, done("total")],
        "checks": [
            {"kind": "answer", "equals": total, "text": f"the answer is {total:.2f}"},
            COMPLETED,
            COLLATERAL,
        ],
        "answer": total,
        "apps": ["venmo"],
    }


def delete_bill(world: dict, rng: Any) -> Made | None:
    paths = [f["path"] for f in world["file_system"]["files"] if f["path"].startswith("~/bills/")]
    path = rng.choice(paths)
    kind, month = path[len("~/bills/") : -len(".txt")].split("_")
    look = (
        "I see what is in my home directory.",
        "print(apis.file_system.show_directory(access_token=file_token))",
    )
    bills = (
        "My bills should be in ~/bills/.",
        'bills = apis.file_system.show_directory(access_token=file_token, directory_path="~/bills/")\nprint(bills)',
    )
    delete = (
        f"I delete the {kind} bill of {MONTH_NAMES[month]} ({month}).",
        f"path = [p for p in bills if {q(kind)} in p and {q(month)} in p][0]\n"
        "print(apis.file_system.delete_file(access_token=file_token, file_path=path))",
    )
    return {
        "params": {"kind": kind, "month": month},
        "instruction": f"Delete my {kind} bill for {MONTH_NAMES[month]} from my file system.",
        "gold": [start(), login("file_system"), look, bills, delete, done()],
        "checks": [
            {"kind": "removed", "table": "file_system.files", "key": path, "text": f"{path} was deleted"},
            COMPLETED,
            COLLATERAL,
        ],
        "answer": None,
        "apps": ["file_system"],
    }


# ---- difficulty 2 --------------------------------------------------------------------------------------
def text_group(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("roommate", "sibling", "coworker"))
    group, message = _with(world, relationship), rng.choice(TEXTS)
    find = (
        f"I find all my {_plural(relationship)} in my phone contacts.",
        f"group = apis.phone.search_contacts(access_token=phone_token, relationship={q(relationship)})\n"
        'print([c["first_name"] for c in group])',
    )
    send = (
        "I send the text to each of them.",
        "for c in group:\n    print(apis.phone.send_text_message(access_token=phone_token, "
        f'phone_number=c["phone_number"], message={q(message)}))',
    )
    return {
        "params": {"relationship": relationship, "message": message},
        "instruction": f'Send the text message "{message}" to each of my {_plural(relationship)}.',
        "gold": [start(), login("phone"), find, send, done()],
        "checks": [*(text_check(world, c, message) for c in group), COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["phone"],
    }


def pay_contact(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("roommate", "sibling", "coworker", "friend"))
    contact = rng.choice(_with(world, relationship))
    first, amount, description = contact["first_name"], rng.choice(AMOUNTS), rng.choice(PAYMENTS)
    pay = (
        f"I send ${amount:g} to {first}'s email on venmo.",
        'print(apis.venmo.create_transaction(access_token=venmo_token, receiver_email=contact["email"], '
        f"amount={amount:g}, description={q(description)}))",
    )
    return {
        "params": {
            "relationship": relationship,
            "contact": first,
            "amount": amount,
            "description": description,
        },
        "instruction": f'Send ${amount:g} to my {relationship} {first} on Venmo with the description "{description}".',
        "gold": [start(), login("phone", "venmo"), find_contact(first, relationship), pay, done()],
        "checks": [
            payment_check(world, contact, amount, description),
            balance_check(world, amount),
            COMPLETED,
            COLLATERAL,
        ],
        "answer": None,
        "apps": ["phone", "venmo"],
    }


def file_to_note(world: dict, rng: Any) -> Made | None:
    docs = [f for f in world["file_system"]["files"] if f["path"].startswith("~/documents/")]
    doc = rng.choice(docs)
    name = doc["path"][len("~/documents/") :]
    title = name[: -len(".txt")].replace("_", " ").capitalize()
    read = (
        f"I read {name} in my documents folder.",
        f'file = apis.file_system.show_file(access_token=file_token, file_path="~/documents/{name}")\n'
        'print(file["content"])',
    )
    create = (
        "I create the note with the file's content.",
        f'print(apis.simple_note.create_note(access_token=note_token, title={q(title)}, content=file["content"]))',
    )
    return {
        "params": {"file": name, "title": title},
        "instruction": f"Copy the content of the file {name} in my documents folder into a new SimpleNote note "
        f'titled "{title}".',
        "gold": [start(), login("file_system", "simple_note"), read, create, done()],
        "checks": [note_check(title, doc["content"]), COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["file_system", "simple_note"],
    }


def like_feed(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("roommate", "coworker"))
    emails = {c["email"] for c in _with(world, relationship)}
    me, today = world["user"]["email"], NOW[:10]
    targets = [
        t
        for t in _feed(world)
        if t["created_at"].startswith(today)
        and {t["sender"], t["receiver"]} & emails
        and me not in t["likes"]
    ]
    if not targets:
        return None
    find = (
        f"I get the emails of my {_plural(relationship)} from my phone contacts.",
        f'emails = [c["email"] for c in apis.phone.search_contacts(access_token=phone_token, '
        f"relationship={q(relationship)})]\nprint(emails)",
    )
    feed = (
        "I read every page of my venmo social feed.",
        collect("feed", "apis.venmo.show_social_feed(access_token=venmo_token)"),
    )
    like = (
        f"I like each transaction from today ({today}) that involves one of them and I have not liked yet.",
        f'for t in feed:\n    if t["created_at"].startswith({q(today)}) and not t["liked"] and '
        '(t["sender"] in emails or t["receiver"] in emails):\n'
        '        print(t["transaction_id"], apis.venmo.like_transaction(access_token=venmo_token, '
        'transaction_id=t["transaction_id"]))',
    )
    checks = [
        {
            "kind": "contains",
            "table": "venmo.transactions",
            "key": t["transaction_id"],
            "field": "likes",
            "item": me,
            "text": f"transaction {t['transaction_id']} is liked",
        }
        for t in targets
    ]
    return {
        "params": {"relationship": relationship},
        "instruction": f"Like all the Venmo transactions from today ({today}) on my Venmo social feed that involve "
        f"any of my {_plural(relationship)}.",
        "gold": [start(), login("phone", "venmo"), find, feed, like, done()],
        "checks": [*checks, COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["phone", "venmo"],
    }


# ---- difficulty 3 --------------------------------------------------------------------------------------
def pay_back(world: dict, rng: Any) -> Made | None:
    me = world["user"]["phone_number"]
    owed = {
        m["sender"]: m["message"]
        for m in world["phone"]["messages"]
        if "owe" in m["message"] and m["receiver"] == me
    }
    contact = rng.choice([c for c in world["phone"]["contacts"] if c["phone_number"] in owed])
    first, relationship = contact["first_name"], contact["relationships"][0]
    amount = float(owed[contact["phone_number"]].split("$")[1].split()[0])
    description, reply = rng.choice(PAYBACK), rng.choice(REPLIES)
    read = (
        f"I look for {first}'s text about what I owe.",
        'texts = apis.phone.search_text_messages(access_token=phone_token, phone_number=contact["phone_number"], '
        'query="owe")\nprint(texts)',
    )
    pay = (
        "I read the amount after the $ sign and pay it on venmo.",
        'amount = float(texts[0]["message"].split("$")[1].split()[0])\n'
        'print(amount, apis.venmo.create_transaction(access_token=venmo_token, receiver_email=contact["email"], '
        f"amount=amount, description={q(description)}))",
    )
    text = (
        f"I text {first} that it is paid.",
        'print(apis.phone.send_text_message(access_token=phone_token, phone_number=contact["phone_number"], '
        f"message={q(reply)}))",
    )
    return {
        "params": {
            "relationship": relationship,
            "contact": first,
            "description": description,
            "reply": reply,
        },
        "instruction": f"My {relationship} {first} texted me how much money I owe. Pay {first} that amount on "
        f'Venmo with the description "{description}", then text {first} "{reply}"',
        "gold": [
            start(),
            login("phone", "venmo"),
            find_contact(first, relationship),
            read,
            pay,
            text,
            done(),
        ],
        "checks": [
            payment_check(world, contact, amount, description),
            balance_check(world, amount),
            text_check(world, contact, reply),
            COMPLETED,
            COLLATERAL,
        ],
        "answer": None,
        "apps": ["phone", "venmo"],
    }


def remind_and_note(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("sibling", "coworker"))  # not "friend": venmo has friends too
    group = {c["email"]: c for c in _with(world, relationship)}
    me = world["user"]["email"]
    targets = [
        r
        for r in world["venmo"]["payment_requests"]
        if r["sender"] == me and r["receiver"] in group and r["approved_at"] is None
    ]
    if not targets:
        return None
    names = sorted({group[r["receiver"]]["first_name"] for r in targets})
    title = rng.choice(REMINDER_TITLES)
    find = (
        f"I get the emails and first names of my {_plural(relationship)}.",
        'names = {c["email"]: c["first_name"] for c in apis.phone.search_contacts(access_token=phone_token, '
        f"relationship={q(relationship)})}}\nprint(names)",
    )
    pending = (
        "I read every page of the pending payment requests I sent.",
        collect(
            "pending", 'apis.venmo.show_sent_payment_requests(access_token=venmo_token, status="pending")'
        ),
    )
    remind = (
        f"I remind the requests sent to my {_plural(relationship)} and keep their names.",
        'reminded = []\nfor r in pending:\n    if r["receiver"] in names:\n'
        '        apis.venmo.remind_payment_request(access_token=venmo_token, payment_request_id=r["payment_request_id"])\n'
        '        reminded.append(names[r["receiver"]])\nprint(reminded)',
    )
    note = (
        "I log in to simple_note and write the names, one per line.",
        f"{login('simple_note')[1].splitlines()[0]}\nprint(apis.simple_note.create_note(access_token=note_token, "
        f'title={q(title)}, content="\\n".join(sorted(set(reminded)))))',
    )
    checks = [
        {
            "kind": "field",
            "table": "venmo.payment_requests",
            "key": r["payment_request_id"],
            "field": "reminder_count",
            "equals": r["reminder_count"] + 1,
            "text": f"payment request {r['payment_request_id']} to {group[r['receiver']]['first_name']} was reminded once",
        }
        for r in targets
    ]
    return {
        "params": {"relationship": relationship, "title": title},
        "instruction": f"Remind my {_plural(relationship)} to pay the pending Venmo payment requests I sent them. "
        f'Then create a note in SimpleNote titled "{title}" with the first names of those I reminded, one per line.',
        "gold": [start(), login("phone", "venmo"), find, pending, remind, note, done()],
        "checks": [*checks, note_check(title, {"lines": names}), COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["phone", "venmo", "simple_note"],
    }


def split_bill(world: dict, rng: Any) -> Made | None:
    files = world["file_system"]["files"]
    kind = rng.choice(
        sorted(
            {f["path"][len("~/bills/") :].split("_")[0] for f in files if f["path"].startswith("~/bills/")}
        )
    )
    latest = max((f for f in files if f["path"].startswith(f"~/bills/{kind}_")), key=lambda f: f["path"])
    total = float(latest["content"].split("Total: $")[1].split()[0])
    roommates = _with(world, "roommate")
    share = round(total / (len(roommates) + 1), 2)
    description = f"{kind.capitalize()} bill"
    find = (
        f"I list my {kind} bills.",
        f'bills = [p for p in apis.file_system.show_directory(access_token=file_token, directory_path="~/bills/") '
        f"if {q(kind)} in p]\nprint(bills)",
    )
    read = (
        "The latest bill has the latest month in its name; I read it.",
        'bill = apis.file_system.show_file(access_token=file_token, file_path=sorted(bills)[-1])\nprint(bill["content"])',
    )
    shares = (
        "I find my roommates and split the total between them and me.",
        'total = float(bill["content"].split("Total: $")[1].split()[0])\n'
        'roommates = apis.phone.search_contacts(access_token=phone_token, relationship="roommate")\n'
        'share = round(total / (len(roommates) + 1), 2)\nprint(total, share, [c["first_name"] for c in roommates])',
    )
    request = (
        "I log in to venmo and request each roommate's share.",
        f"{login('venmo')[1].splitlines()[0]}\nfor c in roommates:\n"
        '    print(apis.venmo.create_payment_request(access_token=venmo_token, user_email=c["email"], '
        f"amount=share, description={q(description)}))",
    )
    checks = [
        {
            "kind": "added",
            "table": "venmo.payment_requests",
            "match": {
                "sender": world["user"]["email"],
                "receiver": c["email"],
                "amount": share,
                "description": description,
            },
            "text": f"${share:.2f} was requested from {_name(c)}",
        }
        for c in roommates
    ]
    return {
        "params": {"kind": kind, "bill": latest["path"]},
        "instruction": f"Split my latest {kind} bill equally between me and my roommates: on Venmo, request each "
        f'roommate\'s share with the description "{description}". My bills are in ~/bills/.',
        "gold": [start(), login("file_system", "phone"), find, read, shares, request, done()],
        "checks": [*checks, COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["file_system", "phone", "venmo"],
    }


def approve_and_thank(world: dict, rng: Any) -> Made | None:
    relationship = rng.choice(("roommate", "coworker"))  # not "friend": venmo has friends too
    group = {c["email"]: c for c in _with(world, relationship)}
    me = world["user"]["email"]
    targets = [
        r
        for r in world["venmo"]["payment_requests"]
        if r["receiver"] == me and r["sender"] in group and r["approved_at"] is None
    ]
    if not targets or len({r["sender"] for r in targets}) < len(targets):
        return None
    message = rng.choice(THANKS)
    find = (
        f"I get my {_plural(relationship)} from my phone contacts, by email.",
        'people = {c["email"]: c for c in apis.phone.search_contacts(access_token=phone_token, '
        f"relationship={q(relationship)})}}\nprint(list(people))",
    )
    pending = (
        "I read every page of the pending payment requests sent to me.",
        collect(
            "pending", 'apis.venmo.show_received_payment_requests(access_token=venmo_token, status="pending")'
        ),
    )
    approve = (
        f"I approve the requests from my {_plural(relationship)} and keep who they were.",
        'paid = []\nfor r in pending:\n    if r["sender"] in people:\n'
        "        print(apis.venmo.approve_payment_request(access_token=venmo_token, "
        'payment_request_id=r["payment_request_id"]))\n        paid.append(people[r["sender"]])',
    )
    thank = (
        "I text each of them.",
        "for c in paid:\n    print(apis.phone.send_text_message(access_token=phone_token, "
        f'phone_number=c["phone_number"], message={q(message)}))',
    )
    checks: list[dict] = []
    for r in targets:
        person = group[r["sender"]]
        checks.append(
            {
                "kind": "field",
                "table": "venmo.payment_requests",
                "key": r["payment_request_id"],
                "field": "approved_at",
                "equals": NOW,
                "text": f"payment request {r['payment_request_id']} from {person['first_name']} was approved",
            }
        )
        checks.append(payment_check(world, person, r["amount"], None))
    checks.append(balance_check(world, sum(r["amount"] for r in targets)))
    checks += [text_check(world, group[r["sender"]], message) for r in targets]
    return {
        "params": {"relationship": relationship, "message": message},
        "instruction": f"Approve all pending Venmo payment requests my {_plural(relationship)} sent me, then text "
        f'each {relationship} whose request I approved "{message}"',
        "gold": [start(), login("phone", "venmo"), find, pending, approve, thank, done()],
        "checks": [*checks, COMPLETED, COLLATERAL],
        "answer": None,
        "apps": ["phone", "venmo"],
    }


Template = Callable[[dict, Any], "Made | None"]
TEMPLATES: dict[str, tuple[str, Template]] = {  # name -> (difficulty, template)
    "text_contact": ("1", text_contact),
    "create_note": ("1", create_note),
    "total_sent": ("1", total_sent),
    "delete_bill": ("1", delete_bill),
    "text_group": ("2", text_group),
    "pay_contact": ("2", pay_contact),
    "file_to_note": ("2", file_to_note),
    "like_feed": ("2", like_feed),
    "pay_back": ("3", pay_back),
    "remind_and_note": ("3", remind_and_note),
    "split_bill": ("3", split_bill),
    "approve_and_thank": ("3", approve_and_thank),
}


def make_task(template: str, scenario: int, variant: int) -> tuple[str, str, int, str, dict]:
    """Variant `variant` of scenario (`template`, `scenario`): (task_id, difficulty, world seed, instruction,
    hidden). Its world seed is the first of a seeded sequence whose world the template fits."""
    level, make = TEMPLATES[template]
    for attempt in range(ATTEMPTS):
        world_seed = task_rng("apps-variant", template, scenario, variant, attempt).getrandbits(31)
        world = build_world(world_seed)
        made = make(world, task_rng("apps-params", template, scenario, variant, attempt))
        if made is not None:
            break
    else:
        raise RuntimeError(f"template {template} fits none of {ATTEMPTS} worlds of scenario {scenario}")
    scenario_id = f"{template}-{scenario}"
    hidden = {
        "template": template,
        "scenario": scenario_id,
        "variant": variant,
        "world_seed": world_seed,
        "params": made["params"],
        "apps": made["apps"],
        "gold": [{"thought": thought, "code": code} for thought, code in made["gold"]],
        "checks": made["checks"],
        "answer": made["answer"],
    }
    return f"{scenario_id}_{variant}", level, world_seed, made["instruction"], hidden


def scenario_tasks(split: str, seed: int) -> Iterator[tuple[str, str, int, str, dict]]:
    """Endless seeded stream of (task_id, difficulty, task_seed, instruction, hidden): scenarios of random
    templates, each as its VARIANTS variants in a row. Scenario seeds are even for "train", odd for "eval"."""
    if split not in SPLITS:
        raise ValueError(f"apps tasks come in splits {SPLITS}, not {split!r}")
    rng = task_rng("apps-scenarios", split, seed)
    names = sorted(TEMPLATES)
    while True:
        template = rng.choice(names)
        scenario = 2 * rng.getrandbits(40) + SPLITS.index(split)
        for variant in range(1, VARIANTS + 1):
            yield make_task(template, scenario, variant)
