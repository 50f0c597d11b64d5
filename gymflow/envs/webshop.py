"""WebShop in the image of AgentGym's WebShop (Yao et al. 2022), offline: find and buy the product an
instruction describes in a generated store of 3,000 products, searching a real index and clicking pages.

The catalogue is fixed (the same on every machine): products of 12 types in 4 departments, each with a brand, 2
to 4 attributes ("water resistant", "wireless"), options (size, colour) from its type's lists, a price, a
description, features and reviews, and WebShop's ten-character ids. Search ranks title, attributes and
description with tantivy (BM25, in memory; the query's words only). Pages and actions are WebShop's, as text
with [SEP] between elements:

    search page    search[keywords]
    results        10 a page, up to 50: click[<id>], click[Next >], click[< Prev], click[Back to Search]
    item page      click[<option value>] (one per option kind), click[Description | Features | Reviews],
                   click[Buy Now], click[< Prev], click[Back to Search]

An instruction asks for a product type with some attributes, option values and a price limit, drawn from a
target product. Buy Now ends the episode with WebShop's reward: (attributes matched + options matched + price
within the limit) / (attributes + options + 1), times the type match (1 for the type, 0.5 for its department,
0.1 otherwise); success when it is 1. The expert searches the type and the attributes, pages to the target,
picks its options and buys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import tantivy
from pydantic import Field, field_validator

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, Step, Task, echo, task_rng

LEVELS = ("easy", "medium", "hard")
PER_PAGE, MAX_RESULTS = 10, 50
ACTION = re.compile(r"(search|click)\s*\[(.*)\]", re.IGNORECASE | re.DOTALL)
DEPARTMENTS = {  # department -> product type -> (attributes, option kinds)
    "fashion": {
        "running shoes": (
            ["breathable", "non slip", "lightweight", "arch support", "memory foam"],
            ["size", "color"],
        ),
        "t-shirt": (
            ["machine washable", "cotton", "slim fit", "short sleeve", "moisture wicking"],
            ["size", "color"],
        ),
        "rain jacket": (
            ["water resistant", "hooded", "packable", "zip pocket", "windproof"],
            ["size", "color"],
        ),
    },
    "electronics": {
        "headphones": (
            ["wireless", "noise cancelling", "long battery life", "foldable", "built in mic"],
            ["color"],
        ),
        "phone charger": (
            ["fast charging", "usb c", "compact", "dual port", "overheat protection"],
            ["color"],
        ),
        "bluetooth speaker": (
            ["waterproof", "portable", "long battery life", "deep bass", "wireless"],
            ["color"],
        ),
    },
    "home": {
        "coffee mug": (
            ["dishwasher safe", "microwave safe", "ceramic", "large capacity", "insulated"],
            ["color"],
        ),
        "desk lamp": (["dimmable", "led", "usb charging port", "adjustable arm", "eye caring"], ["color"]),
        "throw pillow": (
            ["soft", "machine washable", "hypoallergenic", "decorative", "hidden zipper"],
            ["size", "color"],
        ),
    },
    "beauty": {
        "face moisturizer": (
            ["fragrance free", "long lasting", "natural ingredients", "oil free", "spf"],
            ["size"],
        ),
        "shampoo": (
            ["sulfate free", "paraben free", "natural ingredients", "long lasting", "for dry hair"],
            ["size"],
        ),
        "lip balm": (["long lasting", "natural ingredients", "spf", "vegan", "fragrance free"], ["color"]),
    },
}
OPTIONS = {
    "size": ["small", "medium", "large", "x-large", "8 ounce", "16 ounce"],
    "color": ["black", "white", "navy blue", "red", "grey", "green", "pink"],
}
SIZES = {
    "running shoes": ["7", "8", "9", "10", "11"],
    "face moisturizer": ["1.7 ounce", "3.4 ounce", "5 ounce"],
    "shampoo": ["8 ounce", "16 ounce", "32 ounce"],
}
BRANDS = [
    "Alvora",
    "Brisk",
    "Cendra",
    "Dovetail",
    "Elmsway",
    "Fenwick",
    "Glimt",
    "Harlow",
    "Ivoria",
    "Juniper",
    "Kestrel",
    "Lumio",
]

SYSTEM_PROMPT = (
    "You are web shopping. I will give you an instruction about what to buy. Every round you see the page: its "
    "elements between [SEP], and you answer one action: search[keywords] where there is a search bar, or "
    "click[value] where value is one of the clickable elements of the page (a product id, an option, Next >, "
    "< Prev, Back to Search, Description, Features, Reviews, Buy Now). Answer in the format:\n"
    "Thought: <your thought>\nAction: <action>"
)


def _type_of(name: str) -> tuple[str, list[str], list[str]]:
    for department, types in DEPARTMENTS.items():
        if name in types:
            return department, *types[name]
    raise KeyError(name)


@lru_cache(maxsize=1)
def catalogue() -> dict[str, dict[str, Any]]:
    """id -> product, the same on every machine."""
    rng = task_rng("webshop-catalogue")
    products: dict[str, dict[str, Any]] = {}
    types = [t for types in DEPARTMENTS.values() for t in types]
    while len(products) < 3000:
        kind = rng.choice(types)
        department, attributes, option_kinds = _type_of(kind)
        asin = "B0" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8))
        attrs = sorted(rng.sample(attributes, rng.randint(2, 4)))
        options = {
            k: sorted(rng.sample(SIZES.get(kind, OPTIONS[k]) if k == "size" else OPTIONS[k], 3))
            for k in option_kinds
        }
        brand = rng.choice(BRANDS)
        title = f"{brand} {' '.join(a.title() for a in attrs[:2])} {kind.title()}"
        products[asin] = {
            "id": asin,
            "type": kind,
            "department": department,
            "title": title,
            "attributes": attrs,
            "options": options,
            "price": round(rng.uniform(5, 150), 2),
            "description": f"This {kind} by {brand} is {', '.join(attrs)}.",
            "features": [f"{a.capitalize()}." for a in attrs] + [f"Made by {brand}."],
            "reviews": [f"{rng.choice(['Great', 'Good', 'Fine'])} {kind}, {rng.choice(attrs)}."],
        }
    return products


@lru_cache(maxsize=1)
def index() -> tuple[tantivy.Index, list[str]]:
    """The catalogue in an in-memory tantivy index (BM25 over title, attributes and description)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("title", stored=False)
    builder.add_text_field("body", stored=False)
    builder.add_integer_field("number", stored=True, indexed=False)
    idx = tantivy.Index(builder.build())
    writer = idx.writer(heap_size=30_000_000, num_threads=1)
    ids = sorted(catalogue())
    for number, asin in enumerate(ids):
        p = catalogue()[asin]
        body = f"{' '.join(p['attributes'])} {p['description']} {p['type']}"
        writer.add_document(tantivy.Document(title=p["title"], body=body, number=number))
    writer.commit()
    writer.wait_merging_threads()
    idx.reload()
    return idx, ids


def search(query: str) -> list[str]:
    """The ids of the best MAX_RESULTS products for `query`'s words (ties by id)."""
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", query)[:32]]
    if not words:
        return []
    idx, ids = index()
    searcher = idx.searcher()
    hits = searcher.search(idx.parse_query(" ".join(words), ["title", "body"]), MAX_RESULTS + 20).hits
    ranked = sorted((-round(score, 5), ids[searcher.doc(a)["number"][0]]) for score, a in hits)
    return [asin for _, asin in ranked[:MAX_RESULTS]]


def reward(goal: dict[str, Any], bought: dict[str, Any], chosen: dict[str, str]) -> float:
    """WebShop's reward for buying `bought` with options `chosen` toward `goal`."""
    attrs = sum(a in bought["attributes"] for a in goal["attributes"])
    opts = sum(chosen.get(k) == v for k, v in goal["options"].items())
    price = bought["price"] <= goal["price"]
    score = (attrs + opts + price) / (len(goal["attributes"]) + len(goal["options"]) + 1)
    if bought["type"] == goal["type"]:
        kind = 1.0
    elif _type_of(bought["type"])[0] == _type_of(goal["type"])[0]:
        kind = 0.5
    else:
        kind = 0.1
    return round(score * kind, 4)


def _query(goal: dict[str, Any]) -> str:
    return " ".join([*goal["attributes"], goal["type"]])


class WebshopHidden(Hidden):
    target: str
    attributes: list[str] = Field(min_length=1, max_length=4)
    options: dict[str, str]
    price: float = Field(gt=0, le=10_000)
    type: str

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if value not in catalogue():
            raise ValueError("not a product of the catalogue")
        return value

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        if not any(value in types for types in DEPARTMENTS.values()):
            raise ValueError("not a product type of the store")
        return value


class WebShop(Env):
    hidden_schema = WebshopHidden
    spec = EnvSpec(
        name="webshop",
        description="find and buy a product in a store of 3,000",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=15,
        expert="search type and attributes, page to the target",
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("webshop-tasks", seed)
        ids = sorted(catalogue())
        while True:
            product = catalogue()[rng.choice(ids)]
            level = rng.choice(LEVELS)
            n_attrs, n_opts = {"easy": (1, 1), "medium": (2, 1), "hard": (2, 2)}[level]
            if len(product["options"]) < n_opts:
                continue
            attrs = sorted(rng.sample(product["attributes"], n_attrs))
            kinds = rng.sample(sorted(product["options"]), n_opts)
            options = {k: rng.choice(product["options"][k]) for k in sorted(kinds)}
            limit = float(int(product["price"] * rng.uniform(1.1, 1.6)) + 1)
            goal = {"attributes": attrs, "options": options, "price": limit, "type": product["type"]}
            found = search(_query(goal))
            if product["id"] not in found:  # the expert's query must find it within the result pages
                continue
            wanted = " and ".join(attrs)
            chosen = ", ".join(f"{k} {v}" for k, v in options.items())
            instruction = (
                f"i need a {wanted} {product['type']} with {chosen}, and price lower than {limit:g} dollars"
            )
            yield Task(
                env="webshop",
                task_id=f"webshop-{product['id']}-{task_rng(instruction).randrange(10**9)}",
                split=split,
                difficulty=level,
                seed=found.index(product["id"]),
                instruction=instruction,
                hidden={"target": product["id"], **goal},
            )

    def _reset(self, task: Task) -> str:
        goal = task.hidden
        if not set(goal["options"]) <= {"size", "color"}:
            raise BadTask("hidden.options: option kinds are size and color")
        self.goal = goal
        self.page: tuple[str, Any] = ("search", None)
        self.results: list[str] = []
        self.chosen: dict[str, str] = {}
        self.visited: list[str] = []
        return self._show()

    # ---- pages -----------------------------------------------------------------------------------------------

    def _show(self) -> str:
        head = f"WebShop [SEP] Instruction: [SEP] {self.task.instruction}"
        kind, arg = self.page
        if kind == "search":
            return f"{head} [SEP] Search"
        if kind == "results":
            start = arg * PER_PAGE
            shown = self.results[start : start + PER_PAGE]
            parts = ["Back to Search", f"Page {arg + 1} (Total results: {len(self.results)})"]
            parts += ["< Prev"] if arg else []
            parts += ["Next >"] if start + PER_PAGE < len(self.results) else []
            for asin in shown:
                p = catalogue()[asin]
                parts += [asin, p["title"], f"${p['price']:.2f}"]
            return " [SEP] ".join([head, *parts])
        p = catalogue()[arg]
        if kind == "item":
            parts = ["Back to Search", "< Prev"]
            for option, values in p["options"].items():
                parts += [option, *values]
            parts += [
                p["title"],
                f"Price: ${p['price']:.2f}",
                "Rating: N.A.",
                "Description",
                "Features",
                "Reviews",
                "Buy Now",
            ]
            return " [SEP] ".join([head, *parts])
        text = {
            "description": p["description"],
            "features": " [SEP] ".join(p["features"]),
            "reviews": " [SEP] ".join(p["reviews"]),
        }[kind]
        return " [SEP] ".join([head, "Back to Search", "< Prev", text])

    def available_actions(self) -> list[str]:
        kind, arg = self.page
        if kind == "search":
            return ["search[<keywords>]"]
        clicks = ["Back to Search"]
        if kind == "results":
            start = arg * PER_PAGE
            clicks += ["< Prev"] if arg else []
            clicks += ["Next >"] if start + PER_PAGE < len(self.results) else []
            clicks += self.results[start : start + PER_PAGE]
        elif kind == "item":
            clicks += ["< Prev", *[v for vs in catalogue()[arg]["options"].values() for v in vs]]
            clicks += ["Description", "Features", "Reviews", "Buy Now"]
        else:
            clicks += ["< Prev"]
        return [f"click[{c}]" for c in clicks]

    def _step(self, action: str) -> Step:
        match = ACTION.fullmatch(action)
        if match is None:
            return Step(f'Invalid action "{echo(action)}". Use search[keywords] or click[value].', 0.0, False)
        verb, arg = match.group(1).lower(), match.group(2).strip()
        kind, page = self.page
        if verb == "search":
            if kind != "search":
                return Step("There is no search bar on this page: click[Back to Search] first.", 0.0, False)
            self.results = search(arg)
            self.page = ("results", 0)
            return Step(self._show(), 0.0, False)
        allowed = {a[len("click[") : -1].lower(): a[len("click[") : -1] for a in self.available_actions()}
        if arg.lower() not in allowed:
            return Step(f'"{echo(arg)}" is not clickable on this page.', 0.0, False)
        target = allowed[arg.lower()]
        if target == "Back to Search":
            self.page, self.chosen = ("search", None), {}
        elif target == "Next >":
            self.page = ("results", page + 1)
        elif target == "< Prev":
            if kind == "results":
                self.page = ("results", page - 1)
            elif kind == "item":
                self.page, self.chosen = (
                    ("results", self.results.index(page) // PER_PAGE if page in self.results else 0),
                    {},
                )
            else:
                self.page = ("item", page)
        elif kind == "results":
            self.page, self.chosen = ("item", target), {}
            self.visited.append(target)
        elif target == "Buy Now":
            score = reward(self.goal, catalogue()[page], self.chosen)
            return Step(
                f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {score}",
                score,
                True,
            )
        elif target in ("Description", "Features", "Reviews"):
            self.page = (target.lower(), page)
        else:  # an option value of this item
            option = next(k for k, vs in catalogue()[page]["options"].items() if target in vs)
            self.chosen[option] = target
        return Step(self._show(), 0.0, False)

    def expert_step(self) -> tuple[str, str]:
        kind, arg = self.page
        target = self.task.hidden["target"]
        if kind == "search":
            return "I search for the type and its attributes.", f"search[{_query(self.goal)}]"
        if kind == "results":
            if target not in self.results:
                return "It is not among these results: I search again.", "click[Back to Search]"
            where = self.results.index(target) // PER_PAGE
            if where > arg:
                return "The product is further on.", "click[Next >]"
            if where < arg:
                return "The product was on an earlier page.", "click[< Prev]"
            return "This product matches.", f"click[{target}]"
        if kind != "item" or arg != target:
            return "Not the product I want.", "click[Back to Search]" if kind == "item" else "click[< Prev]"
        for option, value in self.goal["options"].items():
            if self.chosen.get(option) != value:
                return f"I choose {option} {value}.", f"click[{value}]"
        return "Everything matches: I buy it.", "click[Buy Now]"
