r"""LOOP's behaviour metrics (section 5.5, Figure 3a; definitions in appendix A.1) as SQL over the rollout tables.

An `apps` reply is "Thought: ...\nAction: ..." whose code sits in ```python (or ```py) fenced blocks, the code
cells; an action with no fence at all is one cell. The user turn after it is the environment's answer, an error
when it starts "Execution failed.". Each metric is one query below (a module constant, so the README can show
it) over `turns` and `episodes`; `{where}` picks the episodes measured, a condition on `episodes` columns.

    python -m gymflow.eval.behaviour data/rollouts/evaluate/sft        # every metric of its `apps` episodes, JSON
    python -m gymflow.eval.behaviour --sql give_up_rate                 # a query's text (--where: which episodes)
    gymflow sql "$(python -m gymflow.eval.behaviour --sql give_up_rate --where "env = 'apps' and policy = 'sft'")"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import duckdb

from gymflow import paths
from gymflow.errors import UserError, run_command
from gymflow.store.db import read_only

# Shared by every query: the episodes measured, and each assistant turn's code cells and whether its code failed
# (NULL: no answer recorded, so it neither failed nor succeeded). A cell's text is what lies between the
# line of its opening fence and its closing fence, without the newline before that fence.
_REPLIES = r"""with scope as (  -- the episodes measured
    select episode_id from episodes where {where}
),
replies as (  -- assistant turns: code cells, all their code, and whether the environment answered with an error
    select episode_id, turn, text, failed,
        case when len(fenced) > 0 then fenced
             when trim(coalesce(action, '')) <> '' and not contains(action, '```') then [action]
             else []::varchar[] end as cells,
        array_to_string(cells, chr(10)) as code
    from (
        select episode_id, turn, role, text, action,
            regexp_extract_all(text, '(?s)```(?:python|py)[ \t]*\n(.*?)\n?```', 1) as fenced,
            case when lead(role) over w = 'user' then starts_with(lead(text) over w, 'Execution failed.') end
                as failed
        from turns
        where episode_id in (select episode_id from scope)
        window w as (partition by episode_id order by turn)
    )
    where role = 'assistant'
)"""

# Per episode means over every episode measured, those without an assistant turn included; NULL if none is.
_PER_EPISODE = "nullif((select count(*) from scope), 0)"

TURNS_PER_EPISODE = (
    _REPLIES
    + f"""
select count(*) / {_PER_EPISODE} as turns_per_episode
from replies"""
)

CODE_CHARS = (
    _REPLIES
    + f"""
select coalesce(sum(length(array_to_string(cells, ''))), 0) / {_PER_EPISODE} as code_chars_per_episode
from replies"""
)

# Open-loop control: several cells in one reply, which the environment runs back to back without the agent
# seeing what the first printed.
CODE_CELLS = (
    _REPLIES
    + """
select avg((len(cells) > 1)::integer) as multi_cell_turn_rate, avg(len(cells)) as cells_per_turn
from replies"""
)

EXECUTION_ERRORS = (
    _REPLIES
    + """
select avg(coalesce(failed, false)::integer) as execution_errors_per_turn
from replies"""
)

SHOW_API_DOC = (
    _REPLIES
    + rf"""
select coalesce(sum(len(regexp_extract_all(code, '\bapis\.api_docs\.show_api_doc\s*\('))), 0)
    / {_PER_EPISODE} as show_api_doc_per_episode
from replies"""
)

# The first call of each app API (not api_docs, not supervisor) in an episode, and whether a show_api_doc for
# that app and API came before it: in an earlier turn, or earlier in the same turn's code.
DOC_BEFORE_USE = (
    _REPLIES
    + r""",
calls as (  -- every API call in the code, in the order written; `head`: the call and its leading string arguments
    select episode_id, row_number() over (partition by episode_id order by turn, i) as seq, head,
        regexp_extract(head, '^apis\.(\w+)\.(\w+)', ['app', 'api']) as called
    from (
        select episode_id, turn, unnest(heads) as head, generate_subscripts(heads, 1) as i
        from (
            select episode_id, turn, regexp_extract_all(code, '\bapis\.\w+\.\w+\s*\((?:\s*(?:\w+\s*=\s*)?[''"]\w*[''"]\s*,?)*') as heads
            from replies
        )
    )
),
lookups as (  -- show_api_doc(app_name='phone', api_name='login'), by keyword or by position
    select episode_id, seq,
        coalesce(nullif(regexp_extract(head, 'app_name\s*=\s*[''"](\w+)', 1), ''),
            regexp_extract(head, '\(\s*[''"](\w+)[''"]', 1)) as app,
        coalesce(nullif(regexp_extract(head, 'api_name\s*=\s*[''"](\w+)', 1), ''),
            regexp_extract(head, '\(\s*[''"]\w+[''"]\s*,\s*[''"](\w+)[''"]', 1)) as api
    from calls
    where called.app = 'api_docs' and called.api = 'show_api_doc'
),
first_uses as (
    select episode_id, called.app as app, called.api as api, min(seq) as seq
    from calls
    where called.app not in ('api_docs', 'supervisor')
    group by all
)
select avg(exists (
        select 1 from lookups l
        where l.episode_id = f.episode_id and l.app = f.app and l.api = f.api and l.seq < f.seq
    )::integer) as doc_before_first_use
from first_uses f"""
)

# 'assume', 'assumed', 'assuming' once each ("assumed" is not also an "assume"), any case, anywhere in a reply.
ASSUMPTIONS = (
    _REPLIES
    + f"""
select coalesce(sum(len(regexp_extract_all(text, '(?i)assum(?:e|ed|ing)'))), 0) / {_PER_EPISODE}
    as assume_per_episode
from replies"""
)

# Placeholder values ('dummy_venmo_pass'); LOOP's figure counts 'dummy' alone.
PLACEHOLDERS = (
    _REPLIES
    + f"""
select coalesce(sum(len(regexp_extract_all(text, '(?i)dummy|placeholder|example'))), 0) / {_PER_EPISODE}
        as placeholder_per_episode,
    coalesce(sum(len(regexp_extract_all(text, '(?i)dummy'))), 0) / {_PER_EPISODE} as dummy_per_episode
from replies"""
)

# LOOP's algorithm (appendix A.1) keeps, per episode, the set of endpoints that failed and were not yet called
# again successfully: a failed turn adds its endpoints (each addition a failed call), a successful turn removes
# its endpoints (each removal a recovered call). An endpoint's membership depends only on the turns that call
# it: it is in the set exactly when the last turn that called it failed. So, per endpoint in call order, a
# failed turn is an addition when the previous call did not fail, and a successful one a removal when it did.
# Rate = (failed - recovered) / failed, NULL when nothing failed. Turns with no answer recorded are left out.
GIVE_UP = (
    _REPLIES
    + r""",
endpoints as (  -- each endpoint `app.api` a turn's code calls (once per turn), and whether that turn failed
    select distinct episode_id, turn, failed, regexp_extract(head, '^apis\.(\w+\.\w+)', 1) as endpoint
    from (
        select episode_id, turn, failed,
            unnest(regexp_extract_all(code, '\bapis\.\w+\.\w+\s*\(')) as head
        from replies
        where failed is not null
    )
),
steps as (
    select failed, lag(failed) over (partition by episode_id, endpoint order by turn) as was_failed
    from endpoints
),
counted as (
    select count(*) filter (where failed and was_failed is distinct from true) as failed_calls,
        count(*) filter (where not failed and was_failed) as recovered_calls
    from steps
)
select (failed_calls - recovered_calls) / nullif(failed_calls, 0) as give_up_rate
from counted"""
)

# Each query's name (for `--sql`) and text; its columns are the metric names.
QUERIES = {
    "turns_per_episode": TURNS_PER_EPISODE,
    "code_chars": CODE_CHARS,
    "code_cells": CODE_CELLS,
    "execution_errors": EXECUTION_ERRORS,
    "show_api_doc": SHOW_API_DOC,
    "doc_before_first_use": DOC_BEFORE_USE,
    "assumptions": ASSUMPTIONS,
    "placeholders": PLACEHOLDERS,
    "give_up_rate": GIVE_UP,
}

DEFAULT_WHERE = "env = 'apps'"
BEHAVIOUR_ENVS = ("apps",)  # the environments whose actions are code against `apis`: evaluation measures them


def query(name: str, where: str = DEFAULT_WHERE) -> str:
    """The text of query `name` measuring the episodes that satisfy `where` (str.replace, not format: SQL braces)."""
    if name not in QUERIES:
        raise UserError(f"no behaviour query {name!r}; one of {', '.join(QUERIES)}")
    return QUERIES[name].replace("{where}", f"({where})")


def behaviour(db: duckdb.DuckDBPyConnection, where: str = DEFAULT_WHERE) -> dict[str, float | None]:
    """Every metric over the episodes of `db` (a session with `episodes` and `turns`) that satisfy `where`,
    rounded to 4 decimals; None where it is undefined (no episode, no turn, no first use, nothing failed)."""
    out: dict[str, float | None] = {}
    for name in QUERIES:
        try:
            rel = db.sql(query(name, where))
            [row] = rel.fetchall()  # one row: aggregates without group by
        except duckdb.Error as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"behaviour query {name} with where {where!r}: {message}") from None
        for column, value in zip(rel.columns, row, strict=True):
            out[column] = None if value is None else round(float(value), 4)
    return out


def behaviour_metrics(rollouts: str | Path, where: str = DEFAULT_WHERE) -> dict[str, float | None]:
    """`behaviour` over the tables under a rollout directory (e.g. data/rollouts/evaluate/sft), in the read-only
    session `gymflow sql` uses: `where` may come from a user, and nothing it says can write a file."""
    return behaviour(read_only(rollouts), where)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m gymflow.eval.behaviour", description=__doc__.splitlines()[0])
    p.add_argument(
        "data", nargs="?", default=str(paths.DATA), help=f"a folder of rollout tables (default: {paths.DATA})"
    )
    p.add_argument("--where", default=DEFAULT_WHERE, help=f"episodes measured (default: {DEFAULT_WHERE})")
    p.add_argument("--sql", choices=list(QUERIES), help="print this query's text instead of running them all")
    args = p.parse_args(argv)
    if args.sql:
        print(query(args.sql, args.where))
    else:
        print(json.dumps(behaviour_metrics(args.data, args.where), indent=2))


if __name__ == "__main__":
    run_command(main)
