"""LOOP's behaviour metrics (gymflow/eval/behaviour.py) on hand-made `apps` transcripts, numbers worked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.errors import UserError
from gymflow.eval.behaviour import QUERIES, behaviour, behaviour_metrics, main
from gymflow.store.db import connect, read_only, run_query
from gymflow.store.io import write_rows

FENCE = "```"
DOC_LOGIN = "print(apis.api_docs.show_api_doc(app_name='phone', api_name='login'))"
FAILED = "Execution failed.\nException: 401 phone.search_contacts: access token missing"


def py(*cells: str, thought: str = "I go on.") -> str:
    """A reply whose action is one ```python block per cell."""
    blocks = "\n".join(f"{FENCE}python\n{c}\n{FENCE}" for c in cells)
    return f"Thought: {thought}\nAction: {blocks}"


def write_episodes(folder: Path, episodes: list[tuple[str, list[tuple[str, str]]]], **columns) -> None:
    """Each episode: (task_id, [(assistant reply, environment answer), ...]); `columns` set episodes columns.
    The action stored is what `parse_action(multiline=True)` gives: everything after "Action:"."""
    meta = {"env": "apps", "policy": "sft", "stage": "evaluate"} | columns
    name = f"{meta['env']}-{meta['policy']}"
    ep_rows, turn_rows = [], []
    for task_id, exchanges in episodes:
        episode_id = f"main/{meta['stage']}/0/{meta['policy']}/{meta['env']}/{task_id}/0"
        ep_rows.append(
            {
                "episode_id": episode_id,
                "run": "main",
                "stage": meta["stage"],
                "iteration": 0,
                "policy": meta["policy"],
                "policy_hash": "",
                "config_hash": "",
                "env": meta["env"],
                "task_id": task_id,
                "split": "eval",
                "difficulty": "1",
                "group": f"{task_id}@0",
                "sample": 0,
                "seed": 0,
                "reward": 0.0,
                "success": False,
                "turns": len(exchanges),
                "horizon": 40,
                "end_reason": "done",
                "tokens": None,
            }
        )
        messages = [("system", "You write Python against apis.", None), ("user", "Do the task.", None)]
        for reply, answer in exchanges:
            action = reply.split("Action:", 1)[1].strip() if "Action:" in reply else None
            messages += [("assistant", reply, action), ("user", answer, None)]
        for i, (role, text, action) in enumerate(messages):
            turn_rows.append(
                {
                    "episode_id": episode_id,
                    "turn": i,
                    "role": role,
                    "text": text,
                    "action": action,
                    "reward": 0.0 if role == "user" and i > 1 else None,
                    "token_ids": [],
                    "logprobs": [],
                    "critic_score": None,
                    "advantage": None,
                }
            )
    write_rows(folder / f"{name}.episodes.parquet", "episodes", ep_rows)
    write_rows(folder / f"{name}.turns.parquet", "turns", turn_rows)


def test_open_loop_cells_and_code_characters(tmp_path: Path) -> None:
    write_episodes(
        tmp_path,
        [
            (
                "a",
                [
                    # two fenced cells, ```python and ```py: open-loop; 5 + 8 = 13 code characters
                    (f"Thought: t\nAction: {FENCE}python\nx = 1\n{FENCE}\n{FENCE}py\nprint(x)\n{FENCE}", "1"),
                    ("Thought: t\nAction: print(2)", "2"),  # no fence: the action is one cell, 8 characters
                    (py("y = 22"), "22"),  # one cell, 6 characters
                ],
            ),
            ("b", []),  # no assistant turn: counts as an episode, adds no turn
        ],
    )
    m = behaviour(connect(tmp_path))
    assert m["turns_per_episode"] == 1.5  # 3 replies / 2 episodes
    assert m["multi_cell_turn_rate"] == 0.3333  # 1 of 3 replies
    assert m["cells_per_turn"] == 1.3333  # (2 + 1 + 1) / 3
    assert m["code_chars_per_episode"] == 13.5  # (13 + 8 + 6) / 2
    assert m["execution_errors_per_turn"] == 0.0


def test_doc_lookup_before_first_use(tmp_path: Path) -> None:
    # a: login looked up in turn 1, used (nested in search_contacts' call) in turn 2: preceded. search_contacts:
    #    its look-up is only in the thought, not in code: not preceded, and not a show_api_doc call. supervisor
    #    calls are not API uses. -> 1 of 2; 1 show_api_doc.
    # b: one turn, show_friends used then looked up (not preceded); like_transaction looked up (positional app,
    #    keyword api, double quotes) then used (preceded); show_friends used again later. -> 1 of 2; 2 show_api_doc.
    # all: 2 of 4 first uses = 0.5; 3 show_api_doc / 2 episodes = 1.5
    a = [
        (py(DOC_LOGIN), "login(username, password)"),
        (
            py(
                "p = apis.supervisor.show_account_passwords()\n"
                "c = apis.phone.search_contacts(access_token=apis.phone.login(username='me', password=p[0])"
                "['access_token'], query='roommate')",
                thought="apis.api_docs.show_api_doc(app_name='phone', api_name='search_contacts') would help.",
            ),
            "[]",
        ),
    ]
    b = [
        (
            py(
                "f = apis.venmo.show_friends(access_token=t)\n"
                "print(apis.api_docs.show_api_doc('venmo', 'show_friends'))\n"
                'print(apis.api_docs.show_api_doc("venmo", api_name="like_transaction"))\n'
                "apis.venmo.like_transaction(access_token=t, transaction_id=1)"
            ),
            "ok",
        ),
        (py("apis.venmo.show_friends(access_token=t)"), "ok"),
    ]
    write_episodes(tmp_path, [("a", a), ("b", b)])
    m = behaviour(connect(tmp_path))
    assert m["doc_before_first_use"] == 0.5
    assert m["show_api_doc_per_episode"] == 1.5


def test_assumption_and_placeholder_words(tmp_path: Path) -> None:
    # assistant text: assume, Assumed (once, not also 'assume'), ASSUMING, assumes (holds 'assume'); 'assumption'
    # is none of the three -> 4. dummy_pass, Dummy -> 2 'dummy'; + placeholder, example, EXAMPLES -> 5 placeholders.
    # The environment's answer holds 'assume' and 'dummy' and counts for nothing. Two episodes -> halves.
    reply = py(
        "apis.phone.login(username='me', password='dummy_pass')",
        thought="I assume it. Assumed twice? ASSUMING so; it assumes; an assumption. Dummy placeholder, "
        "for example, EXAMPLES.",
    )
    write_episodes(tmp_path, [("a", [(reply, "we assume a dummy")]), ("b", [])])
    m = behaviour(connect(tmp_path))
    assert m["assume_per_episode"] == 2.0
    assert m["dummy_per_episode"] == 1.0
    assert m["placeholder_per_episode"] == 2.5


def test_give_up_rate_follows_loop(tmp_path: Path) -> None:
    # turn 1: docs + login succeed                                set {}                   failed 0, recovered 0
    # turn 2: search_contacts fails                               {search}                 failed 1
    # turn 3: venmo.show_friends fails (unfenced action)          {search, friends}        failed 2
    # turn 4: search_contacts (twice) and relationships fail      {search, friends, rel}   failed 3 (search was in)
    # turn 5: search_contacts succeeds                            {friends, rel}           recovered 1
    # turn 6: complete_task succeeds                              {friends, rel}
    # -> (3 - 1) / 3 = 0.6667; 3 execution errors in 6 turns = 0.5
    turns = [
        (py(DOC_LOGIN, "t = apis.phone.login(username='me', password='x')"), "{'access_token': 't'}"),
        (py("apis.phone.search_contacts(query='roommate')"), FAILED),
        ("Thought: t\nAction: apis.venmo.show_friends()", "Execution failed.\nException: 401 venmo"),
        (
            py(
                "apis.phone.search_contacts(query='roommate')\n"
                "apis.phone.search_contacts(query='mate')\n"
                "apis.phone.show_contact_relationships()"
            ),
            FAILED,
        ),
        (py("apis.phone.search_contacts(access_token=t, query='roommate')"), "[{'name': 'Ann'}]"),
        (py("apis.supervisor.complete_task(answer=None)"), "done"),
    ]
    write_episodes(tmp_path, [("a", turns)])
    m = behaviour(connect(tmp_path))
    assert m["give_up_rate"] == 0.6667
    assert m["execution_errors_per_turn"] == 0.5
    assert m["multi_cell_turn_rate"] == 0.1667  # turn 1's two cells


def test_give_up_counts_a_second_failure_after_recovery(tmp_path: Path) -> None:
    # login fails (failed 1), succeeds (recovered 1), fails again and is left (failed 2): (2 - 1) / 2
    # episode b fails nothing: it adds no failed call
    call = py("apis.phone.login(username='me', password='x')")
    write_episodes(tmp_path, [("a", [(call, FAILED), (call, "ok"), (call, FAILED)]), ("b", [(call, "ok")])])
    assert behaviour(connect(tmp_path))["give_up_rate"] == 0.5


def test_where_picks_the_episodes(tmp_path: Path) -> None:
    # apps/sft: gives up on 1 of 1 failed endpoints; apps/init recovers its only one; maze is not `apps`
    fail = py("apis.phone.login(username='me', password='dummy')", thought="I assume so.")
    ok = py("apis.phone.login(username='me', password='pw')")
    write_episodes(tmp_path, [("a", [(fail, FAILED)])], policy="sft")
    write_episodes(tmp_path, [("a", [(fail, FAILED), (ok, "ok")]), ("b", [])], policy="init")
    write_episodes(tmp_path, [("a", [(fail, FAILED)] * 3)], env="maze")
    db = connect(tmp_path)
    sft = behaviour(db, "env = 'apps' and policy = 'sft'")
    init = behaviour(db, "env = 'apps' and policy = 'init'")
    both = behaviour(db)  # env = 'apps'
    assert (sft["give_up_rate"], init["give_up_rate"], both["give_up_rate"]) == (1.0, 0.0, 0.5)
    assert (sft["turns_per_episode"], init["turns_per_episode"], both["turns_per_episode"]) == (1.0, 1.0, 1.0)
    assert (sft["assume_per_episode"], init["assume_per_episode"], both["assume_per_episode"]) == (
        1.0,
        0.5,
        0.6667,
    )


def test_nothing_failed_or_nothing_measured_is_none(tmp_path: Path) -> None:
    write_episodes(
        tmp_path, [("a", [(py("apis.phone.login(username='me', password='pw')"), "ok")]), ("b", [])]
    )
    db = connect(tmp_path)
    assert behaviour(db)["give_up_rate"] is None
    no_turns = behaviour(db, "task_id = 'b'")  # an episode without assistant turns: per-turn rates undefined
    assert no_turns["turns_per_episode"] == 0.0 and no_turns["code_chars_per_episode"] == 0.0
    assert no_turns["cells_per_turn"] is None and no_turns["execution_errors_per_turn"] is None
    nothing = behaviour(db, "env = 'wordle'")
    assert set(nothing) == {
        "turns_per_episode",
        "code_chars_per_episode",
        "multi_cell_turn_rate",
        "cells_per_turn",
        "execution_errors_per_turn",
        "show_api_doc_per_episode",
        "doc_before_first_use",
        "assume_per_episode",
        "placeholder_per_episode",
        "dummy_per_episode",
        "give_up_rate",
    }
    assert all(v is None for v in nothing.values())


def test_printed_query_runs_in_gymflow_sql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # what the README tells users to paste into `gymflow sql` gives what the evaluate stage records
    call = py("apis.phone.login(username='me', password='x')")
    write_episodes(tmp_path, [("a", [(call, FAILED), (call, "ok"), (call, FAILED)])])
    main(["--sql", "give_up_rate", "--where", "env = 'apps' and policy = 'sft'"])
    columns, rows, _ = run_query(read_only(tmp_path), capsys.readouterr().out, 0)
    assert (columns, rows) == (["give_up_rate"], [["0.5"]])
    main([str(tmp_path)])
    assert json.loads(capsys.readouterr().out) == behaviour_metrics(tmp_path)
    for name in QUERIES:  # every query is read-only SQL the locked console accepts
        run_query(read_only(tmp_path), QUERIES[name].replace("{where}", "true"), 0)


def test_bad_where_or_name_is_a_user_error(tmp_path: Path) -> None:
    write_episodes(tmp_path, [("a", [])])
    with pytest.raises(UserError, match="no_such_column"):
        behaviour(connect(tmp_path), "no_such_column = 1")
    with pytest.raises(SystemExit):  # argparse: not one of the queries
        main(["--sql", "nonsense"])
