"""Web navigation in the image of WebArena (AgentGym-RL's web scenario, paper 002 section 4.1), offline: a small
generated website of three sites (a shop's admin, a forum, a code host) served in process, observed as an
accessibility tree with element ids, and acted on with WebArena's actions.

The site is fixed (the same on every machine): 40 products in 5 categories and 100 orders in the shop admin,
5 forums of 36 threads, 12 repositories with their issues and stars. An episode gets its own copy of what can
change. Pages (`/`, `/shop`, `/shop/products`, `/shop/orders`, `/forum`, `/git`, ...) show 10 rows a page with
"Next page" and "Previous page" links. Actions, as WebArena writes them:

    click [id]                      a link, a button or a textbox (focus)
    type [id] [text] [1]            type into a textbox; a last [1] (the default) presses Enter, which submits
    hover [id], scroll [down|up]    scroll moves a window of 40 lines over a long page
    goto [url], go_back, go_forward
    stop [answer]                   ends the episode; the answer of a question, anything for the others

Tasks come as WebArena's three kinds, checked as its evaluators check them: information seeking (the stop
answer against the gold, case and spaces aside), navigation (the URL at stop), and content changes (the whole
site state at stop against the expected one: the change made and nothing else). The reward is 1 or 0. The
expert follows its template's route by clicking the links it reads on each page (paging until the one it needs
shows), types the change and stops.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, field_validator

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, Step, Task, echo, task_rng
from gymflow.envs.names import full_names, place_name

HOST = "http://webnav.local"
PER_PAGE, WINDOW = 10, 40
LEVELS = ("easy", "medium", "hard")
CATEGORIES = ("kitchen", "garden", "office", "outdoor", "toys")
NOUNS = (
    "lamp",
    "kettle",
    "chair",
    "hose",
    "planter",
    "stapler",
    "tent",
    "puzzle",
    "mug",
    "rake",
    "desk",
    "kite",
)
STATUSES = ("pending", "processing", "shipped", "delivered", "canceled")
FORUMS = ("cooking", "cycling", "gardening", "movies", "photography")
TOPICS = ("tips", "questions", "gear", "stories", "help", "news")
ACTION = re.compile(r"(\w+)((?:\s*\[[^\]]*\])*)\s*", re.DOTALL)
ME = "you"  # who the agent is on the forum and the code host

SYSTEM_PROMPT = (
    "You are an autonomous intelligent agent tasked with navigating a web browser. You get an objective, the "
    "current page's URL and its accessibility tree, where each element has an id in brackets. Actions: "
    "click [id]; type [id] [text] [1] (the last [1] presses Enter, which submits; [0] does not); hover [id]; "
    "scroll [down] or scroll [up]; goto [url]; go_back; go_forward; stop [answer] (ends the task; give the answer "
    "to a question, or stop [done] when the objective is an action). Answer in the format:\n"
    "Thought: <your thought>\nAction: <one action>"
)


@lru_cache(maxsize=1)
def site() -> dict[str, Any]:
    """The shop, forum and code host: the same on every machine."""
    rng = task_rng("webnav-site")
    used: set[str] = set()
    people = rng.sample(full_names(), 40)
    products = {}
    for i in range(40):
        sku = f"SKU-{1000 + i}"
        products[sku] = {
            "name": f"{place_name(rng, used, 2)} {rng.choice(NOUNS)}",
            "category": CATEGORIES[i % len(CATEGORIES)],
            "price": round(rng.uniform(4, 200), 2),
            "stock": rng.randrange(0, 300),
        }
    orders = {
        1000 + 7 * i: {
            "customer": rng.choice(people),
            "status": rng.choice(STATUSES),
            "items": rng.sample(sorted(products), rng.randint(1, 3)),
        }
        for i in range(100)
    }
    threads = {}
    for i in range(36):
        posts = [(rng.choice(people), f"{rng.choice(TOPICS)} note {rng.randrange(1000)}")]
        posts += [(rng.choice(people), f"reply {rng.randrange(1000)}") for _ in range(rng.randint(0, 5))]
        threads[str(200 + i)] = {
            "forum": FORUMS[i % len(FORUMS)],
            "title": f"{place_name(rng, used, 3)} {rng.choice(TOPICS)}",
            "posts": posts,
        }
    repos = {}
    for _ in range(12):
        owner, name = place_name(rng, used, 2).lower(), place_name(rng, used, 3).lower()
        issues = [
            {"title": f"{rng.choice(['fix', 'add', 'remove', 'update'])} {place_name(rng, used, 2).lower()}",
             "state": rng.choice(["open", "open", "closed"]), "author": rng.choice(people)}
            for _ in range(rng.randint(2, 9))
        ]  # fmt: skip
        repos[f"{owner}/{name}"] = {"stars": rng.randrange(0, 500), "starred": False, "issues": issues}
    for order in orders.values():
        order["total"] = round(sum(products[s]["price"] for s in order["items"]), 2)
    return {"products": products, "orders": orders, "threads": threads, "repos": repos}


def changed(change: list[str]) -> dict[str, Any]:
    """The site as a content change (kind, where, value) leaves it, in `changeable`'s terms."""
    kind, key, value = change
    after = copy.deepcopy(site())
    if kind == "price":
        after["products"][key]["price"] = round(float(value), 2)
    elif kind == "reply":
        after["threads"][key]["posts"].append((ME, value))
    elif kind == "issue":
        after["repos"][key]["issues"].append({"title": value, "state": "open", "author": ME})
    else:
        after["repos"][key].update(stars=after["repos"][key]["stars"] + 1, starred=True)
    return changeable(after)


def changeable(state: dict[str, Any]) -> dict[str, Any]:
    """What an episode can change, as a content change's check compares it: prices, posts, issues, stars."""
    return {
        "prices": {sku: p["price"] for sku, p in state["products"].items()},
        "posts": {tid: list(t["posts"]) for tid, t in state["threads"].items()},
        "issues": {name: [dict(i) for i in r["issues"]] for name, r in state["repos"].items()},
        "stars": {name: (r["stars"], r["starred"]) for name, r in state["repos"].items()},
    }


# ---- tasks: (level, objective, goal, route) from a seed; a goal is {"answer": ...}, {"url": ...} or {"state": ...}
# A route is the links to follow from the home page: [name, the page it opens]; the expert pages through a list
# until the link it needs shows.

Made = tuple[str, str, dict[str, Any], list[list[str]]]
SHOP, ORDERS, PRODUCTS = ["Shop admin", "/shop"], ["Orders", "/shop/orders"], ["Products", "/shop/products"]


def _repo_route(name: str) -> list[list[str]]:
    return [["Git", "/git"], [name, f"/git/{name}"]]


def _thread_route(tid: str) -> list[list[str]]:
    thread = site()["threads"][tid]
    return [
        ["Forum", "/forum"],
        [thread["forum"], f"/forum/{thread['forum']}"],
        [thread["title"], f"/forum/t/{tid}"],
    ]


def _t_order_status(rng: Any) -> Made:
    order_id = rng.choice(sorted(site()["orders"]))
    answer = site()["orders"][order_id]["status"]
    return (
        "easy",
        f"What is the status of order #{order_id}?",
        {"answer": answer},
        [SHOP, ORDERS, [f"Order #{order_id}", f"/shop/orders/{order_id}"]],
    )


def _t_order_customer(rng: Any) -> Made:
    order_id = rng.choice(sorted(site()["orders"]))
    answer = site()["orders"][order_id]["customer"]
    route = [SHOP, ORDERS, [f"Order #{order_id}", f"/shop/orders/{order_id}"]]
    return "easy", f"Who placed order #{order_id}?", {"answer": answer}, route


def _t_product_stock(rng: Any) -> Made:
    sku = rng.choice(sorted(site()["products"]))
    product = site()["products"][sku]
    route = [SHOP, PRODUCTS, [product["name"], f"/shop/products/{sku}"]]
    return (
        "easy",
        f"How many units of '{product['name']}' are in stock?",
        {"answer": str(product["stock"])},
        route,
    )


def _t_star(rng: Any) -> Made:
    name = rng.choice(sorted(site()["repos"]))
    return "easy", f"Star the repository {name}.", {"change": ["star", name, ""]}, _repo_route(name)


def _t_goto_issues(rng: Any) -> Made:
    name = rng.choice(sorted(site()["repos"]))
    return (
        "easy",
        f"Open the issues page of the repository {name}.",
        {"url": f"/git/{name}/issues"},
        [*_repo_route(name), ["Issues", f"/git/{name}/issues"]],
    )


def _t_open_issues(rng: Any) -> Made:
    name = rng.choice(sorted(site()["repos"]))
    count = sum(i["state"] == "open" for i in site()["repos"][name]["issues"])
    objective = f"How many open issues does the repository {name} have?"
    return (
        "medium",
        objective,
        {"answer": str(count)},
        [*_repo_route(name), ["Issues", f"/git/{name}/issues"]],
    )


def _t_last_reply(rng: Any) -> Made | None:
    tid = rng.choice(sorted(site()["threads"]))
    thread = site()["threads"][tid]
    if len(thread["posts"]) < 2:
        return None
    objective = f"In the {thread['forum']} forum, who wrote the last reply to the thread '{thread['title']}'?"
    return "medium", objective, {"answer": thread["posts"][-1][0]}, _thread_route(tid)


def _t_set_price(rng: Any) -> Made:
    sku = rng.choice(sorted(site()["products"]))
    product = site()["products"][sku]
    price = f"{product['price'] * rng.choice([r / 100 for r in range(50, 151, 5) if r != 100]):.2f}"
    objective = f"Set the price of the product '{product['name']}' to {price}."
    return (
        "medium",
        objective,
        {"change": ["price", sku, price]},
        [SHOP, PRODUCTS, [product["name"], f"/shop/products/{sku}"]],
    )


def _t_lowest_stock(rng: Any) -> Made:
    category = rng.choice(CATEGORIES)
    found = [p for p in site()["products"].values() if p["category"] == category]
    lowest = min(found, key=lambda p: (p["stock"], p["name"]))
    objective = f"Which product of the category {category} has the lowest stock? Give its name."
    return (
        "hard",
        objective,
        {"answer": lowest["name"]},
        [SHOP, PRODUCTS, [f"Category: {category}", f"/shop/products?category={category}"]],
    )


def _t_reply(rng: Any) -> Made:
    tid = rng.choice(sorted(site()["threads"]))
    thread = site()["threads"][tid]
    text = f"{rng.choice(['thanks', 'same here', 'good point', 'agreed'])} {rng.randrange(100)}"
    objective = f"In the {thread['forum']} forum, reply '{text}' to the thread '{thread['title']}'."
    return "hard", objective, {"change": ["reply", tid, text]}, _thread_route(tid)


def _t_new_issue(rng: Any) -> Made:
    name = rng.choice(sorted(site()["repos"]))
    title = (
        f"{rng.choice(['crash on', 'typo in', 'slow', 'docs for'])} {rng.choice(NOUNS)} {rng.randrange(100)}"
    )
    objective = f"Open an issue titled '{title}' in the repository {name}."
    return (
        "hard",
        objective,
        {"change": ["issue", name, title]},
        [*_repo_route(name), ["Issues", f"/git/{name}/issues"]],
    )


TEMPLATES: dict[str, Callable[[Any], Made | None]] = {
    "order_status": _t_order_status,
    "order_customer": _t_order_customer,
    "product_stock": _t_product_stock,
    "star": _t_star,
    "goto_issues": _t_goto_issues,
    "open_issues": _t_open_issues,
    "last_reply": _t_last_reply,
    "set_price": _t_set_price,
    "lowest_stock": _t_lowest_stock,
    "reply": _t_reply,
    "new_issue": _t_new_issue,
}


def made(hidden: dict[str, Any]) -> Made | None:
    return TEMPLATES[hidden["template"]](task_rng("webnav-choices", hidden["choices"]))


class WebnavHidden(Hidden):
    template: str
    choices: int = Field(ge=0)
    goal: dict[str, str | list[str]] = Field(min_length=1, max_length=1)  # answer, url or change
    route: list[list[str]] = Field(min_length=1, max_length=8)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value not in TEMPLATES:
            raise ValueError(f"not one of {sorted(TEMPLATES)}")
        return value


# ---- pages: (depth, role, name, what it does) lines; an element that acts gets an id -------------------------

Line = tuple[int, str, str, tuple[str, ...] | None]


def _link(depth: int, name: str, path: str) -> Line:
    return depth, "link", name, ("go", path)


def _pager(lines: list[Line], rows: list[list[Line]], path: str, query: dict[str, str]) -> list[Line]:
    """`rows` (each an item's lines) 10 a page, as ?page=N of `path` (other query keys kept), with the links
    between pages."""
    page = max(1, int(query.get("page", "1"))) if query.get("page", "1").isdigit() else 1
    pages = max(1, -(-len(rows) // PER_PAGE))
    page = min(page, pages)
    lines += [line for row in rows[(page - 1) * PER_PAGE : page * PER_PAGE] for line in row]
    lines.append((1, "StaticText", f"Page {page} of {pages}", None))
    extra = "".join(f"&{k}={v}" for k, v in sorted(query.items()) if k != "page")
    if page > 1:
        lines.append(_link(1, "Previous page", f"{path}?page={page - 1}{extra}"))
    if page < pages:
        lines.append(_link(1, "Next page", f"{path}?page={page + 1}{extra}"))
    return lines


def render(state: dict[str, Any], url: str) -> tuple[str, list[Line]] | None:
    """The page at `url` as (title, lines), or None where there is none."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") or "/"
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    seg = path.strip("/").split("/") if path != "/" else []
    home = _link(1, "Home", "/")
    if not seg:
        return "Home", [
            home,
            _link(1, "Shop admin", "/shop"),
            _link(1, "Forum", "/forum"),
            _link(1, "Git", "/git"),
        ]
    if seg == ["shop"]:
        return "Shop admin", [
            home,
            (1, "heading", "Shop admin", None),
            _link(1, "Products", "/shop/products"),
            _link(1, "Orders", "/shop/orders"),
        ]
    if seg == ["shop", "products"]:
        category = query.get("category")
        lines = [home, (1, "heading", "Products", None)]
        lines += [_link(1, f"Category: {c}", f"/shop/products?category={c}") for c in CATEGORIES]
        rows = []
        for sku, p in sorted(state["products"].items()):
            if category in (None, p["category"]):
                about = f"{sku} | {p['category']} | ${p['price']:.2f} | stock {p['stock']}"
                rows.append([_link(1, p["name"], f"/shop/products/{sku}"), (2, "StaticText", about, None)])
        return f"Products{f' in {category}' if category else ''}", _pager(lines, rows, path, query)
    if len(seg) == 3 and seg[:2] == ["shop", "products"] and seg[2] in state["products"]:
        p = state["products"][seg[2]]
        return p["name"], [
            home, _link(1, "Products", "/shop/products"), (1, "heading", p["name"], None),
            (1, "StaticText", f"SKU {seg[2]}, category {p['category']}, stock {p['stock']}", None),
            (1, "textbox", f"Price (now {p['price']:.2f})", ("price", seg[2])),
            (1, "button", "Save", ("submit", "price", seg[2])),
        ]  # fmt: skip
    if seg == ["shop", "orders"]:
        rows = []
        for oid, o in sorted(state["orders"].items()):
            about = (2, "StaticText", f"{o['customer']} | ${o['total']:.2f}", None)
            rows.append([_link(1, f"Order #{oid}", f"/shop/orders/{oid}"), about])
        return "Orders", _pager([home, (1, "heading", "Orders", None)], rows, path, query)
    if (
        len(seg) == 3
        and seg[:2] == ["shop", "orders"]
        and seg[2].isdigit()
        and int(seg[2]) in state["orders"]
    ):
        o = state["orders"][int(seg[2])]
        items = ", ".join(state["products"][s]["name"] for s in o["items"])
        return f"Order #{seg[2]}", [
            home, _link(1, "Orders", "/shop/orders"), (1, "heading", f"Order #{seg[2]}", None),
            (1, "StaticText", f"Customer: {o['customer']}", None), (1, "StaticText", f"Status: {o['status']}", None),
            (1, "StaticText", f"Items: {items}", None), (1, "StaticText", f"Total: ${o['total']:.2f}", None),
        ]  # fmt: skip
    if seg == ["forum"]:
        return "Forums", [home, (1, "heading", "Forums", None), *[_link(1, f, f"/forum/{f}") for f in FORUMS]]
    if len(seg) == 2 and seg[0] == "forum" and seg[1] in FORUMS:
        rows = [
            [_link(1, t["title"], f"/forum/t/{tid}")]
            for tid, t in sorted(state["threads"].items())
            if t["forum"] == seg[1]
        ]
        return seg[1], _pager(
            [home, _link(1, "Forum", "/forum"), (1, "heading", seg[1], None)], rows, path, query
        )
    if len(seg) == 3 and seg[:2] == ["forum", "t"] and seg[2] in state["threads"]:
        t = state["threads"][seg[2]]
        lines = [home, _link(1, t["forum"], f"/forum/{t['forum']}"), (1, "heading", t["title"], None)]
        lines += [(1, "article", f"{author}: {text}", None) for author, text in t["posts"]]
        lines += [
            (1, "textbox", "Reply", ("reply", seg[2])),
            (1, "button", "Post", ("submit", "reply", seg[2])),
        ]
        return t["title"], lines
    if seg == ["git"]:
        rows = [[_link(1, name, f"/git/{name}")] for name in sorted(state["repos"])]
        return "Repositories", _pager([home, (1, "heading", "Repositories", None)], rows, path, query)
    name = "/".join(seg[1:3])
    if seg[0] == "git" and len(seg) in (3, 4) and name in state["repos"]:
        r = state["repos"][name]
        lines = [home, _link(1, "Git", "/git"), (1, "heading", name, None)]
        if len(seg) == 3:
            star = "Unstar" if r["starred"] else "Star"
            lines += [(1, "StaticText", f"Stars: {r['stars']}", None), (1, "button", star, ("star", name))]
            return name, [*lines, _link(1, "Issues", f"/git/{name}/issues")]
        if seg[3] == "issues":
            lines.append(_link(1, name, f"/git/{name}"))
            rows = [
                [(1, "StaticText", f"#{n} {i['title']} ({i['state']}, by {i['author']})", None)]
                for n, i in enumerate(r["issues"], 1)
            ]
            lines = _pager(lines, rows, path, query)
            lines += [
                (1, "textbox", "New issue title", ("issue", name)),
                (1, "button", "Create issue", ("submit", "issue", name)),
            ]
            return f"Issues of {name}", lines
    return None


class Webnav(Env):
    hidden_schema = WebnavHidden
    spec = EnvSpec(
        name="webnav",
        description="a WebArena-style site: shop admin, forum, code host",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=20,
        expert="follow the template's links, paging as needed",
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("webnav-tasks", seed)
        while True:
            hidden = {"template": rng.choice(sorted(TEMPLATES)), "choices": rng.randrange(2**31)}
            out = made(hidden)
            if out is None:
                continue
            level, objective, goal, route = out
            yield Task(
                env="webnav",
                task_id=f"webnav-{hidden['template']}-{task_rng(objective).randrange(10**9)}",  # one id an objective
                split=split,
                difficulty=level,
                seed=hidden["choices"],
                instruction=objective,
                hidden={**hidden, "goal": goal, "route": route},
            )

    def _reset(self, task: Task) -> str:
        out = made(task.hidden)
        if out is None or (out[1], out[2], out[3]) != (
            task.instruction,
            task.hidden["goal"],
            task.hidden["route"],
        ):
            raise BadTask("the objective, goal and route are not what the template makes of these choices")
        self.state = copy.deepcopy(site())
        self.history, self.ahead, self.url = [], [], "/"
        self.typed: dict[tuple[str, ...], str] = {}
        self.top = 0
        return f"Objective: {task.instruction}\n{self._show()}"

    # ---- what the agent sees ------------------------------------------------------------------------------------

    def _page(self) -> tuple[str, list[tuple[int | None, Line]]]:
        """The current page's title and lines, each with its id (None for text)."""
        title, lines = render(self.state, self.url) or ("Not found", [_link(1, "Home", "/")])
        numbered, next_id = [], 1
        for line in lines:
            acts = line[3] is not None
            numbered.append((next_id if acts else None, line))
            next_id += acts
        return title, numbered

    def _show(self, note: str = "") -> str:
        title, numbered = self._page()
        text = []
        for element, (depth, role, name, what) in numbered:
            value = self.typed.get(what) if element else None
            shown = f"[{element}] {role} '{name}'" if element else f"{role} '{name}'"
            text.append("  " * depth + shown + (f" value: '{value}'" if value else ""))
        window = text[self.top : self.top + WINDOW]
        more = (
            f"\n({len(text) - self.top - WINDOW} more lines: scroll [down])"
            if len(text) > self.top + WINDOW
            else ""
        )
        head = f"{note}\n" if note else ""
        return (
            f"{head}URL: {HOST}{self.url}\nTab 0 (current): {title}\n[0] RootWebArea '{title}'\n"
            + "\n".join(window)
            + more
        )

    # ---- actions ------------------------------------------------------------------------------------------------

    def _step(self, action: str) -> Step:
        action = action.strip().strip("`").strip()
        match = ACTION.fullmatch(action)
        if match is None:
            return self._told(f'Invalid action "{echo(action)}". Example: click [3]')
        verb, args = match.group(1).lower(), re.findall(r"\[([^\]]*)\]", match.group(2))
        if verb == "stop":
            return self._stop(args[0] if args else "")
        if verb in ("go_back", "go_forward"):
            source, sink = (self.history, self.ahead) if verb == "go_back" else (self.ahead, self.history)
            if not source:
                return self._told(f"There is no page to {verb.replace('_', ' ')} to.")
            sink.append(self.url)
            self.url, self.top = source.pop(), 0
            return self._told("")
        if verb == "goto":
            if len(args) != 1:
                return self._told("goto takes one URL: goto [http://webnav.local/shop]")
            url = args[0].strip()
            path = url[len(HOST) :] if url.startswith(HOST) else url
            if not path.startswith("/"):
                return self._told(f"Only {HOST} can be reached: goto [{HOST}/...]")
            return self._visit(path)
        if verb == "scroll":
            down = (args[0].strip().lower() if args else "") == "down"
            if not args or args[0].strip().lower() not in ("down", "up"):
                return self._told("scroll takes a direction: scroll [down] or scroll [up]")
            self.top = self.top + WINDOW if down else max(0, self.top - WINDOW)
            return self._told("")
        if verb not in ("click", "hover", "type"):
            return self._told(
                f'No action "{echo(verb)}". Actions: click, type, hover, scroll, goto, go_back, go_forward, stop.'
            )
        if not args or not args[0].strip().isdigit():
            return self._told(f"{verb} needs an element id: {verb} [3]")
        _, numbered = self._page()
        element = int(args[0])
        line = next((ln for i, ln in numbered if i == element), None)
        if line is None:
            return self._told(f"There is no element [{element}] on this page.")
        what = line[3]
        if verb == "hover":
            return self._told(f"Hovering over {line[1]} '{line[2]}'.")
        if verb == "type":
            if line[1] != "textbox" or len(args) < 2:
                return self._told("type needs a textbox's id and the text: type [5] [hello] [1]")
            self.typed[what] = args[1][:200]
            if args[2:] in ([], ["1"]):
                return self._submit(what[0], what[1])
            return self._told("")
        if what[0] == "go":
            return self._visit(what[1])
        if what[0] == "submit":
            return self._submit(what[1], what[2])
        if what[0] == "star":
            repo = self.state["repos"][what[1]]
            repo["starred"] = not repo["starred"]
            repo["stars"] += 1 if repo["starred"] else -1
            return self._told("")
        return self._told(
            f"The textbox '{line[2]}' has the focus: type into it with type [{element}] [text]."
        )

    def _visit(self, path: str) -> Step:
        if render(self.state, path) is None:
            return self._told(f"404: no page at {echo(path, 80)}.")
        self.history.append(self.url)
        self.ahead, self.url, self.top = [], path, 0
        return self._told("")

    def _submit(self, form: str, key: str) -> Step:
        text = self.typed.get((form, key), "").strip()
        if not text:
            return self._told("The form is empty: type into its textbox first.")
        if form == "price":
            try:
                price = round(float(text.lstrip("$")), 2)
            except ValueError:
                return self._told(f"'{echo(text, 40)}' is not a price.")
            if not 0 < price < 100_000:
                return self._told("A price is between 0 and 100000.")
            self.state["products"][key]["price"] = price
        elif form == "reply":
            self.state["threads"][key]["posts"].append((ME, text))
        else:
            self.state["repos"][key]["issues"].append({"title": text, "state": "open", "author": ME})
        self.typed.pop((form, key), None)
        return self._told("Saved.")

    def _stop(self, answer: str) -> Step:
        goal = self.task.hidden["goal"]
        if "answer" in goal:
            right = " ".join(answer.lower().split()) == " ".join(str(goal["answer"]).lower().split())
        elif "url" in goal:
            right = urlsplit(self.url).path.rstrip("/") == goal["url"]
        else:
            right = changeable(self.state) == changed(goal["change"])
        return Step(f"Stopped with answer '{echo(answer, 80)}'.", 1.0 if right else 0.0, True)

    def _told(self, note: str) -> Step:
        return Step(self._show(note), 0.0, False)

    # ---- the expert: the route's links by name, then the change, then stop --------------------------------------

    def expert_step(self) -> tuple[str, str]:
        goal, route = self.task.hidden["goal"], self.task.hidden["route"]
        _, numbered = self._page()
        by_name = {line[2]: i for i, line in numbered if i is not None}
        if "change" in goal and changeable(self.state) == changed(goal["change"]):
            return "The change is made.", "stop [done]"
        here = [i for i, (_, target) in enumerate(route) if _same_page(target, self.url)]
        if not here and urlsplit(self.url).path not in ("", "/"):
            return "This page is off my way: I go home.", f"goto [{HOST}/]"
        step = here[-1] + 1 if here else 0
        if step < len(route):
            name = route[step][0]
            if name in by_name:
                return f"I open '{name}'.", f"click [{by_name[name]}]"
            if "Next page" in by_name:
                return f"'{name}' is not on this page: I page on.", f"click [{by_name['Next page']}]"
            return "What I need is not here: I go home.", f"goto [{HOST}/]"
        if "answer" in goal:
            return "The answer is on this page.", f"stop [{goal['answer']}]"
        if "url" in goal:
            return "This is the page.", "stop [done]"
        if "Star" in by_name:
            return "I star it.", f"click [{by_name['Star']}]"
        box = next(i for i, line in numbered if i is not None and line[1] == "textbox")
        return "I fill in the form and submit it.", f"type [{box}] [{goal['change'][2]}] [1]"


def _same_page(target: str, url: str) -> bool:
    """Whether `url` is the page `target` names, any of its list pages (a category filter kept)."""
    a, b = urlsplit(target), urlsplit(url)
    category = lambda q: parse_qs(q).get("category")  # noqa: E731
    return a.path.rstrip("/") == b.path.rstrip("/") and category(a.query) == category(b.query)
