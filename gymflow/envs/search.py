"""Deep Search in the image of AgentGym-RL's search scenario (paper 002, section 4.1: question answering over a
search engine, NQ- and HotpotQA-style), offline: multi-hop questions about a generated world of entities,
answered by searching a real full-text index of its documents.

The world is fixed (the same on every machine): 300 people, 120 companies, 60 universities, 80 cities in 20
countries and 150 books, related by born in, studied at, founded, headquartered in, located in, wrote and lies
in; each entity has a document that states its facts in sentences among others that do not matter. The
documents are indexed with tantivy (a maintained Rust search library; BM25 ranking, in memory). Questions need
one to three hops: "Where was Ana Bose born?", "In which city is the company founded by Ana Bose
headquartered?", "In which country was the author of The Silent River born?" Actions:

    search[query]    the 5 best documents: their titles and first sentence
    open[title]      a document's text
    answer[text]     ends the episode

The reward is the token F1 of the answer against the gold (SQuAD's normalisation: case, punctuation, articles);
success is an exact match after that normalisation, as the seeds report EM and F1. The expert searches each
entity of its chain by name, opens its document and answers.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import tantivy
from pydantic import Field, field_validator

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, Step, Task, echo, task_rng
from gymflow.envs.names import full_names, place_name

LEVELS = ("1-hop", "2-hop", "3-hop")
TOP_K = 5
ACTION = re.compile(r"(search|open|answer)\s*\[(.*)\]", re.IGNORECASE | re.DOTALL)
BOOK_ADJECTIVES = [
    "Silent",
    "Golden",
    "Distant",
    "Broken",
    "Hidden",
    "Last",
    "Paper",
    "Quiet",
    "Crimson",
    "Frozen",
    "Lost",
    "Wild",
]
BOOK_NOUNS = [
    "River",
    "Hour",
    "Shore",
    "Clock",
    "Garden",
    "Summer",
    "Moon",
    "Letter",
    "Harbor",
    "Orchard",
    "Bridge",
    "Lantern",
    "Mirror",
]
FILLER = (
    "It is often mentioned in local guides.",
    "Records about it go back many years.",
    "Several articles have been written about it.",
    "It appears in a number of photographs.",
)

SYSTEM_PROMPT = (
    "You answer questions by searching a collection of documents. Each turn, one action: search[query] (the 5 "
    "best documents: title and first sentence), open[title] (a document's text), answer[text] (your final "
    "answer, a short phrase; it ends the episode). Questions may need several searches: find each entity the "
    "question leads to. Answer in the format:\nThought: <your thought>\nAction: <action>"
)


@lru_cache(maxsize=1)
def world() -> dict[str, dict[str, dict[str, str]]]:
    """kind -> name -> relation -> name; the same on every machine."""
    rng = task_rng("search-world")
    used: set[str] = set()
    countries = [place_name(rng, used) + "ia" for _ in range(20)]
    cities = {place_name(rng, used): {"country": rng.choice(countries)} for _ in range(80)}
    city_names = sorted(cities)
    universities = {
        f"University of {place_name(rng, used)}": {"city": rng.choice(city_names)} for _ in range(60)
    }
    companies = {
        f"{place_name(rng, used)} {rng.choice(['Labs', 'Works', 'Media', 'Systems'])}": {
            "city": rng.choice(city_names)
        }
        for _ in range(120)
    }
    people: dict[str, dict[str, str]] = {}
    for name in rng.sample(full_names(), 300):
        people[name] = {"born": rng.choice(city_names), "studied": rng.choice(sorted(universities))}
    founders = rng.sample(sorted(people), len(companies))
    for company, founder in zip(sorted(companies), founders, strict=True):
        companies[company]["founder"] = founder
    books = {}
    titles = rng.sample([f"The {a} {b}" for a in BOOK_ADJECTIVES for b in BOOK_NOUNS], 150)
    for title in titles:
        books[title] = {"author": rng.choice(sorted(people))}
    return {
        "country": {c: {} for c in countries},
        "city": cities,
        "university": universities,
        "company": companies,
        "person": people,
        "book": books,
    }


@lru_cache(maxsize=1)
def documents() -> dict[str, str]:
    """title -> text: each entity's facts in sentences, with filler between them."""
    w = world()
    rng = task_rng("search-docs")
    facts: dict[str, list[str]] = collections.defaultdict(list)
    for city, r in w["city"].items():
        facts[city].append(f"{city} is a city in {r['country']}.")
        facts[r["country"]].append(f"{city} is one of the cities of {r['country']}.")
    for uni, r in w["university"].items():
        facts[uni].append(f"{uni} is a university located in {r['city']}.")
    for company, r in w["company"].items():
        facts[company].append(f"{company} is a company headquartered in {r['city']}.")
        facts[company].append(f"{company} was founded by {r['founder']}.")
        facts[r["founder"]].append(f"{r['founder']} founded {company}.")
    for person, r in w["person"].items():
        facts[person].insert(0, f"{person} was born in {r['born']}.")
        facts[person].append(f"{person} studied at {r['studied']}.")
    for book, r in w["book"].items():
        facts[book].append(f"{book} is a book written by {r['author']}.")
        facts[r["author"]].append(f"{r['author']} wrote {book}.")
    for country in w["country"]:
        facts[country].insert(0, f"{country} is a country.")
    return {
        title: " ".join(s + (" " + rng.choice(FILLER) if rng.random() < 0.4 else "") for s in sentences)
        for title, sentences in sorted(facts.items())
    }


@lru_cache(maxsize=1)
def index() -> tuple[tantivy.Index, list[str]]:
    """The documents in an in-memory tantivy index (BM25), and the titles by document number."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("title", stored=False)
    builder.add_text_field("body", stored=False)
    builder.add_integer_field("number", stored=True, indexed=False)
    idx = tantivy.Index(builder.build())
    writer = idx.writer(heap_size=15_000_000, num_threads=1)
    titles = sorted(documents())
    for number, title in enumerate(titles):
        writer.add_document(tantivy.Document(title=title, body=documents()[title], number=number))
    writer.commit()
    writer.wait_merging_threads()
    idx.reload()
    return idx, titles


def search(query: str, k: int = TOP_K) -> list[str]:
    """The titles of the `k` best documents for `query`'s words (BM25 over title and text; ties by title)."""
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", query)[:32]]  # AND, OR, NOT are no operators
    if not words:
        return []
    idx, titles = index()
    searcher = idx.searcher()
    parsed = idx.parse_query(" ".join(words), ["title", "body"])
    hits = searcher.search(parsed, k + 20).hits
    ranked = sorted(((-score, titles[searcher.doc(a)["number"][0]]) for score, a in hits))
    return [title for _, title in ranked[:k]]


# ---- answers as SQuAD scores them -----------------------------------------------------------------------------


def normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not p or not g or not common:
        return float(p == g)
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


# ---- questions: (level, question, answer, chain of documents) --------------------------------------------------

Made = tuple[str, str, str, list[str]]


def _q_born(rng: Any) -> Made:
    person = rng.choice(sorted(world()["person"]))
    return "1-hop", f"Where was {person} born?", world()["person"][person]["born"], [person]


def _q_company_city(rng: Any) -> Made:
    company = rng.choice(sorted(world()["company"]))
    return (
        "1-hop",
        f"In which city is {company} headquartered?",
        world()["company"][company]["city"],
        [company],
    )


def _q_founder_city(rng: Any) -> Made:
    company = rng.choice(sorted(world()["company"]))
    founder = world()["company"][company]["founder"]
    return (
        "2-hop",
        f"In which city is the company founded by {founder} headquartered?",
        world()["company"][company]["city"],
        [founder, company],
    )


def _q_author_birthplace(rng: Any) -> Made:
    book = rng.choice(sorted(world()["book"]))
    author = world()["book"][book]["author"]
    return "2-hop", f"Where was the author of {book} born?", world()["person"][author]["born"], [book, author]


def _q_university_city(rng: Any) -> Made:
    person = rng.choice(sorted(world()["person"]))
    uni = world()["person"][person]["studied"]
    return (
        "2-hop",
        f"In which city is the university that {person} studied at?",
        world()["university"][uni]["city"],
        [person, uni],
    )


def _q_author_country(rng: Any) -> Made:
    book = rng.choice(sorted(world()["book"]))
    author = world()["book"][book]["author"]
    city = world()["person"][author]["born"]
    return (
        "3-hop",
        f"In which country was the author of {book} born?",
        world()["city"][city]["country"],
        [book, author, city],
    )


def _q_founder_university_city(rng: Any) -> Made:
    company = rng.choice(sorted(world()["company"]))
    founder = world()["company"][company]["founder"]
    uni = world()["person"][founder]["studied"]
    return (
        "3-hop",
        f"In which city is the university attended by the founder of {company}?",
        world()["university"][uni]["city"],
        [company, founder, uni],
    )


QUESTIONS: dict[str, Callable[[Any], Made]] = {
    "born": _q_born,
    "company_city": _q_company_city,
    "founder_city": _q_founder_city,
    "author_birthplace": _q_author_birthplace,
    "university_city": _q_university_city,
    "author_country": _q_author_country,
    "founder_university_city": _q_founder_university_city,
}


class SearchHidden(Hidden):
    template: str
    choices: int = Field(ge=0)
    answer: str
    chain: list[str] = Field(min_length=1, max_length=3)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value not in QUESTIONS:
            raise ValueError(f"not one of {sorted(QUESTIONS)}")
        return value


class Search(Env):
    hidden_schema = SearchHidden
    spec = EnvSpec(
        name="search",
        description="multi-hop questions over a searched corpus",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=12,
        expert="search and open each entity of the chain",
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("search-tasks", seed)
        while True:
            name, choices = rng.choice(sorted(QUESTIONS)), rng.randrange(2**31)
            level, question, answer, chain = QUESTIONS[name](task_rng("search-choices", choices))
            if len(chain) > 1 and answer in documents()[chain[0]]:  # a shortcut: the hops would not be needed
                continue
            yield Task(
                env="search",
                task_id=f"search-{name}-{task_rng(question).randrange(10**9)}",  # one id a question
                split=split,
                difficulty=level,
                seed=choices,
                instruction=question,
                hidden={"template": name, "choices": choices, "answer": answer, "chain": chain},
            )

    def _reset(self, task: Task) -> str:
        made = QUESTIONS[task.hidden["template"]](task_rng("search-choices", task.hidden["choices"]))
        if (made[1], made[2], made[3]) != (task.instruction, task.hidden["answer"], task.hidden["chain"]):
            raise BadTask(
                "the instruction, answer and chain are not what the template makes of these choices"
            )
        self.seen: set[str] = set()  # the actions taken, for the expert
        return f"{task.instruction}\nActions: search[query] | open[title] | answer[text]."

    def _step(self, action: str) -> Step:
        match = ACTION.fullmatch(action)
        if match is None:
            return Step(
                f'Invalid action "{echo(action)}". Use search[query], open[title] or answer[text].',
                0.0,
                False,
            )
        verb, arg = match.group(1).lower(), match.group(2).strip()
        self.seen.add(f"{verb}[{arg}]")
        if verb == "answer":
            score = f1(arg, self.task.hidden["answer"])
            exact = normalize(arg) == normalize(self.task.hidden["answer"])
            return Step(f"Answered {echo(arg, 80)}.", 1.0 if exact else min(score, 0.99), True)
        if verb == "search":
            titles = search(arg)
            if not titles:
                return Step("No results: search with words of the question.", 0.0, False)
            lines = [f"[{i}] {t}: {documents()[t].split('. ')[0]}." for i, t in enumerate(titles, start=1)]
            return Step("\n".join(lines), 0.0, False)
        title = next((t for t in documents() if t.lower() == arg.lower()), None)
        if title is None:
            return Step(f'No document titled "{echo(arg)}"; search for it first.', 0.0, False)
        return Step(f"{title}\n{documents()[title]}", 0.0, False)

    def expert_step(self) -> tuple[str, str]:
        for title in self.task.hidden["chain"]:
            if f"search[{title}]" not in self.seen:
                return f"I look for {title}.", f"search[{title}]"
            if f"open[{title}]" not in self.seen:
                return f"I read the document about {title}.", f"open[{title}]"
        answer = self.task.hidden["answer"]
        return f"The chain of documents gives {answer}.", f"answer[{answer}]"
