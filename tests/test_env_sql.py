"""The sql environment (gymflow/envs/sql.py): BIRD's execution accuracy, the untidy values a query must handle,
the tools, and SQL that tries to write, read files or run away, answered as observations with nothing changed.
The protocol's general properties are tests/test_env_conformance.py's."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask, Task
from gymflow.envs.sql import LEVELS, SCHEMAS, Sql, answer_set, open_database


@functools.cache
def sql_tasks() -> list[Task]:
    """60 eval tasks (seed 7), made when a test first asks (seconds of building databases, not at collection)."""
    return list(itertools.islice(Sql.generate("eval", 7), 60))


def _task(level: str, schema: str | None = None) -> Task:
    return next(t for t in sql_tasks() if t.difficulty == level and schema in (None, t.hidden["database"]))


def test_tasks_cover_every_level_and_schema_and_fit_one_action():
    assert {t.difficulty for t in sql_tasks()} == set(LEVELS)
    assert {t.hidden["database"] for t in sql_tasks()} == set(SCHEMAS)
    assert all(len("submit " + t.hidden["gold"]) <= Sql.spec.max_action_chars for t in sql_tasks())
    assert [t.task_id for t in itertools.islice(Sql.generate("eval", 7), 60)] == [
        t.task_id for t in sql_tasks()
    ]


def test_the_expert_solves_50_tasks_through_the_tools_alone():
    env, solved, actions = make_env("sql"), 0, set()
    for task in sql_tasks()[:50]:
        env.reset(task)
        while not env.done:
            _, action = env.expert_step()
            actions.add(action.split()[0])
            step = env.step(action)
        solved += step.reward == 1.0
    assert solved == 50 and actions == {"schema", "sample", "submit"}


def test_the_reward_is_execution_accuracy_over_the_rows_as_a_set():
    env = make_env("sql")
    task = _task("join", "shop")  # one of its two join templates; both join customers to orders
    gold = task.hidden["gold"]
    env.reset(task)
    assert env.step(f"submit {gold}").reward == 1.0
    env.reset(task)  # the same rows in another order, and a trailing semicolon: still right
    assert env.step(f"submit SELECT * FROM ({gold}) ORDER BY 1 DESC;").reward == 1.0
    env.reset(task)  # an extra column is another answer
    assert env.step(f"submit SELECT *, 1 AS extra FROM ({gold})").reward == 0.0
    env.reset(task)
    step = env.step("submit SELECT 42")
    assert step.done and step.reward == 0.0 and "does not match" in step.observation


def test_numbers_compare_as_values_and_rows_as_a_set():
    assert answer_set([(3,)]) == answer_set([(3.0,)]) == answer_set([(3,), (3,)])
    assert answer_set([(1, "a"), (2, "b")]) == answer_set([(2, "b"), (1, "a")])
    assert answer_set([(0.1 + 0.2,)]) == answer_set([(0.3,)]) != answer_set([(0.31,)])
    assert answer_set([(None,)]) != answer_set([(0,)])


def test_untidy_values_change_the_answer_of_a_naive_query():
    """City names in mixed case and with stray spaces: the gold query cleans them, `city = 'Lyon'` does not."""
    env = make_env("sql")
    tasks = [
        t for t in sql_tasks() if "lower(trim(city))" in t.hidden["gold"] and "COUNT(*)" in t.hidden["gold"]
    ]
    naive = []
    for task in tasks:
        city = task.instruction.removeprefix("How many customers live in ").removeprefix(
            "How many patients live in "
        )
        table = "customers" if "customers" in task.hidden["gold"] else "patients"
        env.reset(task)
        naive.append(
            env.step(f"submit SELECT COUNT(*) FROM {table} WHERE city = '{city.rstrip('?')}'").reward
        )
    assert tasks and 0.0 in naive
    db = open_database("shop", 0)
    spellings = db.execute(
        "select count(distinct city), count(distinct lower(trim(city))) from customers"
    ).fetchone()
    assert spellings[0] > spellings[1]  # the same city written several ways


def test_a_bare_select_is_a_submit_as_agentgyms_sqlgym_client_sends_it():
    env = make_env("sql")
    task = _task("simple")
    env.reset(task)
    step = env.step(task.hidden["gold"])
    assert step.done and step.reward == 1.0


def test_the_tools_show_the_schema_rows_and_results():
    env = make_env("sql")
    task = _task("aggregate", "shop")
    env.reset(task)
    schema = env.step("schema").observation
    assert "orders(order_id INTEGER, customer_id INTEGER -> customers.customer_id" in schema
    sample = env.step("sample customers").observation.splitlines()
    assert sample[0] == "customer_id | name | city | email | signup_date" and sample[-1] == "(3 rows)"
    result = env.step(
        "query SELECT COUNT(*) AS n FROM order_items WHERE quantity > 0"
    ).observation.splitlines()
    assert result[0] == "n" and int(result[1]) > 100 and result[2] == "(1 row)"
    assert "No table" in env.step("sample secrets").observation
    assert not env.done


HOSTILE = {
    "DROP TABLE customers": "not DROP",
    "DELETE FROM orders": "not DELETE",
    "UPDATE products SET price = 0": "not UPDATE",
    "CREATE TABLE t AS SELECT 1": "not CREATE",
    "SELECT 1; DROP TABLE customers": "one statement, not 2",
    "SET enable_external_access = true": "not SET",
    "PRAGMA version": "not PRAGMA",
    "SELECT * FROM query('DROP TABLE customers')": "Parser Error",
    "SELECT * FROM read_csv('/etc/passwd')": "disabled by configuration",
    "SELECT * FROM glob('/*')": "disabled by configuration",
    "SELECT repeat('x', 2000000000)": "Out of Memory",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r": "stopped",
    "selec 1": "syntax error",
}


@pytest.mark.parametrize("sql", list(HOSTILE))
def test_sql_that_writes_reads_files_or_runs_away_is_an_observation_and_changes_nothing(sql, monkeypatch):
    monkeypatch.setattr("gymflow.envs.sql.QUERY_SECONDS", 0.3)  # the runaway query's bound, shortened
    env = make_env("sql")
    task = _task("aggregate", "shop")
    env.reset(task)
    before = env.step("query SELECT (SELECT COUNT(*) FROM customers), (SELECT SUM(price) FROM products)")
    step = env.step(f"query {sql}")
    assert step.observation.startswith("Error: ") and HOSTILE[sql] in step.observation and not step.done
    after = env.step("query SELECT (SELECT COUNT(*) FROM customers), (SELECT SUM(price) FROM products)")
    assert after.observation == before.observation


@pytest.mark.parametrize(
    "statement", ["COPY customers TO '{out}'", "ATTACH '{out}' AS other", "EXPORT DATABASE '{out}'"]
)
def test_no_query_writes_a_file(tmp_path: Path, statement: str):
    env = make_env("sql")
    env.reset(_task("simple", "shop"))
    out = tmp_path / "written"
    step = env.step("query " + statement.format(out=out))
    assert step.observation.startswith("Error: only SELECT runs here") and not out.exists()
    step = env.step("submit " + statement.format(out=out))  # a submit runs the same guard, and ends
    assert step.done and step.reward == 0.0 and not out.exists()


def test_a_task_row_from_outside_is_checked_before_it_is_played():
    task = _task("simple")
    wrong = {
        "database": {**task.hidden, "database": "bank"},
        "db_seed": {**task.hidden, "db_seed": 10**6},
        "gold": {**task.hidden, "gold": 5},
    }
    for field, hidden in wrong.items():
        with pytest.raises(BadTask, match=f"hidden.{field}"):
            Sql.check_task(Task(**{**task.__dict__, "hidden": hidden}))
    broken = Task(**{**task.__dict__, "hidden": {**task.hidden, "gold": "SELECT nope FROM customers"}})
    Sql.check_task(broken)  # well-formed; only the database can tell that the query does not run
    with pytest.raises(BadTask, match="hidden.gold does not run"):
        make_env("sql").reset(broken)
