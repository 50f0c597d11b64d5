"""The sheet environment (gymflow/envs/sheet.py): changes checked on the sheet they leave and the sheets they
must not touch, A1 notation, formulas by hand, and the bounds on what a call may do."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from gymflow.envs import make_env
from gymflow.envs.base import BadTask
from gymflow.envs.sheet import MAX_CELLS, TEMPLATES, Sheet, a1, cell_of, same_sheet, sort_rows
from gymflow.envs.tools import ToolError

TASKS = list(itertools.islice(Sheet.generate("eval", 6), 120))


def do(env, tool: str, **args) -> str:
    return env.step(f"{tool} with Action Input: {json.dumps(args)}").observation


def _task(template: str):
    return next(t for t in TASKS if t.hidden["template"] == template)


def test_every_template_and_level_is_drawn_and_the_expert_solves_50_through_the_tools():
    assert {t.hidden["template"] for t in TASKS} == set(TEMPLATES)
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    env, solved = make_env("sheet"), 0
    for task in TASKS[:50]:
        env.reset(task)
        while not env.done:
            step = env.step(env.expert_step()[1])
        solved += step.reward == 1.0
    assert solved == 50


def test_a_change_to_another_sheet_as_well_fails_the_task():
    env = make_env("sheet")
    task = _task("quantity")
    env.reset(task)
    for _, tool, args in env.plan:
        do(env, tool, **args)
    other = next(s for s in ("Sheet1", "Sheet2") if s != env.target)
    do(env, "open_sheet", name=other)
    do(env, "update_cell", position="A2", value="changed")
    step = env.step("finish with Action Input: {}")
    assert step.done and not Sheet.spec.is_success(step.reward)
    env.reset(task)
    for _, tool, args in env.plan:
        do(env, tool, **args)
    assert env.step("finish with Action Input: {}").reward == 1.0


def test_numbers_compare_as_values_so_8_is_8_00():
    env = make_env("sheet")
    task = _task("quantity")
    env.reset(task)
    *steps, (_, _, last) = env.plan
    for _, tool, args in steps:
        do(env, tool, **args)
    do(env, "update_cell", position=last["position"], value=float(last["value"]))
    assert env.step("finish with Action Input: {}").reward == 1.0


def test_a1_notation_and_sorting_by_hand():
    assert [a1(1, 1), a1(3, 2), a1(10, 27), a1(1, 702)] == ["A1", "B3", "AA10", "ZZ1"]
    assert cell_of("aa10") == (10, 27)
    with pytest.raises(ToolError, match="A1 notation"):
        cell_of("3B")
    rows = [["name", "n"], ["b", "10.00"], ["a", "9.50"], ["c", "10.00"]]
    assert sort_rows(rows, 2, False) == [["name", "n"], ["a", "9.50"], ["b", "10.00"], ["c", "10.00"]]
    assert sort_rows(rows, 2, True)[1:] == [["b", "10.00"], ["c", "10.00"], ["a", "9.50"]]  # stable
    assert same_sheet([["x", "8.00"]], [["X ", 8]]) and not same_sheet([["x", "8.00"]], [["x", "8.02"]])


def test_formulas_by_hand():
    env = make_env("sheet")
    env.reset(TASKS[0])
    do(env, "open_sheet", name="Sheet1")
    do(env, "update_range", start_position="H1", end_position="H3", values_list=[["2"], ["3"], ["4.5"]])
    args = {"start_position": "H1", "end_position": "H3", "position_list": []}
    assert json.loads(do(env, "get_value_by_formula", **args, operator="SUM")) == 9.5
    assert json.loads(do(env, "get_value_by_formula", **args, operator="AVERAGE")) == pytest.approx(
        3.1667, abs=1e-4
    )
    assert json.loads(do(env, "get_value_by_formula", **args, operator="PRODUCT")) == 27.0
    picked = {"start_position": "A1", "end_position": "A1", "position_list": ["H1", "H3"]}
    assert json.loads(do(env, "get_value_by_formula", **picked, operator="MAX")) == 4.5
    do(env, "update_cell_by_formula", **args, result_position="H4", operator="MIN")
    assert do(env, "get_cell_value", position="H4") == "2.00"


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("update_cell", {"position": "ZZ9999", "value": 1}, f"at most {MAX_CELLS} cells"),
        ("insert_rows", {"values_list": [["x"]], "row_idx": 99}, "row_idx is 1 to"),
        ("delete_batch_data", {"dimension": "row", "index_list": [99]}, "indices run from 1"),
        ("sort_sheet_by_col", {"col_num": 40, "order": "asc"}, "col_num is 1 to 7"),
        (
            "update_range",
            {"start_position": "B2", "end_position": "A1", "values_list": []},
            "top-left cell first",
        ),
        (
            "get_value_by_formula",
            {"start_position": "A1", "end_position": "A3", "position_list": [], "operator": "MEDIAN"},
            "no numbers",
        ),
    ],
)
def test_a_refused_call_changes_nothing(tool, args, says):
    env = make_env("sheet")
    env.reset(TASKS[0])
    do(env, "open_sheet", name="Sheet1")
    before = json.dumps(env.book)
    step = env.step(f"{tool} with Action Input: {json.dumps(args)}")
    assert says in step.observation and not step.done and json.dumps(env.book) == before


def test_a_pattern_that_could_backtrack_for_ever_is_read_as_text():
    env = make_env("sheet")
    env.reset(TASKS[0])
    do(env, "open_sheet", name="Sheet1")
    do(env, "update_cell", position="A2", value="a" * 60 + "!")
    assert json.loads(do(env, "filter_cells", query="(a+)+$")) == []  # literal: no such text, and no hang
    found = json.loads(do(env, "filter_cells", query="^(Product|Category)$"))
    assert [f["cell"] for f in found] == ["A1", "B1"]


def test_a_row_whose_fields_do_not_match_its_template_is_refused():
    task = _task("category_total")
    with pytest.raises(BadTask, match="not what the template makes"):
        make_env("sheet").reset(replace(task, hidden={**task.hidden, "answer": -1}))
