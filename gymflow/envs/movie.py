"""Movie in the image of AgentGym's (AgentBoard's) TMDB tool environment, offline: questions about films and
people answered with its 14 tools over a generated film world.

The world is fixed (the same on every machine): 150 films with budgets, revenue, ratings, release dates,
production companies and countries, keywords, alternative titles, a cast of characters and a crew (director,
writer, producer, composer), and 300 people with birthdays, birthplaces and IMDb ids; people act in and make
several films. The tools' names and parameters are AgentGym's Movie client's; their results keep TMDB's
shapes. Search is by exact title or name (case aside). Questions follow AgentBoard's kinds: a film's fact, a
comparison of two films, facts about a film's people (where its director was born), and counts over a
person's films. The reward is AgentBoard's progress rate with a right finish as the last subgoal
(`gymflow.envs.tools`); the expert plays its template's plan.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

from gymflow.envs.base import task_rng
from gymflow.envs.tools import (
    Made,
    Plan,
    TemplateHidden,
    Tool,
    ToolEnv,
    ToolError,
    tool_spec,
)

ADJECTIVES = [
    "Silent",
    "Last",
    "Golden",
    "Hidden",
    "Broken",
    "Distant",
    "Crimson",
    "Frozen",
    "Lost",
    "Wild",
    "Secret",
    "Electric",
    "Quiet",
    "Burning",
]
NOUNS = [
    "River",
    "Harbor",
    "Empire",
    "Garden",
    "Signal",
    "Voyage",
    "Mirror",
    "Summer",
    "Kingdom",
    "Orbit",
    "Letter",
    "Frontier",
    "Echo",
    "Lantern",
]
FIRST = [
    "Ada",
    "Bruno",
    "Carla",
    "Dev",
    "Emil",
    "Fatima",
    "Gael",
    "Hana",
    "Ivo",
    "June",
    "Kofi",
    "Lena",
    "Marco",
    "Nia",
    "Omar",
    "Pia",
    "Rui",
    "Sofia",
    "Tomas",
    "Uma",
]
LAST = [
    "Abbott",
    "Bianchi",
    "Castro",
    "Dahl",
    "Egan",
    "Ferreira",
    "Gupta",
    "Holm",
    "Ito",
    "Jovanovic",
    "Kerr",
    "Lind",
    "Mensah",
    "Nakamura",
    "Ortiz",
]
PLACES = (
    "Tucson, Arizona, USA",
    "Lyon, France",
    "Osaka, Japan",
    "Porto, Portugal",
    "Accra, Ghana",
    "Mumbai, India",
    "Bergen, Norway",
    "Cordoba, Argentina",
    "Leeds, England, UK",
    "Toronto, Canada",
)
COMPANIES = (
    "Northlight Pictures",
    "Harbor Films",
    "Bluebird Studio",
    "Atlas Entertainment",
    "Kite Media",
    "Granite Works",
)
COUNTRIES = (
    ("US", "United States of America"),
    ("GB", "United Kingdom"),
    ("FR", "France"),
    ("JP", "Japan"),
    ("IN", "India"),
    ("CA", "Canada"),
)
KEYWORDS = ("heist", "time travel", "friendship", "space", "revenge", "small town", "coming of age", "music")
JOBS = ("Director", "Writer", "Producer", "Original Music Composer")
ROLES = (
    "Captain",
    "Doctor",
    "Detective",
    "Pilot",
    "Mayor",
    "Teacher",
    "Stranger",
    "Inventor",
    "Singer",
    "Chef",
)


@lru_cache(maxsize=1)
def world() -> dict[str, Any]:
    """films and people by id, the same on every machine."""
    rng = task_rng("movie-world")
    names = rng.sample([f"{a} {b}" for a in FIRST for b in LAST], 300)
    people = {
        str(1000 + i): {
            "id": str(1000 + i),
            "name": name,
            "place_of_birth": rng.choice(PLACES),
            "birthday": (date(1940, 1, 1) + timedelta(days=rng.randrange(60 * 365))).isoformat(),
            "gender": rng.choice([1, 2]),
            "imdb_id": f"nm{rng.randrange(10**6, 10**7)}",
        }
        for i, name in enumerate(names)
    }
    ids = sorted(people)
    titles = rng.sample([f"The {a} {n}" for a in ADJECTIVES for n in NOUNS], 150)
    films = {}
    for i, title in enumerate(titles):
        cast_ids = rng.sample(ids, 5)
        crew = [(rng.choice(ids), job) for job in JOBS]
        country = rng.choice(COUNTRIES)
        films[str(500 + i)] = {
            "id": str(500 + i),
            "title": title,
            "release_date": (date(1980, 1, 1) + timedelta(days=rng.randrange(44 * 365))).isoformat(),
            "budget": rng.randrange(2, 250) * 1_000_000,
            "revenue": rng.randrange(1, 900) * 1_000_000,
            "vote_average": round(rng.uniform(4.5, 8.9), 1),
            "runtime": rng.randint(85, 170),
            "companies": rng.sample(COMPANIES, rng.randint(1, 2)),
            "country": country,
            "keywords": rng.sample(KEYWORDS, 3),
            "cast": [
                {"id": p, "name": people[p]["name"], "character": f"{role} {people[p]['name'].split()[1]}"}
                for p, role in zip(cast_ids, rng.sample(ROLES, 5), strict=True)
            ],
            "crew": [{"id": p, "name": people[p]["name"], "job": job} for p, job in crew],
        }
    return {"films": films, "people": people}


def _film(title: str) -> dict[str, Any]:
    return next(f for f in world()["films"].values() if f["title"] == title)


def _crew(film: dict[str, Any], job: str) -> dict[str, Any]:
    return next(c for c in film["crew"] if c["job"] == job)


# ---- templates: (level, question, answer, subgoals, plan) --------------------------------------------------------


def _find(film: dict[str, Any], plan: Plan) -> None:
    plan.append((f"I search for {film['title']}.", "get_search_movie", {"movie_name": film["title"]}))


def _t_director_birthplace(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    director = _crew(film, "Director")
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its crew names the director.", "get_movie_crew", {"movie_id": film["id"]}))
    plan.append(("Where the director was born.", "get_person_details", {"person_id": director["id"]}))
    answer = world()["people"][director["id"]]["place_of_birth"]
    return (
        "hard",
        f"Where was the director of {film['title']} born? Please answer with the birthplace as a string.",
        answer,
        [film["id"], director["id"], answer],
        plan,
    )


def _t_same_director(rng: Any) -> Made:
    a, b = rng.sample(sorted(world()["films"].values(), key=lambda f: f["id"]), 2)
    plan: Plan = []
    for film in (a, b):
        _find(film, plan)
        plan.append((f"The crew of {film['title']}.", "get_movie_crew", {"movie_id": film["id"]}))
    answer = "Yes" if _crew(a, "Director")["id"] == _crew(b, "Director")["id"] else "No"
    return (
        "hard",
        f"Is the director of {a['title']} the same as the director of {b['title']}? Please answer Yes or No.",
        answer,
        [a["id"], b["id"], _crew(a, "Director")["name"], _crew(b, "Director")["name"]],
        plan,
    )


def _t_higher_rating(rng: Any) -> Made | None:
    a, b = rng.sample(sorted(world()["films"].values(), key=lambda f: f["id"]), 2)
    if a["vote_average"] == b["vote_average"]:
        return None
    plan: Plan = []
    for film in (a, b):
        _find(film, plan)
        plan.append((f"The rating of {film['title']}.", "get_movie_details", {"movie_id": film["id"]}))
    answer = max(a, b, key=lambda f: f["vote_average"])["title"]
    return (
        "medium",
        f"{a['title']} versus {b['title']}, which has a higher rating? Please answer with the film's title.",
        answer,
        [a["vote_average"], b["vote_average"]],
        plan,
    )


def _t_budget(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its details give the budget.", "get_movie_details", {"movie_id": film["id"]}))
    return (
        "easy",
        f"What was the budget of {film['title']}? Please answer with a number in dollars.",
        film["budget"],
        [film["id"], film["budget"]],
        plan,
    )


def _t_release_year(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its details give the release date.", "get_movie_details", {"movie_id": film["id"]}))
    year = int(film["release_date"][:4])
    return (
        "easy",
        f"In which year was {film['title']} released? Please answer with a number.",
        year,
        [film["id"], film["release_date"]],
        plan,
    )


def _t_runtime(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its details give the runtime.", "get_movie_details", {"movie_id": film["id"]}))
    return (
        "easy",
        f"How long is {film['title']}, in minutes? Please answer with a number.",
        film["runtime"],
        [film["id"], film["runtime"]],
        plan,
    )


def _t_country(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its production countries.", "get_movie_production_countries", {"movie_id": film["id"]}))
    answer = film["country"][1]
    return (
        "easy",
        f"In which country was {film['title']} produced? Please answer with the country's name.",
        answer,
        [film["id"], answer],
        plan,
    )


def _t_acted_count(rng: Any) -> Made | None:
    person = rng.choice(sorted(world()["people"].values(), key=lambda p: p["id"]))
    count = sum(any(c["id"] == person["id"] for c in f["cast"]) for f in world()["films"].values())
    if count == 0:
        return None
    plan: Plan = [
        (f"I search for {person['name']}.", "get_search_person", {"person_name": person["name"]}),
        ("The films they acted in.", "get_person_cast", {"person_id": person["id"]}),
    ]
    return (
        "medium",
        f"In how many movies has {person['name']} acted? Please answer with a number.",
        count,
        [person["id"], count],
        plan,
    )


def _t_character(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    role = rng.choice(film["cast"])
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its cast lists the characters.", "get_movie_cast", {"movie_id": film["id"]}))
    return (
        "medium",
        f"Who plays {role['character']} in {film['title']}? Please answer with the actor's name.",
        role["name"],
        [film["id"], role["name"]],
        plan,
    )


def _t_composer_imdb(rng: Any) -> Made:
    film = rng.choice(sorted(world()["films"].values(), key=lambda f: f["id"]))
    composer = _crew(film, "Original Music Composer")
    plan: Plan = []
    _find(film, plan)
    plan.append(("Its crew names the composer.", "get_movie_crew", {"movie_id": film["id"]}))
    plan.append(("The composer's external ids.", "get_person_external_ids", {"person_id": composer["id"]}))
    answer = world()["people"][composer["id"]]["imdb_id"]
    return (
        "hard",
        f"What is the IMDb id of the composer of {film['title']}? Please answer with the id.",
        answer,
        [film["id"], composer["id"], answer],
        plan,
    )


TEMPLATES: dict[str, Callable[[Any], Made | None]] = {
    "director_birthplace": _t_director_birthplace,
    "same_director": _t_same_director,
    "higher_rating": _t_higher_rating,
    "budget": _t_budget,
    "country": _t_country,
    "release_year": _t_release_year,
    "runtime": _t_runtime,
    "acted_count": _t_acted_count,
    "character": _t_character,
    "composer_imdb": _t_composer_imdb,
}

MOVIE_ID = (("movie_id", "string", "The movie's id."),)
PERSON_ID = (("person_id", "string", "The person's id."),)
TOOLS = [
    Tool(
        "get_search_movie",
        "Search for a movie by its name.",
        (("movie_name", "string", "The movie's name."),),
        "The found movie's id, overview and title.",
    ),
    Tool(
        "get_movie_details",
        "Get the details of a movie.",
        MOVIE_ID,
        "Budget, genres, revenue, release date, runtime, rating (vote_average) and title.",
    ),
    Tool(
        "get_movie_production_companies",
        "Get the production companies of a movie.",
        MOVIE_ID,
        "The production companies.",
    ),
    Tool(
        "get_movie_production_countries",
        "Get the production countries of a movie.",
        MOVIE_ID,
        "The production countries.",
    ),
    Tool("get_movie_cast", "Get the cast of a movie.", MOVIE_ID, "The cast: id, name and character."),
    Tool("get_movie_crew", "Get the crew of a movie.", MOVIE_ID, "The crew: id, name and job."),
    Tool("get_movie_keywords", "Get the keywords of a movie.", MOVIE_ID, "The keywords."),
    Tool(
        "get_search_person",
        "Search for a person by name.",
        (("person_name", "string", "The person's name."),),
        "The found person's id and name.",
    ),
    Tool(
        "get_person_details",
        "Get the details of a person.",
        PERSON_ID,
        "Biography, birthday, gender, name and place of birth.",
    ),
    Tool(
        "get_person_cast", "Get the movies a person acted in.", PERSON_ID, "The movies: id, title, character."
    ),
    Tool(
        "get_person_crew",
        "Get the movies a person worked on as crew.",
        PERSON_ID,
        "The movies: id, title, job.",
    ),
    Tool(
        "get_person_external_ids", "Get a person's ids on other sites.", PERSON_ID, "The IMDb id and others."
    ),
    Tool("get_movie_alternative_titles", "Get the alternative titles of a movie.", MOVIE_ID, "The titles."),
    Tool(
        "get_movie_translation", "Get the translations of a movie's overview.", MOVIE_ID, "The translations."
    ),
    Tool("check_valid_actions", "Get supported actions for current tool.", (), "The supported actions."),
]
EXAMPLE = (
    "Goal: When was The Quiet Orbit released?\nThought: I need the movie's id.\nAction: get_search_movie with "
    'Action Input: {"movie_name": "The Quiet Orbit"}\nObservation: {"id": "512", "title": "The Quiet Orbit", '
    '...}\nThought: Its details give the date.\nAction: get_movie_details with Action Input: {"movie_id": '
    '"512"}\nObservation: {"release_date": "1994-03-02", ...}\nAction: finish with Action Input: {"answer": '
    '"1994-03-02"}'
)


class MovieHidden(TemplateHidden):
    templates = TEMPLATES


class Movie(ToolEnv):
    hidden_schema = MovieHidden
    ids_from_question = True
    spec = tool_spec("movie", "film questions over 14 tools (AgentBoard)", TOOLS, EXAMPLE, max_turns=15)

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made | None:
        out = TEMPLATES[hidden["template"]](task_rng("movie-choices", hidden["choices"]))
        return out and Made(*out)

    # ---- the tools ----------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        film, person = self._film, self._person
        runs: dict[str, Callable[..., Any]] = {
            "get_search_movie": self._search_movie,
            "get_movie_details": lambda movie_id: {
                k: film(movie_id)[k]
                for k in ("budget", "revenue", "release_date", "runtime", "vote_average", "title")
            },
            "get_movie_production_companies": lambda movie_id: {
                "production_companies": [{"name": c} for c in film(movie_id)["companies"]]
            },
            "get_movie_production_countries": lambda movie_id: {
                "production_countries": [
                    {"iso_3166_1": film(movie_id)["country"][0], "name": film(movie_id)["country"][1]}
                ]
            },
            "get_movie_cast": lambda movie_id: {"cast": film(movie_id)["cast"]},
            "get_movie_crew": lambda movie_id: {"crew": film(movie_id)["crew"]},
            "get_movie_keywords": lambda movie_id: {
                "keywords": [{"name": k} for k in film(movie_id)["keywords"]]
            },
            "get_search_person": self._search_person,
            "get_person_details": lambda person_id: {
                "biography": f"{person(person_id)['name']} works in film.",
                **{k: person(person_id)[k] for k in ("birthday", "gender", "name", "place_of_birth")},
            },
            "get_person_cast": lambda person_id: {
                "cast": [
                    {"id": f["id"], "title": f["title"], "character": c["character"]}
                    for f in world()["films"].values()
                    for c in f["cast"]
                    if c["id"] == person(person_id)["id"]
                ]
            },
            "get_person_crew": lambda person_id: {
                "crew": [
                    {"id": f["id"], "title": f["title"], "job": c["job"]}
                    for f in world()["films"].values()
                    for c in f["crew"]
                    if c["id"] == person(person_id)["id"]
                ]
            },
            "get_person_external_ids": lambda person_id: {"imdb_id": person(person_id)["imdb_id"]},
            "get_movie_alternative_titles": lambda movie_id: {
                "titles": [
                    {
                        "iso_3166_1": film(movie_id)["country"][0],
                        "title": film(movie_id)["title"].removeprefix("The "),
                    }
                ]
            },
            "get_movie_translation": lambda movie_id: {
                "translations": [
                    {
                        "iso_639_1": "en",
                        "data": {"overview": f"A film about {', '.join(film(movie_id)['keywords'])}."},
                    }
                ]
            },
            "check_valid_actions": lambda: [t.name for t in TOOLS] + ["finish"],
        }
        return {t.name: (t, runs[t.name]) for t in TOOLS}

    def _film(self, movie_id: str) -> dict[str, Any]:
        if movie_id not in world()["films"]:
            raise ToolError(f'no movie with id "{movie_id[:20]}"; get_search_movie finds one')
        return world()["films"][movie_id]

    def _person(self, person_id: str) -> dict[str, Any]:
        if person_id not in world()["people"]:
            raise ToolError(f'no person with id "{person_id[:20]}"; get_search_person finds one')
        return world()["people"][person_id]

    def _search_movie(self, movie_name: str) -> dict[str, Any]:
        hit = next(
            (f for f in world()["films"].values() if f["title"].lower() == movie_name.strip().lower()), None
        )
        if hit is None:
            raise ToolError(f'no movie named "{movie_name[:40]}"')
        return {
            "id": hit["id"],
            "title": hit["title"],
            "overview": f"A film about {', '.join(hit['keywords'])}.",
        }

    def _search_person(self, person_name: str) -> dict[str, Any]:
        hit = next(
            (p for p in world()["people"].values() if p["name"].lower() == person_name.strip().lower()), None
        )
        if hit is None:
            raise ToolError(f'no person named "{person_name[:40]}"')
        return {"id": hit["id"], "name": hit["name"]}
