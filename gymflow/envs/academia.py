"""Academia in the image of AgentGym's (AgentBoard's) tool environment, offline: questions over a paper network
(citations) and an author network (co-authorship), answered with its 9 tools over a generated literature.

The world is fixed (the same on every machine): 90 authors with organisations and citation counts, 160 papers
with years, venues and 1 to 4 authors, citations from later papers to earlier ones. As in AgentBoard, a network
must be loaded (`loadPaperNet`, `loadAuthorNet`) before its nodes and edges can be checked; nodes are paper
titles and author names. Questions ask a paper's venue, an author's organisation, who someone wrote with, how
many papers two authors share, whether one paper cites another, a paper's citations, and which co-author is the
most cited. The reward is AgentBoard's progress rate with a right finish as the last subgoal
(`gymflow.envs.tools`); the expert plays its template's plan.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from gymflow.envs.base import Task, task_rng
from gymflow.envs.names import full_names
from gymflow.envs.tools import (
    Made,
    TemplateHidden,
    Tool,
    ToolEnv,
    ToolError,
    tool_spec,
)

ORGS = (
    "University of Lisbon",
    "Kyoto University",
    "ETH Zurich",
    "University of Nairobi",
    "McGill University",
    "Seoul National University",
)
VENUES = ("NeurIPS", "ICML", "ACL", "EMNLP", "ICLR", "AAAI")
TOPICS = (
    "Reinforcement Learning",
    "Language Agents",
    "Sparse Attention",
    "Graph Networks",
    "Reward Models",
    "Tool Use",
    "Program Synthesis",
    "Curriculum Learning",
    "Planning",
    "Memory",
)
FORMS = (
    "{t} at Scale",
    "Revisiting {t}",
    "{t} without Labels",
    "Efficient {t}",
    "A Theory of {t}",
    "{t} for Robots",
    "Towards Robust {t}",
    "{t} in the Wild",
)


@lru_cache(maxsize=1)
def literature() -> dict[str, Any]:
    """Authors by name and papers by title, the same on every machine."""
    rng = task_rng("academia-world")
    names = rng.sample(full_names(given=20, family=15), 90)
    authors = {n: {"name": n, "org": rng.choice(ORGS), "interests": rng.sample(TOPICS, 2)} for n in names}
    titles = rng.sample([form.format(t=topic) for topic in TOPICS for form in FORMS], 80)
    titles += [f"{t}: Part II" for t in titles]
    papers: dict[str, dict[str, Any]] = {}
    for i, title in enumerate(titles):
        year = 2010 + i % 14
        papers[title] = {
            "title": title,
            "year": year,
            "venue": rng.choice(VENUES),
            "authors": rng.sample(names, rng.randint(1, 4)),
            "cites": [],
        }
    ordered = sorted(papers.values(), key=lambda p: (p["year"], p["title"]))
    for i, paper in enumerate(ordered):
        earlier = [p["title"] for p in ordered[:i] if p["year"] < paper["year"]]
        paper["cites"] = sorted(rng.sample(earlier, min(len(earlier), rng.randint(0, 5))))
    cited = {t: 0 for t in papers}
    for paper in papers.values():
        for t in paper["cites"]:
            cited[t] += 1
    for name, author in authors.items():
        author["n_citation"] = sum(cited[p["title"]] for p in papers.values() if name in p["authors"])
    return {"authors": authors, "papers": papers, "cited_by": cited}


def _shared(a: str, b: str) -> list[str]:
    return sorted(
        p["title"] for p in literature()["papers"].values() if a in p["authors"] and b in p["authors"]
    )


def _coauthors(name: str) -> list[str]:
    return sorted(
        {x for p in literature()["papers"].values() if name in p["authors"] for x in p["authors"]} - {name}
    )


PAPER_NET = ("Loading the paper network.", "loadPaperNet", {})
AUTHOR_NET = ("Loading the author network.", "loadAuthorNet", {})


def _titles() -> list[str]:
    return sorted(literature()["papers"])


def _names() -> list[str]:
    return sorted(literature()["authors"])


def _t_venue(rng: Any) -> Made:
    title = rng.choice(_titles())
    venue = literature()["papers"][title]["venue"]
    plan = [PAPER_NET, (f"The node of {title}.", "paperNodeCheck", {"node": title})]
    return (
        "easy",
        f"Which venue published the paper '{title}'? Please answer with its name.",
        venue,
        [venue],
        plan,
    )


def _t_org(rng: Any) -> Made:
    name = rng.choice(_names())
    org = literature()["authors"][name]["org"]
    plan = [AUTHOR_NET, (f"The node of {name}.", "authorNodeCheck", {"node": name})]
    return ("easy", f"Which organization is {name} from? Please answer with its name.", org, [org], plan)


def _t_coauthors(rng: Any) -> Made | None:
    name = rng.choice(_names())
    others = _coauthors(name)
    if not others or len(others) > 8:
        return None
    plan = [
        AUTHOR_NET,
        (f"The neighbours of {name}.", "neighbourCheck", {"graph": "AuthorNet", "node": name}),
    ]
    return (
        "medium",
        f"Who has {name} written papers with? Please answer with a list of names.",
        others,
        others,
        plan,
    )


def _t_shared_count(rng: Any) -> Made | None:
    name = rng.choice(_names())
    others = _coauthors(name)
    if not others:
        return None
    other = rng.choice(others)
    count = len(_shared(name, other))
    plan = [AUTHOR_NET, ("The edge between them.", "authorEdgeCheck", {"node1": name, "node2": other})]
    return (
        "medium",
        f"How many papers have {name} and {other} written together? Please answer with a number.",
        count,
        [count],
        plan,
    )


def _t_cites(rng: Any) -> Made:
    citing = rng.choice([t for t in _titles() if literature()["papers"][t]["cites"]])
    paper = literature()["papers"][citing]
    cited = rng.choice(paper["cites"]) if rng.random() < 0.5 else rng.choice(_titles())
    answer = "Yes" if cited in paper["cites"] else "No"
    plan = [PAPER_NET, ("The edge between the papers.", "paperEdgeCheck", {"node1": citing, "node2": cited})]
    return (
        "medium",
        f"Does the paper '{citing}' cite '{cited}'? Please answer Yes or No.",
        answer,
        [answer],
        plan,
    )


def _t_cited_count(rng: Any) -> Made:
    title = rng.choice(_titles())
    count = len(literature()["papers"][title]["cites"])
    plan = [PAPER_NET, (f"The papers {title} cites.", "neighbourCheck", {"graph": "PaperNet", "node": title})]
    return (
        "easy",
        f"How many papers does '{title}' cite? Please answer with a number.",
        count,
        [count],
        plan,
    )


def _t_most_cited_coauthor(rng: Any) -> Made | None:
    name = rng.choice(_names())
    others = _coauthors(name)
    if not 2 <= len(others) <= 10:  # the plan fits the turn limit with room to spare
        return None
    counts = sorted((literature()["authors"][o]["n_citation"], o) for o in others)
    if counts[-1][0] == counts[-2][0]:
        return None
    plan = [
        AUTHOR_NET,
        (f"The neighbours of {name}.", "neighbourCheck", {"graph": "AuthorNet", "node": name}),
    ]
    plan += [(f"The citations of {o}.", "authorNodeCheck", {"node": o}) for o in others]
    best = counts[-1][1]
    return (
        "hard",
        f"Which of {name}'s co-authors has the most citations? Please answer with a name.",
        best,
        [*others, counts[-1][0]],
        plan,
    )


def _t_cited_at_venue(rng: Any) -> Made | None:
    title = rng.choice([t for t in _titles() if len(literature()["papers"][t]["cites"]) >= 2])
    venue = rng.choice(VENUES)
    cites = literature()["papers"][title]["cites"]
    count = sum(literature()["papers"][c]["venue"] == venue for c in cites)
    plan = [PAPER_NET, (f"The papers {title} cites.", "neighbourCheck", {"graph": "PaperNet", "node": title})]
    plan += [(f"The venue of {c}.", "paperNodeCheck", {"node": c}) for c in cites]
    return (
        "hard",
        f"How many of the papers that '{title}' cites were published at {venue}? Please answer with a "
        "number.",
        count,
        [*cites, count],
        plan,
    )


def _t_earliest_cited(rng: Any) -> Made | None:
    title = rng.choice([t for t in _titles() if len(literature()["papers"][t]["cites"]) >= 2])
    cites = literature()["papers"][title]["cites"]
    year = min(literature()["papers"][c]["year"] for c in cites)
    plan = [PAPER_NET, (f"The papers {title} cites.", "neighbourCheck", {"graph": "PaperNet", "node": title})]
    plan += [(f"The year of {c}.", "paperNodeCheck", {"node": c}) for c in cites]
    return (
        "hard",
        f"In which year was the oldest paper that '{title}' cites published? Please answer with a number.",
        year,
        [*cites, year],
        plan,
    )


TEMPLATES: dict[str, Callable[[Any], Made | None]] = {
    "cited_at_venue": _t_cited_at_venue,
    "earliest_cited": _t_earliest_cited,
    "venue": _t_venue,
    "org": _t_org,
    "coauthors": _t_coauthors,
    "shared_count": _t_shared_count,
    "cites": _t_cites,
    "cited_count": _t_cited_count,
    "most_cited_coauthor": _t_most_cited_coauthor,
}
NODE = (("node", "string", "A paper's title (PaperNet) or an author's name (AuthorNet)."),)
EDGE = (("node1", "string", "The first node."), ("node2", "string", "The second node."))
TOOLS = [
    Tool("loadPaperNet", "Load the paper network (papers and their citations).", (), "Whether it loaded."),
    Tool(
        "loadAuthorNet",
        "Load the author network (authors and their co-authorships).",
        (),
        "Whether it loaded.",
    ),
    Tool(
        "neighbourCheck",
        "List a node's neighbours in a network: the papers a paper cites, or an author's co-authors.",
        (("graph", "string", "PaperNet or AuthorNet."), *NODE),
        "The neighbours.",
    ),
    Tool("paperNodeCheck", "Get a paper's information.", NODE, "Its authors, year, venue and citations."),
    Tool(
        "authorNodeCheck", "Get an author's information.", NODE, "Name, organization, citations, interests."
    ),
    Tool("authorEdgeCheck", "Get the papers two authors wrote together.", EDGE, "The papers."),
    Tool("paperEdgeCheck", "Whether the first paper cites the second.", EDGE, "The citation, if any."),
    Tool("check_valid_actions", "Get supported actions for current tool.", (), "The supported actions."),
]
EXAMPLE = (
    "Goal: When was 'Revisiting Planning' published?\nThought: I load the paper network first.\nAction: "
    "loadPaperNet with Action Input: {}\nObservation: PaperNet is loaded.\nAction: paperNodeCheck with Action "
    'Input: {"node": "Revisiting Planning"}\nObservation: {"year": 2016, ...}\nAction: finish with Action Input: '
    '{"answer": 2016}'
)


class AcademiaHidden(TemplateHidden):
    templates = TEMPLATES


class Academia(ToolEnv):
    hidden_schema = AcademiaHidden
    ids_from_question = True
    spec = tool_spec(
        "academia", "paper and author networks over 9 tools (AgentBoard)", TOOLS, EXAMPLE, max_turns=25
    )

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made | None:
        out = TEMPLATES[hidden["template"]](task_rng("academia-choices", hidden["choices"]))
        return out and Made(*out)

    def begin(self, task: Task) -> None:
        self.loaded: set[str] = set()

    # ---- the tools ----------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        runs: dict[str, Callable[..., Any]] = {
            "loadPaperNet": lambda: self._load("PaperNet"),
            "loadAuthorNet": lambda: self._load("AuthorNet"),
            "neighbourCheck": self._neighbours,
            "paperNodeCheck": lambda node: (
                self._paper(node)
                and {k: literature()["papers"][node][k] for k in ("authors", "year", "venue")}
                | {"n_citation": literature()["cited_by"][node]}
            ),
            "authorNodeCheck": lambda node: self._author(node) and dict(literature()["authors"][node]),
            "authorEdgeCheck": lambda node1, node2: (
                self._author(node1)
                and self._author(node2)
                and {
                    "papers": [
                        {"title": t, "year": literature()["papers"][t]["year"]} for t in _shared(node1, node2)
                    ]
                }
            ),
            "paperEdgeCheck": lambda node1, node2: (
                self._paper(node1)
                and self._paper(node2)
                and ({"cites": True} if node2 in literature()["papers"][node1]["cites"] else {})
            ),
            "check_valid_actions": lambda: [t.name for t in TOOLS] + ["finish"],
        }
        return {t.name: (t, runs[t.name]) for t in TOOLS}

    def _load(self, graph: str) -> str:
        self.loaded.add(graph)
        return f"{graph} is loaded."

    def _paper(self, title: str) -> bool:
        if "PaperNet" not in self.loaded:
            raise ToolError("load the paper network first (loadPaperNet)")
        if title not in literature()["papers"]:
            raise ToolError(f'no paper titled "{title[:60]}" in PaperNet')
        return True

    def _author(self, name: str) -> bool:
        if "AuthorNet" not in self.loaded:
            raise ToolError("load the author network first (loadAuthorNet)")
        if name not in literature()["authors"]:
            raise ToolError(f'no author named "{name[:40]}" in AuthorNet')
        return True

    def _neighbours(self, graph: str, node: str) -> dict[str, list[str]]:
        if graph == "PaperNet":
            self._paper(node)
            return {"neighbors": literature()["papers"][node]["cites"]}
        if graph == "AuthorNet":
            self._author(node)
            return {"neighbors": _coauthors(node)}
        raise ToolError('graph is "PaperNet" or "AuthorNet"')
