"""Text-to-SQL in the image of BIRD (AgentGym's SQLGym): answer a question by querying a database.

Each task is a question over one of `DATABASES` generated databases of three schemas (a shop, a school, a
clinic), with foreign keys and BIRD's kind of dirty values: city names in mixed case and with stray spaces,
order statuses in three spellings, missing emails and scores. The database lives in an in-memory DuckDB for the
episode; the agent may look before it answers:

    schema                 the tables, their columns and types, and the foreign keys
    sample <table>         three rows of a table
    query <SQL>            run a query: its first 10 rows and how many there are
    submit <SQL>           the final query; the episode ends with its reward

A bare `SELECT ...` (or `WITH ...`) is a submit, as AgentGym's SQLGym client sends the SQL alone. Only one
SELECT statement runs per action, in at most `QUERY_SECONDS` and `QUERY_MB` more MB, and the DuckDB reads and
writes no file (`gymflow.store.db.LOCKED`): anything else is answered with an observation that says why, never
an exception or a write. The reward is BIRD's execution accuracy: 1 when the submitted query's rows, as a set,
equal the gold query's (numbers compared to 6 decimals), else 0.

Questions come at four levels (`LEVELS`): one table, joins, aggregation with conditions, nested queries. The
expert reads the gold query from the task's hidden fields: it looks at the schema, at a few rows of the table
whose values need cleaning, and submits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from functools import lru_cache
from typing import Any, Literal

import duckdb
import pyarrow as pa
from pydantic import Field

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, Step, Task, echo, task_rng
from gymflow.store.db import LOCKED, QueryTimeout, interruptible, memory_bound

DATABASES = 40  # generated databases per schema
LEVELS = ("simple", "join", "aggregate", "nested")
QUERY_SECONDS = 2.0
QUERY_MB = 256
SHOWN_ROWS = 10
MAX_ROWS = 10_000  # a submitted result with more rows than this is wrong (no gold answer is that long)
ACTION = re.compile(r"(schema|sample|query|submit)\b\s*(.*)", re.IGNORECASE | re.DOTALL)
BARE_SQL = re.compile(r"(select|with)\b", re.IGNORECASE)

SYSTEM_PROMPT = (
    "You answer questions about a database by writing SQL (DuckDB's dialect). Each turn, one action:\n"
    "schema (the tables, columns and foreign keys), sample <table> (three rows), query <SQL> (run a SELECT and "
    "see its first rows), submit <SQL> (your final query; it is checked against the answer and ends the "
    "episode). Values can be untidy (case, spaces, missing values): look before you answer. Write the SQL on "
    "one line. Answer in the format:\nThought: <your thought>\nAction: <action>"
)

# ---- the databases ---------------------------------------------------------------------------------------------

FIRST = [
    "Ava",
    "Ben",
    "Chloe",
    "Daniel",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
]
LAST = [
    "Adler",
    "Brandt",
    "Costa",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Horvat",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Larsen",
    "Moreau",
    "Novak",
]
CITIES = ["Lyon", "Porto", "Dublin", "Oslo", "Turin", "Ghent", "Krakow", "Bergen", "Seville", "Graz"]
CATEGORIES = {
    "books": ("Atlas", "Novel", "Cookbook", "Diary", "Guide"),
    "garden": ("Rake", "Hose", "Planter", "Shears", "Trowel"),
    "kitchen": ("Kettle", "Skillet", "Grater", "Teapot", "Whisk"),
    "toys": ("Kite", "Puzzle", "Robot", "Yo-yo", "Blocks"),
    "sports": ("Racket", "Helmet", "Ball", "Bottle", "Mat"),
}
ADJECTIVES = ["Classic", "Compact", "Deluxe", "Eco", "Mini", "Pro", "Rustic", "Smart"]
DEPARTMENTS = {
    "math": ("Algebra", "Geometry", "Statistics", "Calculus"),
    "science": ("Biology", "Chemistry", "Physics", "Ecology"),
    "history": ("Ancient History", "Modern History", "Civics"),
    "languages": ("French", "Spanish", "Latin", "German"),
}
SPECIALTIES = ("cardiology", "dermatology", "pediatrics", "neurology", "orthopedics")
STATUSES = ("shipped", "pending", "cancelled")

# schema -> table -> (column, type, foreign key or ""), in the order the tables are created and shown
SCHEMAS: dict[str, dict[str, list[tuple[str, str, str]]]] = {
    "shop": {
        "customers": [
            ("customer_id", "INTEGER", ""),
            ("name", "VARCHAR", ""),
            ("city", "VARCHAR", ""),
            ("email", "VARCHAR", ""),
            ("signup_date", "DATE", ""),
        ],
        "products": [
            ("product_id", "INTEGER", ""),
            ("name", "VARCHAR", ""),
            ("category", "VARCHAR", ""),
            ("price", "DOUBLE", ""),
        ],
        "orders": [
            ("order_id", "INTEGER", ""),
            ("customer_id", "INTEGER", "customers.customer_id"),
            ("order_date", "DATE", ""),
            ("status", "VARCHAR", ""),
        ],
        "order_items": [
            ("order_id", "INTEGER", "orders.order_id"),
            ("product_id", "INTEGER", "products.product_id"),
            ("quantity", "INTEGER", ""),
        ],
    },
    "school": {
        "students": [
            ("student_id", "INTEGER", ""),
            ("name", "VARCHAR", ""),
            ("grade_level", "INTEGER", ""),
            ("city", "VARCHAR", ""),
        ],
        "courses": [
            ("course_id", "INTEGER", ""),
            ("title", "VARCHAR", ""),
            ("department", "VARCHAR", ""),
            ("credits", "INTEGER", ""),
        ],
        "enrollments": [
            ("student_id", "INTEGER", "students.student_id"),
            ("course_id", "INTEGER", "courses.course_id"),
            ("term", "VARCHAR", ""),
            ("score", "INTEGER", ""),
        ],
    },
    "clinic": {
        "doctors": [("doctor_id", "INTEGER", ""), ("name", "VARCHAR", ""), ("specialty", "VARCHAR", "")],
        "patients": [
            ("patient_id", "INTEGER", ""),
            ("name", "VARCHAR", ""),
            ("birth_year", "INTEGER", ""),
            ("city", "VARCHAR", ""),
        ],
        "visits": [
            ("visit_id", "INTEGER", ""),
            ("patient_id", "INTEGER", "patients.patient_id"),
            ("doctor_id", "INTEGER", "doctors.doctor_id"),
            ("visit_date", "DATE", ""),
            ("cost", "DOUBLE", ""),
        ],
    },
}
Rows = dict[str, list[tuple[Any, ...]]]


def _people(rng: Any, n: int) -> list[str]:
    return [f"{a} {b}" for a, b in rng.sample([(a, b) for a in FIRST for b in LAST], n)]


def _untidy(rng: Any, city: str) -> str:
    """A city as people type it: mostly right, sometimes in lower or upper case or with a stray space."""
    return rng.choice([city] * 6 + [city.lower(), city.upper(), f" {city}", f"{city} "])


def _day(rng: Any, first_year: int, last_year: int) -> date:
    start = date(first_year, 1, 1)
    return start + timedelta(days=rng.randrange((date(last_year, 12, 31) - start).days + 1))


def _shop(rng: Any) -> Rows:
    names = _people(rng, rng.randint(40, 60))
    customers = [
        (
            i + 1,
            name,
            _untidy(rng, rng.choice(CITIES)),
            None
            if rng.random() < 0.15
            else f"{name.split()[0].lower()}.{name.split()[1].lower()}@mail.example",
            _day(rng, 2021, 2023),
        )
        for i, name in enumerate(names)
    ]
    catalogue = rng.sample(
        [(c, f"{a} {n}") for c, ns in CATEGORIES.items() for n in ns for a in ADJECTIVES], 30
    )
    products = [(i + 1, name, cat, round(rng.uniform(3, 300), 2)) for i, (cat, name) in enumerate(catalogue)]
    orders, items = [], []
    for i in range(rng.randint(120, 200)):
        status = rng.choice(STATUSES)
        status = rng.choice([status] * 4 + [status.capitalize(), status.upper()])
        orders.append((i + 1, rng.randint(1, len(customers)), _day(rng, 2022, 2024), status))
        for product in rng.sample(range(1, len(products) + 1), rng.randint(1, 3)):
            items.append((i + 1, product, rng.randint(1, 5)))
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


def _school(rng: Any) -> Rows:
    students = [
        (i + 1, name, rng.randint(9, 12), _untidy(rng, rng.choice(CITIES)))
        for i, name in enumerate(_people(rng, rng.randint(40, 60)))
    ]
    offered = rng.sample(
        [(d, f"{s} {level}") for d, ss in DEPARTMENTS.items() for s in ss for level in ("I", "II")], 18
    )
    courses = [(i + 1, title, dept, rng.randint(1, 5)) for i, (dept, title) in enumerate(offered)]
    enrollments = [
        (
            s[0],
            c,
            rng.choice(("2023-fall", "2024-spring")),
            None if rng.random() < 0.1 else rng.randint(40, 100),
        )
        for s in students
        for c in rng.sample(range(1, len(courses) + 1), rng.randint(2, 5))
    ]
    return {"students": students, "courses": courses, "enrollments": enrollments}


def _clinic(rng: Any) -> Rows:
    doctors = [(i + 1, f"Dr. {name}", rng.choice(SPECIALTIES)) for i, name in enumerate(_people(rng, 12))]
    patients = [
        (i + 1, name, rng.randint(1940, 2015), _untidy(rng, rng.choice(CITIES)))
        for i, name in enumerate(_people(rng, rng.randint(40, 60)))
    ]
    visits = [
        (
            i + 1,
            rng.randint(1, len(patients)),
            rng.randint(1, len(doctors)),
            _day(rng, 2022, 2024),
            round(rng.uniform(40, 900), 2),
        )
        for i in range(rng.randint(100, 180))
    ]
    return {"doctors": doctors, "patients": patients, "visits": visits}


BUILDERS: dict[str, Callable[[Any], Rows]] = {"shop": _shop, "school": _school, "clinic": _clinic}


@lru_cache(maxsize=16)
def tables(schema: str, seed: int) -> dict[str, pa.Table]:
    """Database `seed` of `schema` as Arrow tables: the same rows on every machine."""
    rows = BUILDERS[schema](task_rng("sql-db", schema, seed))
    return {
        name: pa.table({col: [r[i] for r in rows[name]] for i, (col, _, _) in enumerate(columns)})
        for name, columns in SCHEMAS[schema].items()
    }


def open_database(schema: str, seed: int) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB holding database `seed` of `schema`, then locked: it reads and writes no file,
    loads no extension, and no query can change that."""
    db = duckdb.connect()
    db.execute(f"set memory_limit = '{QUERY_MB}MB'")
    db.execute("set threads = 1")
    db.execute("set enable_progress_bar = false")
    for name, table in tables(schema, seed).items():
        columns = ", ".join(f"{col} {kind}" for col, kind, _ in SCHEMAS[schema][name])
        db.execute(f"create table {name} ({columns})")
        db.register("_rows", table)
        db.execute(f"insert into {name} select * from _rows")
        db.unregister("_rows")
    for key, value in LOCKED.items():
        db.execute(f"set {key} = {value}")
    return db


def describe(schema: str) -> str:
    """What `schema` shows: one line per table."""
    lines = []
    for name, columns in SCHEMAS[schema].items():
        cols = ", ".join(f"{c} {k}" + (f" -> {fk}" if fk else "") for c, k, fk in columns)
        lines.append(f"{name}({cols})")
    return "\n".join(lines)


# ---- running a query ---------------------------------------------------------------------------------------------


class Refused(Exception):
    """A query the environment does not run, or that failed: its message is the observation."""


def checked(sql: str) -> str:
    """`sql` if it is one SELECT statement, else `Refused` saying what it is."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise Refused(_first_line(e)) from None
    if len(statements) != 1:
        raise Refused(f"write one statement, not {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise Refused(f"only SELECT runs here (the database is read-only), not {kind.name}")
    return sql


def fetch(
    db: duckdb.DuckDBPyConnection, sql: str, limit: int
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """Columns, the first `limit` rows and how many rows (counted up to MAX_ROWS + 1) one checked SELECT gives,
    in at most QUERY_SECONDS and QUERY_MB more MB; `Refused` with DuckDB's message otherwise."""

    def work() -> tuple[list[str], list[tuple[Any, ...]], int]:
        result = db.execute(checked(sql))
        rows = result.fetchmany(MAX_ROWS + 1)
        return [d[0] for d in result.description or []], rows[:limit], len(rows)

    try:
        with memory_bound(QUERY_MB):
            return interruptible(db, work, QUERY_SECONDS)
    except QueryTimeout:
        raise Refused(f"the query ran past {QUERY_SECONDS:g} s and was stopped") from None
    except MemoryError:
        raise Refused(f"the query needed more than {QUERY_MB} MB and was stopped") from None
    except (duckdb.Error, OSError) as e:
        raise Refused(_first_line(e)) from None


def _first_line(error: Exception) -> str:
    return echo(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__, 200)


def answer_set(rows: list[tuple[Any, ...]]) -> frozenset[tuple[Any, ...]]:
    """Rows as BIRD compares them: a set, numbers as floats to 6 decimals (so COUNT's 3 is AVG's 3.0)."""

    def value(v: Any) -> Any:
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int | float) or type(v).__name__ == "Decimal":
            return round(float(v), 6)
        return v

    return frozenset(tuple(value(v) for v in row) for row in rows)


def table_text(columns: list[str], rows: list[tuple[Any, ...]], total: int) -> str:
    """A result as the agent sees it: a header, the rows shown, and how many rows there were."""
    shown = [" | ".join(columns)] + [" | ".join("NULL" if v is None else str(v) for v in r) for r in rows]
    count = f"more than {MAX_ROWS}" if total > MAX_ROWS else str(total)
    return "\n".join([*shown, f"({count} row{'' if total == 1 else 's'})"])


# ---- questions -------------------------------------------------------------------------------------------------

Question = tuple[str, str, str]  # (level, question, gold SQL)


def _shop_questions(t: dict[str, pa.Table], rng: Any) -> list[Question]:
    customer = rng.choice(t["customers"]["name"].to_pylist())
    city = rng.choice(CITIES)
    category = rng.choice(sorted(CATEGORIES))
    year = rng.choice((2022, 2023, 2024))
    spelled = "lower(trim(city))"
    return [
        (
            "simple",
            f"How many customers live in {city}?",
            f"SELECT COUNT(*) FROM customers WHERE {spelled} = '{city.lower()}'",
        ),
        (
            "simple",
            f"What is the name of the most expensive product in the {category} category?",
            f"SELECT name FROM products WHERE category = '{category}' ORDER BY price DESC LIMIT 1",
        ),
        (
            "simple",
            "How many customers have no email address on file?",
            "SELECT COUNT(*) FROM customers WHERE email IS NULL",
        ),
        (
            "join",
            f"How many orders has {customer} placed?",
            "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
            f"WHERE c.name = '{customer}'",
        ),
        (
            "join",
            f"Which products has {customer} ordered? Give their names.",
            "SELECT DISTINCT p.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN order_items "
            f"i ON i.order_id = o.order_id JOIN products p ON p.product_id = i.product_id WHERE c.name = '{customer}'",
        ),
        (
            "aggregate",
            f"How many orders were shipped in {year}?",
            f"SELECT COUNT(*) FROM orders WHERE lower(status) = 'shipped' AND year(order_date) = {year}",
        ),
        (
            "aggregate",
            "Which product category sold the largest total quantity?",
            "SELECT p.category FROM order_items i JOIN products p ON p.product_id = i.product_id "
            "GROUP BY p.category ORDER BY SUM(i.quantity) DESC LIMIT 1",
        ),
        (
            "aggregate",
            "In how many different cities do the customers live?",
            f"SELECT COUNT(DISTINCT {spelled}) FROM customers",
        ),
        (
            "nested",
            "Which products cost more than the average price of their own category? Give their names.",
            "SELECT name FROM products p WHERE price > (SELECT AVG(price) FROM products q "
            "WHERE q.category = p.category)",
        ),
        (
            "nested",
            "Which customers have never placed an order? Give their names.",
            "SELECT name FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders)",
        ),
    ]


def _school_questions(t: dict[str, pa.Table], rng: Any) -> list[Question]:
    student = rng.choice(t["students"]["name"].to_pylist())
    course = rng.choice(t["courses"]["title"].to_pylist())
    department = rng.choice(sorted(DEPARTMENTS))
    grade = rng.randint(9, 12)
    return [
        (
            "simple",
            f"How many students are in grade {grade}?",
            f"SELECT COUNT(*) FROM students WHERE grade_level = {grade}",
        ),
        (
            "simple",
            f"List the titles of the courses of the {department} department.",
            f"SELECT title FROM courses WHERE department = '{department}'",
        ),
        (
            "join",
            f"What is the average score in {course}, rounded to 2 decimals?",
            "SELECT ROUND(AVG(e.score), 2) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
            f"WHERE c.title = '{course}'",
        ),
        (
            "join",
            f"Which courses is {student} enrolled in? Give their titles.",
            "SELECT c.title FROM students s JOIN enrollments e ON e.student_id = s.student_id JOIN courses c "
            f"ON c.course_id = e.course_id WHERE s.name = '{student}'",
        ),
        (
            "aggregate",
            "Which department has the most enrollments?",
            "SELECT c.department FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
            "GROUP BY c.department ORDER BY COUNT(*) DESC LIMIT 1",
        ),
        (
            "aggregate",
            "How many students have no score recorded in at least one of their courses?",
            "SELECT COUNT(DISTINCT student_id) FROM enrollments WHERE score IS NULL",
        ),
        (
            "nested",
            f"Which students scored above the average score of {course}? Give their names.",
            "SELECT s.name FROM students s JOIN enrollments e ON e.student_id = s.student_id JOIN courses c ON "
            f"c.course_id = e.course_id WHERE c.title = '{course}' AND e.score > (SELECT AVG(score) FROM "
            "enrollments WHERE course_id = c.course_id)",
        ),
    ]


def _clinic_questions(t: dict[str, pa.Table], rng: Any) -> list[Question]:
    patient = rng.choice(t["patients"]["name"].to_pylist())
    specialty = rng.choice(SPECIALTIES)
    city = rng.choice(CITIES)
    year = rng.choice((2022, 2023, 2024))
    born = rng.choice((1960, 1980, 2000))
    return [
        (
            "simple",
            f"How many doctors practise {specialty}?",
            f"SELECT COUNT(*) FROM doctors WHERE specialty = '{specialty}'",
        ),
        (
            "simple",
            f"How many patients were born before {born}?",
            f"SELECT COUNT(*) FROM patients WHERE birth_year < {born}",
        ),
        (
            "simple",
            f"How many patients live in {city}?",
            f"SELECT COUNT(*) FROM patients WHERE lower(trim(city)) = '{city.lower()}'",
        ),
        (
            "join",
            f"What is the total cost of {patient}'s visits, rounded to 2 decimals?",
            "SELECT ROUND(SUM(v.cost), 2) FROM visits v JOIN patients p ON p.patient_id = v.patient_id "
            f"WHERE p.name = '{patient}'",
        ),
        (
            "join",
            f"Which doctors has {patient} visited? Give their names.",
            "SELECT DISTINCT d.name FROM visits v JOIN patients p ON p.patient_id = v.patient_id JOIN doctors d "
            f"ON d.doctor_id = v.doctor_id WHERE p.name = '{patient}'",
        ),
        (
            "aggregate",
            f"Which specialty had the highest total visit cost in {year}?",
            "SELECT d.specialty FROM visits v JOIN doctors d ON d.doctor_id = v.doctor_id WHERE "
            f"year(v.visit_date) = {year} GROUP BY d.specialty ORDER BY SUM(v.cost) DESC LIMIT 1",
        ),
        (
            "nested",
            f"Which patients have never visited a {specialty} doctor? Give their names.",
            "SELECT name FROM patients WHERE patient_id NOT IN (SELECT v.patient_id FROM visits v JOIN doctors d "
            f"ON d.doctor_id = v.doctor_id WHERE d.specialty = '{specialty}')",
        ),
    ]


QUESTIONS: dict[str, Callable[[dict[str, pa.Table], Any], list[Question]]] = {
    "shop": _shop_questions,
    "school": _school_questions,
    "clinic": _clinic_questions,
}


def well_posed(db: duckdb.DuckDBPyConnection, gold: str) -> bool:
    """Whether `gold` has one clear answer: some row, not all NULL, and for a top-1 question no tie in second
    place (its LIMIT 1 raised to 2 must not give an equal ordering key)."""
    try:
        _, rows, total = fetch(db, gold, MAX_ROWS)
    except Refused:
        return False
    if total == 0 or total > 50 or all(v is None for row in rows for v in row):
        return False
    if gold.endswith(" DESC LIMIT 1"):  # the ordering key beside each row, two rows
        key = gold[gold.index(" ORDER BY ") + len(" ORDER BY ") : -len(" DESC LIMIT 1")]
        ranked = f"SELECT {key} AS k, {gold.removeprefix('SELECT ')}".removesuffix("LIMIT 1") + "LIMIT 2"
        _, top, _ = fetch(db, ranked, 2)
        return len(top) < 2 or top[0][0] != top[1][0]
    return True


# ---- the environment ---------------------------------------------------------------------------------------------


class SqlHidden(Hidden):
    database: Literal["shop", "school", "clinic"]
    db_seed: int = Field(ge=0, lt=DATABASES)
    gold: str = Field(min_length=1, max_length=600)


class Sql(Env):
    hidden_schema = SqlHidden
    spec = EnvSpec(
        name="sql",
        description="BIRD-style text-to-SQL on generated DuckDB data",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=10,
        expert="schema, a sample, the gold query",
    )

    def __init__(self) -> None:
        super().__init__()
        self.db: duckdb.DuckDBPyConnection | None = None

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("sql-tasks", seed)
        dbs: dict[tuple[str, int], duckdb.DuckDBPyConnection] = {}
        while True:  # endless: the draw skips ids it has seen
            schema, db_seed = rng.choice(sorted(SCHEMAS)), rng.randrange(DATABASES)
            level, question, gold = rng.choice(QUESTIONS[schema](tables(schema, db_seed), rng))
            if len(gold) > 280:  # "submit " and the SQL must fit one action
                continue
            if (schema, db_seed) not in dbs:
                if len(dbs) >= 8:
                    dbs.pop(next(iter(dbs))).close()
                dbs[(schema, db_seed)] = open_database(schema, db_seed)
            if not well_posed(dbs[(schema, db_seed)], gold):
                continue
            key = re.sub(r"[^a-z0-9]+", "-", question.lower()).strip("-")
            yield Task(
                env="sql",
                task_id=f"sql-{schema}-{db_seed}-{key}",
                split=split,
                difficulty=level,
                seed=db_seed,
                instruction=question,
                hidden={"database": schema, "db_seed": db_seed, "gold": gold},
            )

    def _reset(self, task: Task) -> str:
        self.close()
        hidden = task.hidden
        self.schema, self.gold = hidden["database"], hidden["gold"]
        self.db = open_database(self.schema, hidden["db_seed"])
        try:
            _, rows, total = fetch(self.db, self.gold, MAX_ROWS)
        except Refused as e:
            self.close()
            raise BadTask(f"hidden.gold does not run on database {self.schema}: {e}") from None
        self.answer = answer_set(rows)
        self.seen: set[str] = set()  # what the episode has looked at: "schema", "sample <table>"
        names = ", ".join(SCHEMAS[self.schema])
        return (
            f"{task.instruction}\nDatabase: {self.schema} (tables: {names}). "
            "Actions: schema | sample <table> | query <SQL> | submit <SQL>."
        )

    def _step(self, action: str) -> Step:
        assert self.db is not None
        match = ACTION.fullmatch(action)
        if match is None and BARE_SQL.match(action):
            match = ACTION.fullmatch(f"submit {action}")
        if match is None:
            return Step(
                f'Invalid action "{echo(action)}". Use: schema | sample <table> | query <SQL> | submit <SQL>.',
                0.0,
                False,
            )
        verb, rest = match.group(1).lower(), match.group(2).strip()
        if verb == "schema":
            self.seen.add("schema")
            return Step(describe(self.schema), 0.0, False)
        if verb == "sample":
            table = rest.strip('"').lower()
            if table not in SCHEMAS[self.schema]:
                return Step(
                    f'No table "{echo(rest)}". Tables: {", ".join(SCHEMAS[self.schema])}.', 0.0, False
                )
            self.seen.add(f"sample {table}")
            return Step(self._shown(f"SELECT * FROM {table} LIMIT 3"), 0.0, False)
        if not rest:
            return Step(f"Write the SQL after {verb}, e.g. {verb} SELECT COUNT(*) FROM ...", 0.0, False)
        if verb == "query":
            return Step(self._shown(rest), 0.0, False)
        try:
            _, rows, total = fetch(self.db, rest, MAX_ROWS)
        except Refused as e:
            return Step(f"Submitted; the query failed: {e}. Reward 0.", 0.0, True)
        right = total <= MAX_ROWS and answer_set(rows) == self.answer
        verdict = "matches the answer. Reward 1." if right else "does not match the answer. Reward 0."
        rows_text = "1 row" if total == 1 else f"{total} rows"
        return Step(f"Submitted; the result ({rows_text}) {verdict}", 1.0 if right else 0.0, True)

    def _shown(self, sql: str) -> str:
        assert self.db is not None
        try:
            columns, rows, total = fetch(self.db, sql, SHOWN_ROWS)
        except Refused as e:
            return f"Error: {e}"
        return table_text(columns, rows, total)

    def expert_step(self) -> tuple[str, str]:
        if "schema" not in self.seen:
            return "I look at the tables and how they join.", "schema"
        table = re.search(r"FROM (\w+)", self.gold)
        untidy = re.search(r"lower\(|IS NULL", self.gold)
        if untidy and table and f"sample {table.group(1)}" not in self.seen:
            name = table.group(1)
            return (
                f"Its values may be untidy (case, spaces, missing ones): I look at rows of {name}.",
                f"sample {name}",
            )
        return "I write the query that answers the question and submit it.", f"submit {self.gold}"

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
