"""The world's state, generated from a seed: plain JSON data that the apps' APIs (`api.py`, where `World`, the
one door API calls go through, lives) read and change.

    state = build_world(seed)     # plain JSON data; the same seed gives an equal dict in any process

The state holds one user (the supervisor) and 16 other people, 14 of them the user's phone contacts:

    user         {first_name, last_name, email, phone_number}
    passwords    {app: password} for phone, venmo, simple_note, file_system
    phone        contacts [{contact_id, first_name, last_name, email, phone_number, relationships}],
                 messages [{message_id, sender, receiver, message, sent_at}] (phone numbers)
    venmo        users [{first_name, last_name, email}], friends [email], balance,
                 transactions [{transaction_id, sender, receiver, amount, description, created_at, likes}],
                 payment_requests [{payment_request_id, sender, receiver, amount, description, created_at,
                                    approved_at, reminder_count}] (sender asked receiver for money)
    simple_note  notes [{note_id, title, content, tags, created_at, updated_at}]
    file_system  files [{path, content, created_at}] under ~/documents/, ~/bills/, ~/photos/

Every world has what each task template may need (roommates, siblings, coworkers; texts saying what the user
owes; today's feed transactions; pending payment requests both ways; bills), so a template picks its people
and values from the world; `scenarios` draws another world seed in the rare case one does not fit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gymflow.envs.base import task_rng

NOW = "2023-05-18T21:26:01"  # the world's fixed "today" (AppWorld's date in LOOP's transcripts)

APPS_WITH_LOGIN = ("phone", "venmo", "simple_note", "file_system")
RELATIONSHIPS = ("roommate", "sibling", "parent", "partner", "coworker", "friend")

FIRST = (  # noqa: SIM905 (a list of names reads best as words)
    "Aaron Adriana Alex Amber Anita Brandon Brenda Caleb Carla Chris Dana Debra Derek Diana Edwin Elena Eric "
    "Fiona Gavin Grace Hannah Isaac Ivy Jason Jenna Joel Julia Kevin Kristin Laura Leon Lucy Marcus Maya "
    "Melissa Nathan Nina Omar Paula Quinn Rachel Ryan Sofia Tara Trevor Victor Wendy Zoe"
).split()
LAST = (  # noqa: SIM905
    "Bailey Burch Carter Diaz Ellis Fisher Garcia Hayes Ingram Jensen Kim Lopez Meyer Nguyen Ortiz Patel "
    "Price Reed Ritter Santos Shaw Turner Vance Walsh Weber White Wilson Young"
).split()
DOMAINS = ("gmail.com", "yahoo.com", "outlook.com")
# Small talk: no "owe" and no "$", so a search for "owe" finds only the texts that say what the user owes.
CHAT = (
    "Are we still on for dinner tonight?",
    "Sure, see you at 7.",
    "Can you send me the photos from the trip?",
    "Just sent them!",
    "Happy Friday!",
    "Did you watch the game last night?",
    "Running a bit late, sorry.",
    "No worries, take your time.",
    "Call me when you get a chance.",
    "Thanks for the help today!",
    "Let's go hiking this weekend.",
    "Sounds great, count me in.",
    "Don't forget the meeting at 10.",
    "Got it, thanks.",
    "Good luck with the interview!",
    "Can you pick up some milk?",
    "The package arrived.",
    "I'll be home around 6.",
)
OWED_FOR = ("groceries", "pizza", "concert tickets", "taxi", "movie tickets", "dinner", "gas", "brunch")
OWED_AMOUNTS = (12, 18, 24, 27.5, 36, 42, 45, 54, 62.5, 80)
PAYMENTS = (
    "Dinner", "Groceries", "Rent share", "Movie night", "Taxi", "Concert tickets", "Coffee", "Birthday gift",
    "Utilities", "Pizza", "Gas money", "Brunch",
)  # fmt: skip
NOTES = (
    ("Grocery list", "milk\neggs\nbread\napples", ["shopping"]),
    ("Book ideas", "A mystery set on a train.\nA story about two rival bakers.", ["writing"]),
    ("Workout plan", "Mon: run 5k\nWed: weights\nFri: swim", ["health"]),
    ("Gift ideas", "Mom: scarf\nDad: watch\nBest friend: headphones", ["family"]),
    ("Movies to watch", "Inception\nArrival\nParasite", ["fun"]),
    ("Trip to Lisbon", "Flights booked.\nHotel near the river.\nVisit Belem tower.", ["travel"]),
    ("Meeting notes", "Q2 goals reviewed.\nNext sync on Monday.", ["work"]),
    ("Recipes to try", "Pad thai\nShakshuka\nBanana bread", ["cooking"]),
)
DOCUMENTS = (  # file name, a title for it, content
    ("packing_list.txt", "Packing list", "passport\ncharger\nsunscreen\nswimsuit"),
    ("reading_list.txt", "Reading list", "Dune\nThe Hobbit\nSapiens"),
    ("pancake_recipe.txt", "Pancake recipe", "2 cups flour\n2 eggs\n1.5 cups milk\n1 tbsp sugar"),
    ("wifi_password.txt", "Wifi password", "Network: HomeNet\nPassword: sunflower42"),
    ("chores.txt", "Chores", "Mon: trash\nWed: laundry\nSat: vacuum"),
    ("garden_plan.txt", "Garden plan", "Tomatoes by the fence\nBasil in pots\nWater every morning"),
)
BILLS = ("electricity", "internet", "water")
BILL_MONTHS = ("2023-02", "2023-03", "2023-04")
MONTH_NAMES = {"2023-02": "February 2023", "2023-03": "March 2023", "2023-04": "April 2023"}
PASSWORD_CHARS = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789+#!"


# ---- the world's content -------------------------------------------------------------------------------
def _now() -> datetime:
    return datetime.fromisoformat(NOW)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _today(rng: Any) -> str:
    """A time today before NOW (between 07:00 and 21:00)."""
    midnight = _now().replace(hour=0, minute=0, second=0)
    return _stamp(midnight + timedelta(seconds=rng.randint(7 * 3600, 21 * 3600)))


def _past(rng: Any, days: int) -> str:
    """A time on one of the `days` days before today."""
    midnight = _now().replace(hour=0, minute=0, second=0)
    return _stamp(midnight - timedelta(seconds=rng.randint(60, days * 86_400)))


def _money(rng: Any, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _dollars(amount: float) -> str:
    """27.5 -> '27.50', 54.0 -> '54'."""
    return f"{amount:g}" if float(amount).is_integer() else f"{amount:.2f}"


def _people(rng: Any) -> tuple[dict, list[dict], list[str]]:
    """The user, 16 others (unique first names; siblings and parents share the user's last name) and the
    relationship of each of the first 14 (the contacts)."""
    firsts = rng.sample(FIRST, 17)
    lasts = [rng.choice(LAST) for _ in range(17)]
    relations = ["roommate"] * rng.randint(2, 3) + ["sibling"] * rng.randint(2, 3) + ["parent"] * 2
    relations += ["partner"] * rng.randint(0, 1) + ["coworker"] * 3
    relations += ["friend"] * (14 - len(relations))
    rng.shuffle(relations)
    phones: set[str] = set()
    emails: set[str] = set()
    people = []
    for i, (first, last) in enumerate(zip(firsts, lasts, strict=True)):
        if i > 0 and i <= 14 and relations[i - 1] in ("sibling", "parent"):
            last = lasts[0]
        style = rng.choice(("{f}.{l}", "{f}{l}", "{f}_{l}", "{f}.{i}"))
        local = style.format(f=first.lower(), l=last.lower(), i=last[0].lower())
        email = f"{local}@{rng.choice(DOMAINS)}"
        while email in emails:
            email = f"{local}{rng.randint(1, 99)}@{rng.choice(DOMAINS)}"
        phone = str(rng.randint(2_000_000_000, 9_999_999_999))
        while phone in phones:
            phone = str(rng.randint(2_000_000_000, 9_999_999_999))
        emails.add(email)
        phones.add(phone)
        people.append({"first_name": first, "last_name": last, "email": email, "phone_number": phone})
    return people[0], people[1:], relations


def _messages(rng: Any, user: dict, contacts: list[dict]) -> list[dict]:
    """Small talk with 8 contacts, and 3 other contacts' texts saying what the user owes them (one each)."""
    me = user["phone_number"]
    talkers = rng.sample(contacts, 11)
    texts = []
    for contact in talkers[:8]:
        start = rng.randrange(len(CHAT) - 3)
        for k in range(rng.randint(1, 3)):
            sent, received = (me, contact["phone_number"]), (contact["phone_number"], me)
            sender, receiver = sent if (k + start) % 2 == 0 else received
            texts.append((_past(rng, 20), sender, receiver, CHAT[start + k]))
    for contact, thing in zip(talkers[8:], rng.sample(OWED_FOR, 3), strict=True):
        amount = _dollars(rng.choice(OWED_AMOUNTS))
        message = f"Hey, you owe me ${amount} for the {thing}. No rush!"
        texts.append((_past(rng, 6), contact["phone_number"], me, message))
    texts.sort()
    return [
        {"message_id": i, "sender": s, "receiver": r, "message": m, "sent_at": t}
        for i, (t, s, r, m) in enumerate(texts, 1)
    ]


def _transactions(rng: Any, user: dict, contacts: list[dict], others: list[dict], friends: list[str]) -> list:
    """The user's own payments (sent to 6 contacts, 1-3 each; received from 5) and friends' payments for the
    social feed: 8 today (2 involving a roommate, 2 a coworker) and 14 older ones."""
    me = user["email"]
    rows = []
    for contact in rng.sample(contacts, 6):
        for _ in range(rng.randint(1, 3)):
            rows.append((_past(rng, 60), me, contact["email"], _money(rng, 5, 150), rng.choice(PAYMENTS)))
    for contact in rng.sample(contacts, 5):
        rows.append((_past(rng, 60), contact["email"], me, _money(rng, 5, 150), rng.choice(PAYMENTS)))
    people = contacts + others
    by_relation = {
        rel: [c for c, r in zip(contacts, _relations(contacts), strict=True) if r == rel]
        for rel in ("roommate", "coworker")
    }
    for k in range(22):
        if k < 4:  # today, with a roommate (k = 0, 1) or a coworker (k = 2, 3) on one side
            one = rng.choice(by_relation["roommate" if k < 2 else "coworker"])
        else:
            one = rng.choice([p for p in people if p["email"] in friends])
        two = rng.choice([p for p in people if p is not one])
        sender, receiver = (one, two) if rng.random() < 0.5 else (two, one)
        when = _today(rng) if k < 8 else _past(rng, 10)
        rows.append((when, sender["email"], receiver["email"], _money(rng, 5, 300), rng.choice(PAYMENTS)))
    rows.sort()
    out = []
    for i, (when, sender, receiver, amount, description) in enumerate(rows, 1):
        crowd = [e for e in friends if e not in (sender, receiver)]
        likes = rng.sample(crowd, rng.randint(0, 3))
        if me not in (sender, receiver) and rng.random() < 0.25:
            likes.append(me)
        out.append(
            {
                "transaction_id": i,
                "sender": sender,
                "receiver": receiver,
                "amount": amount,
                "description": description,
                "created_at": when,
                "likes": likes,
            }
        )
    return out


def _relations(contacts: list[dict]) -> list[str]:
    return [c["relationships"][0] for c in contacts]


def _requests(rng: Any, user: dict, contacts: list[dict]) -> list[dict]:
    """Payment requests both ways. Sent by the user: pending to most siblings and 3 others, approved ones too.
    Received: pending from most roommates and 2 others (at most one pending per person), approved ones too.
    Statuses and amounts are drawn, so a template may find no target in a world; it then tries another."""
    me = user["email"]
    relations = _relations(contacts)
    siblings = [c for c, r in zip(contacts, relations, strict=True) if r == "sibling"]
    roommates = [c for c, r in zip(contacts, relations, strict=True) if r == "roommate"]
    rest = [c for c, r in zip(contacts, relations, strict=True) if r not in ("sibling", "roommate")]
    rows = []  # (contact, the user asks them, pending)
    for sibling in siblings:
        rows.append((sibling, True, rng.random() < 0.8))
        rows.append((sibling, True, rng.random() < 0.3))
    for roommate in roommates:
        rows.append((roommate, False, rng.random() < 0.7))
        rows.append((roommate, False, False))
    for other in rng.sample(rest, 3):
        rows.append((other, True, True))
    for other in rng.sample(rest, 2):
        rows.append((other, False, True))
    for other in rng.sample(rest, 2):
        rows.append((other, rng.random() < 0.5, False))
    out = []
    for contact, sent_by_me, pending in rows:
        sender, receiver = (me, contact["email"]) if sent_by_me else (contact["email"], me)
        created = _past(rng, 30)
        approved = (
            None if pending else _stamp(datetime.fromisoformat(created) + timedelta(hours=rng.randint(1, 20)))
        )
        if approved is not None and approved >= NOW:
            approved = created
        out.append(
            {
                "sender": sender,
                "receiver": receiver,
                "amount": float(rng.choice((15, 20, 25, 30, 40, 50, 60, 75))),
                "description": rng.choice(PAYMENTS),
                "created_at": created,
                "approved_at": approved,
                "reminder_count": rng.randint(0, 1) if pending and sent_by_me else 0,
            }
        )
    out.sort(key=lambda r: r["created_at"])
    return [{"payment_request_id": i, **r} for i, r in enumerate(out, 1)]


def _files(rng: Any) -> list[dict]:
    files = []
    for name, _, content in rng.sample(DOCUMENTS, 4):
        files.append({"path": f"~/documents/{name}", "content": content, "created_at": _past(rng, 90)})
    for kind in BILLS:
        for month in sorted(rng.sample(BILL_MONTHS, 2)):
            total = _money(rng, 30, 180)
            due = f"{month[:5]}{int(month[5:]) + 1:02d}-15"
            content = f"{kind.capitalize()} bill for {MONTH_NAMES[month]}\nTotal: ${total:.2f}\nDue: {due}"
            created = f"{month}-{rng.randint(20, 28)}T09:00:00"
            files.append({"path": f"~/bills/{kind}_{month}.txt", "content": content, "created_at": created})
    for _ in range(3):
        day = _past(rng, 60)
        name = f"IMG_{day[:10].replace('-', '')}_{day[11:13]}{day[14:16]}.jpg"
        files.append({"path": f"~/photos/{name}", "content": "(image data)", "created_at": day})
    return sorted({f["path"]: f for f in files}.values(), key=lambda f: f["path"])  # paths are keys: unique


def build_world(seed: int) -> dict[str, Any]:
    """The initial state from a seed: plain JSON data only (see the module docstring), equal for equal seeds
    in any process (task_rng, never hash())."""
    rng = task_rng("apps-world", seed)
    user, others, relations = _people(rng)
    contacts = []
    for i, (person, relation) in enumerate(zip(others[:14], relations, strict=True), 1):
        contacts.append({"contact_id": i, **person, "relationships": [relation]})
    strangers = others[14:]
    parents = {c["email"] for c in contacts if c["relationships"] == ["parent"]}
    friends = [c["email"] for c in contacts if c["email"] not in parents] + [strangers[0]["email"]]
    users = [{k: p[k] for k in ("first_name", "last_name", "email")} for p in [user, *others]]
    notes = []
    for i, (title, content, tags) in enumerate(rng.sample(NOTES, 6), 1):
        created = _past(rng, 60)
        notes.append(
            {"note_id": i, "title": title, "content": content, "tags": list(tags), "created_at": created,
             "updated_at": created}
        )  # fmt: skip
    passwords = {app: "".join(rng.choice(PASSWORD_CHARS) for _ in range(9)) for app in APPS_WITH_LOGIN}
    return {
        "user": user,
        "passwords": passwords,
        "phone": {"contacts": contacts, "messages": _messages(rng, user, contacts)},
        "venmo": {
            "users": users,
            "friends": friends,
            "balance": _money(rng, 1500, 4000),
            "transactions": _transactions(rng, user, contacts, strangers, friends),
            "payment_requests": _requests(rng, user, contacts),
        },
        "simple_note": {"notes": notes},
        "file_system": {"files": _files(rng)},
    }
