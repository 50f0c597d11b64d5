"""Sheet in the image of AgentGym's (AgentBoard's) spreadsheet tool environment, offline: product-inventory
tables in a workbook of five sheets, changed and read with its 20 tools, over a workbook generated from each
task's seed.

Each sheet holds AgentBoard's inventory columns (Product, Category, Price, Quantity, Discount, Location, Product
Rating) for 8 to 12 products, numbers written as text with two decimals as AgentBoard's are. Tasks are
AgentBoard's kinds: sort by a column, update a quantity, record today's sales, delete a category, raise a
category's prices, add a product, and a question (a category's total quantity). A change succeeds when `finish`
is called with the named sheet as the change leaves it (numbers compared as values, to 0.01) and every other
sheet as it was; a question when `finish` gives its answer. The reward is AgentBoard's progress rate with a
right finish as the last subgoal (`gymflow.envs.tools`); the expert plays its template's plan.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from gymflow.envs.base import Task, task_rng
from gymflow.envs.tools import (
    Made,
    Plan,
    TemplateHidden,
    Tool,
    ToolEnv,
    ToolError,
    same_answer,
    tool_spec,
)

SHEETS = tuple(f"Sheet{i}" for i in range(1, 6))
HEADER = ["Product", "Category", "Price", "Quantity", "Discount", "Location", "Product Rating"]
GOODS = {
    "Meat": ["beef", "pork", "chicken", "lamb", "duck"],
    "Seafood": ["fish", "shrimp", "salmon", "crab"],
    "Fruits": ["apple", "banana", "orange", "pear", "grape"],
    "Vegetables": ["carrot", "potato", "onion", "pepper", "lettuce"],
}
STORES = ("Store A", "Store B", "Store C")
A1 = re.compile(r"([A-Z]{1,2})([1-9][0-9]{0,3})")
MAX_CELLS = 2_000  # a sheet may not grow past this (inserts of huge lists are refused)
SAFE_PATTERN = re.compile(
    r"\^?\(?[\w .'|-]*\)?\$?"
)  # filter_cells: no quantifier, so no runaway backtracking


def _money(x: float) -> str:
    return f"{x:.2f}"


def workbook(choices: int) -> dict[str, list[list[str]]]:
    """Five inventory sheets from task seed `choices`."""
    rng = task_rng("sheet-book", choices)
    book = {}
    for name in SHEETS:
        items = rng.sample([(c, g) for c, gs in GOODS.items() for g in gs], rng.randint(8, 12))
        rows = [HEADER[:]]
        for category, good in items:
            rows.append(
                [
                    good,
                    category,
                    _money(rng.uniform(0.5, 30)),
                    _money(rng.randint(5, 300)),
                    _money(rng.choice([0, 0.05, 0.1, 0.15, 0.2])),
                    rng.choice(STORES),
                    _money(round(rng.uniform(3, 5), 1)),
                ]
            )
        book[name] = rows
    return book


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def sort_rows(rows: list[list[str]], col: int, descending: bool) -> list[list[str]]:
    """The header first, then the rows by column `col` (1-based): numbers as numbers, stable."""

    def key(row: list[str]) -> tuple[int, Any]:
        cell = row[col - 1] if col - 1 < len(row) else ""
        number = _number(cell)
        return (0, number) if number is not None else (1, cell.lower())

    return [rows[0], *sorted(rows[1:], key=key, reverse=descending)]


def same_sheet(a: list[list[str]], b: list[list[str]]) -> bool:
    """Cell by cell, numbers as values (to 0.01), text without case or surrounding spaces."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b, strict=True)):
        return False
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            nu, nv = _number(str(u)), _number(str(v))
            if (nu is None) != (nv is None):
                return False
            if (
                nu is not None
                and abs(nu - nv) > 0.01
                or nu is None
                and str(u).strip().lower() != str(v).strip().lower()
            ):
                return False
    return True


def a1(row: int, col: int) -> str:
    """(1, 1) -> "A1"."""
    letters = ""
    while col:
        col, rest = divmod(col - 1, 26)
        letters = chr(65 + rest) + letters
    return f"{letters}{row}"


def cell_of(position: str) -> tuple[int, int]:
    """ "B3" -> (3, 2); ToolError for anything else."""
    match = A1.fullmatch(position.strip().upper())
    if match is None:
        raise ToolError(f'"{position[:10]}" is not a cell in A1 notation, e.g. "B3"')
    col = 0
    for ch in match.group(1):
        col = col * 26 + ord(ch) - 64
    return int(match.group(2)), col


# ---- templates: (level, question, expected sheet or None, answer, subgoals, plan) --------------------------------

# a template's draw: (level, question, the state a change must leave or None, answer, subgoals, plan)
Drawn = tuple[str, str, list[list[str]] | None, Any, list[Any], Plan]


def _open(sheet: str) -> Plan:
    return [(f"I open {sheet}.", "open_sheet", {"name": sheet}), ("I read its values.", "get_all_values", {})]


def _t_sort(rng: Any, book: dict[str, list[list[str]]]) -> Drawn:
    sheet = rng.choice(SHEETS)
    col = rng.choice([3, 4, 7])
    descending = rng.random() < 0.5
    after = sort_rows(book[sheet], col, descending)
    order = "des" if descending else "asc"
    plan = [*_open(sheet), ("I sort it.", "sort_sheet_by_col", {"col_num": col, "order": order})]
    words = "descending" if descending else "ascending"
    return (
        "easy",
        f'In "{sheet}", sort the products by "{HEADER[col - 1]}" in {words} order.',
        after,
        None,
        [sheet, after[1][0]],
        plan,
    )


def _t_quantity(rng: Any, book: dict[str, list[list[str]]]) -> Drawn:
    sheet = rng.choice(SHEETS)
    row = rng.randrange(1, len(book[sheet]))
    value = _money(rng.randint(5, 300))
    after = copy.deepcopy(book[sheet])
    after[row][3] = value
    product = after[row][0]
    plan = [
        *_open(sheet),
        (
            f"{product}'s quantity is cell {a1(row + 1, 4)}.",
            "update_cell",
            {"position": a1(row + 1, 4), "value": value},
        ),
    ]
    return (
        "easy",
        f'In "{sheet}", the quantity of {product} is now {value}: update it.',
        after,
        None,
        [sheet, value],
        plan,
    )


def _t_sales(rng: Any, book: dict[str, list[list[str]]]) -> Drawn:
    sheet = rng.choice(SHEETS)
    rows = book[sheet]
    sold = {r: rng.randint(1, int(float(rows[r][3]))) for r in rng.sample(range(1, len(rows)), 3)}
    after = copy.deepcopy(rows)
    plan = _open(sheet)
    for r, n in sorted(sold.items()):
        after[r][3] = _money(float(rows[r][3]) - n)
        plan.append(
            (f"{rows[r][0]} sold {n}.", "update_cell", {"position": a1(r + 1, 4), "value": after[r][3]})
        )
    listed = ", ".join(f"{rows[r][0]} {n}" for r, n in sorted(sold.items()))
    return (
        "medium",
        f"In \"{sheet}\", record today's sales by lowering each product's Quantity: {listed}.",
        after,
        None,
        [sheet, *[after[r][3] for r in sorted(sold)]],
        plan,
    )


def _t_delete_category(rng: Any, book: dict[str, list[list[str]]]) -> Drawn | None:
    sheet = rng.choice(SHEETS)
    rows = book[sheet]
    categories = sorted({r[1] for r in rows[1:]})
    category = rng.choice(categories)
    gone = [i + 1 for i, r in enumerate(rows) if i and r[1] == category]  # 1-based sheet rows
    if len(gone) == len(rows) - 1:
        return None
    after = [r for i, r in enumerate(rows) if i + 1 not in gone]
    plan = [
        *_open(sheet),
        (f"Rows {gone} hold {category}.", "delete_batch_data", {"dimension": "row", "index_list": gone}),
    ]
    return (
        "medium",
        f'In "{sheet}", delete every product of the {category} category.',
        after,
        None,
        [sheet, len(after)],
        plan,
    )


def _t_raise_prices(rng: Any, book: dict[str, list[list[str]]]) -> Drawn:
    sheet = rng.choice(SHEETS)
    rows = book[sheet]
    category = rng.choice(sorted({r[1] for r in rows[1:]}))
    percent = rng.choice([5, 10, 20])
    after = copy.deepcopy(rows)
    plan = _open(sheet)
    changed = []
    for i, r in enumerate(rows):
        if i and r[1] == category:
            after[i][2] = _money(float(r[2]) * (1 + percent / 100))
            changed.append(after[i][2])
            plan.append(
                (
                    f"{r[0]} costs {after[i][2]} now.",
                    "update_cell",
                    {"position": a1(i + 1, 3), "value": after[i][2]},
                )
            )
    return (
        "hard",
        f'In "{sheet}", raise the price of every {category} product by {percent}% (two decimals).',
        after,
        None,
        [sheet, *changed],
        plan,
    )


def _t_add_product(rng: Any, book: dict[str, list[list[str]]]) -> Drawn | None:
    sheet = rng.choice(SHEETS)
    rows = book[sheet]
    present = {r[0] for r in rows[1:]}
    missing = [(c, g) for c, gs in GOODS.items() for g in gs if g not in present]
    if not missing:
        return None
    category, good = rng.choice(missing)
    new = [
        good,
        category,
        _money(rng.uniform(0.5, 30)),
        _money(rng.randint(5, 300)),
        "0.00",
        rng.choice(STORES),
        "4.00",
    ]
    after = [*copy.deepcopy(rows), new]
    plan = [
        *_open(sheet),
        ("I add the row at the end.", "insert_rows", {"values_list": [new], "row_idx": len(rows) + 1}),
    ]
    described = ", ".join(f"{h} {v}" for h, v in zip(HEADER, new, strict=True))
    return (
        "medium",
        f'In "{sheet}", add a product at the end of the table: {described}.',
        after,
        None,
        [sheet, good],
        plan,
    )


def _t_category_total(rng: Any, book: dict[str, list[list[str]]]) -> Drawn:
    sheet = rng.choice(SHEETS)
    rows = book[sheet]
    category = rng.choice(sorted({r[1] for r in rows[1:]}))
    total = round(sum(float(r[3]) for r in rows[1:] if r[1] == category), 2)
    return (
        "easy",
        f'In "{sheet}", what is the total Quantity of the {category} products? Please answer with a number.',
        None,
        total,
        [sheet, total],
        _open(sheet),
    )


TEMPLATES: dict[str, Callable[[Any, dict[str, list[list[str]]]], Drawn | None]] = {
    "sort": _t_sort,
    "quantity": _t_quantity,
    "sales": _t_sales,
    "delete_category": _t_delete_category,
    "raise_prices": _t_raise_prices,
    "add_product": _t_add_product,
    "category_total": _t_category_total,
}

POS = (("position", "string", "A cell in A1 notation, e.g. B3."),)
SPAN = (
    ("start_position", "string", "The first cell (A1)."),
    ("end_position", "string", "The last cell (A1)."),
)
OPS = "SUM, AVERAGE, MAX, MIN or PRODUCT"
TOOLS = [
    Tool(
        "open_sheet", "Open a sheet by name.", (("name", "string", "The sheet's name."),), "The opened sheet."
    ),
    Tool(
        "del_sheet",
        "Delete the specified sheet.",
        (("name", "string", "The sheet's name."),),
        "Whether it went.",
    ),
    Tool(
        "freeze_data",
        "Freeze rows or columns of the open sheet.",
        (("dimension", "string", "rows or columns."), ("num", "integer", "How many.")),
        "Whether it froze.",
    ),
    Tool(
        "get_A1_annotation",
        "Translate a cell position (row, col) into A1 notation.",
        (("row", "integer", "1-based."), ("col", "integer", "1-based.")),
        "The A1 notation.",
    ),
    Tool(
        "insert_cols",
        "Insert columns at a column index.",
        (("values_list", "array", "One list per column."), ("col_idx", "integer", "1-based.")),
        "The updated sheet.",
    ),
    Tool(
        "insert_rows",
        "Insert rows at a row index.",
        (("values_list", "array", "One list per row."), ("row_idx", "integer", "1-based.")),
        "The updated sheet.",
    ),
    Tool(
        "delete_batch_data",
        "Delete rows or columns.",
        (("dimension", "string", "row or col."), ("index_list", "array", "1-based indices.")),
        "The updated sheet.",
    ),
    Tool(
        "update_cell",
        "Update the value of a cell.",
        (*POS, ("value", "any", "The new value.")),
        "The updated sheet.",
    ),
    Tool(
        "update_cell_by_formula",
        f"Put the result of {OPS} over a range or a list of cells into a cell.",
        (
            *SPAN,
            ("position_list", "array", "Cells (A1), or [] to use the range."),
            ("result_position", "string", "Where the result goes (A1)."),
            ("operator", "string", OPS),
        ),
        "The updated sheet.",
    ),
    Tool(
        "update_range",
        "Update a range of cells from a list of rows.",
        (*SPAN, ("values_list", "array", "One list per row.")),
        "The updated sheet.",
    ),
    Tool(
        "sort_sheet_by_col",
        "Sort the rows under the header by a column.",
        (("col_num", "integer", "1-based."), ("order", "string", "asc or des.")),
        "The updated sheet.",
    ),
    Tool("merge_cells", "Merge cells in the open sheet.", SPAN, "The updated sheet."),
    Tool(
        "update_note",
        "Set a cell's note.",
        (
            *POS,
            ("content", "string", "The note."),
        ),
        "The note.",
    ),
    Tool("get_all_values", "Get every value of the open sheet.", (), "The rows."),
    Tool("get_range_values", "Get the values of a range.", SPAN, "The rows of the range."),
    Tool("get_cell_value", "Get a cell's value.", POS, "The value."),
    Tool(
        "get_value_by_formula",
        f"Compute {OPS} over a range or a list of cells.",
        (
            *SPAN,
            ("position_list", "array", "Cells (A1), or [] to use the range."),
            ("operator", "string", OPS),
        ),
        "The result.",
    ),
    Tool(
        "filter_cells",
        "Find the cells whose value matches a regular expression.",
        (("query", "string", "A regular expression."),),
        "The matching cells (A1) and values.",
    ),
    Tool("get_note", "Get a cell's note.", POS, "The note."),
]
EXAMPLE = (
    'Goal: In "Sheet2", update the quantity of apple to 40.00.\nThought: I open the sheet.\nAction: open_sheet '
    'with Action Input: {"name": "Sheet2"}\nObservation: ...\nAction: get_all_values with Action Input: {}\n'
    'Observation: [["Product", ...], ["apple", "Fruits", "1.20", "35.00", ...]]\nAction: update_cell with Action '
    'Input: {"position": "D2", "value": "40.00"}\nObservation: ...\nAction: finish with Action Input: {}'
)


class SheetHidden(TemplateHidden):
    templates = TEMPLATES


class Sheet(ToolEnv):
    hidden_schema = SheetHidden
    spec = tool_spec(
        "sheet", "inventory spreadsheets over 20 tools (AgentBoard)", TOOLS, EXAMPLE, max_turns=20
    )

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made | None:
        """The workbook of the task's seed, and what the template makes of it."""
        book = workbook(hidden["choices"])
        out = TEMPLATES[hidden["template"]](task_rng("sheet-choices", hidden["choices"]), book)
        if out is None:
            return None
        level, question, expected, answer, subgoals, plan = out
        return Made(level, question, answer, subgoals, plan, expected, world=book)

    def begin(self, task: Task) -> None:
        self.book = self.world
        self.before = copy.deepcopy(self.book)
        self.target = re.search(r'"(Sheet\d)"', task.instruction).group(1)
        self.open: str | None = None

    def finish_step(self) -> tuple[str, str]:
        if self.expected is None:
            return super().finish_step()
        return "The sheet is as asked.", "finish with Action Input: {}"

    def finished_right(self, answer: Any) -> bool:
        if self.expected is None:
            return same_answer(answer, self.task.hidden["answer"])
        others = [s for s in SHEETS if s != self.target]
        return (
            set(self.book) == set(SHEETS)
            and same_sheet(self.book[self.target], self.expected)
            and all(self.book[s] == self.before[s] for s in others)
        )

    # ---- the tools ----------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        runs: dict[str, Callable[..., Any]] = {
            "open_sheet": self._open_sheet,
            "del_sheet": self._del_sheet,
            "freeze_data": lambda dimension, num: self._rows() and f"froze {num} {dimension}",
            "get_A1_annotation": lambda row, col: self._a1(row, col),
            "insert_cols": self._insert_cols,
            "insert_rows": self._insert_rows,
            "delete_batch_data": self._delete,
            "update_cell": self._update_cell,
            "update_cell_by_formula": self._update_by_formula,
            "update_range": self._update_range,
            "sort_sheet_by_col": self._sort,
            "merge_cells": lambda start_position, end_position: self._rows() and "merged",
            "update_note": lambda position, content: self._rows() and f"note at {position.upper()} set",
            "get_all_values": lambda: self._rows(),
            "get_range_values": lambda start_position, end_position: self._range(
                start_position, end_position
            ),
            "get_cell_value": lambda position: self._cell(position),
            "get_value_by_formula": self._formula,
            "filter_cells": self._filter,
            "get_note": lambda position: self._rows() and "",
        }
        return {t.name: (t, runs[t.name]) for t in TOOLS}

    def _rows(self) -> list[list[str]]:
        if self.open is None:
            raise ToolError("open a sheet first (open_sheet)")
        return self.book[self.open]

    def _open_sheet(self, name: str) -> str:
        if name not in self.book:
            raise ToolError(f'no sheet "{name[:20]}"; there are {", ".join(self.book)}')
        self.open = name
        return f"{name} is open."

    def _del_sheet(self, name: str) -> str:
        if name not in self.book:
            raise ToolError(f'no sheet "{name[:20]}"')
        del self.book[name]
        self.open = None if self.open == name else self.open
        return f"{name} is deleted."

    def _a1(self, row: int, col: int) -> str:
        if not (1 <= row <= 9999 and 1 <= col <= 702):
            raise ToolError("row is 1 to 9999 and col 1 to 702")
        return a1(row, col)

    def _cell(self, position: str) -> str:
        row, col = cell_of(position)
        rows = self._rows()
        return rows[row - 1][col - 1] if row <= len(rows) and col <= len(rows[row - 1]) else ""

    def _put(self, row: int, col: int, value: Any) -> None:
        rows = self._rows()
        self._room(max(len(rows), row) * max(len(rows[0]), col))
        while len(rows) < row:
            rows.append([""] * len(rows[0]))
        while len(rows[row - 1]) < col:
            rows[row - 1].append("")
        rows[row - 1][col - 1] = str(value)

    def _room(self, cells: int) -> None:
        """Refuse, before anything changes, a sheet that would hold more than MAX_CELLS cells."""
        if cells > MAX_CELLS:
            raise ToolError(f"a sheet holds at most {MAX_CELLS} cells")

    def _update_cell(self, position: str, value: Any) -> list[list[str]]:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ToolError("value is a string or a number")
        row, col = cell_of(position)
        self._put(row, col, value)
        return self._rows()

    def _span(self, start_position: str, end_position: str) -> tuple[int, int, int, int]:
        (r1, c1), (r2, c2) = cell_of(start_position), cell_of(end_position)
        if r2 < r1 or c2 < c1 or (r2 - r1 + 1) * (c2 - c1 + 1) > MAX_CELLS:
            raise ToolError("give the range's top-left cell first, at most 2000 cells")
        return r1, c1, r2, c2

    def _update_range(
        self, start_position: str, end_position: str, values_list: list[Any]
    ) -> list[list[str]]:
        r1, c1, r2, c2 = self._span(start_position, end_position)
        if len(values_list) != r2 - r1 + 1 or any(
            not isinstance(v, list) or len(v) != c2 - c1 + 1 for v in values_list
        ):
            raise ToolError(f"values_list must be {r2 - r1 + 1} rows of {c2 - c1 + 1} values")
        for i, row in enumerate(values_list):
            for j, value in enumerate(row):
                self._put(r1 + i, c1 + j, value)
        return self._rows()

    def _range(self, start_position: str, end_position: str) -> list[list[str]]:
        r1, c1, r2, c2 = self._span(start_position, end_position)
        return [[self._cell(a1(r, c)) for c in range(c1, c2 + 1)] for r in range(r1, r2 + 1)]

    def _values(self, start_position: str, end_position: str, position_list: list[Any]) -> list[float]:
        cells = (
            [self._cell(p) for p in position_list if isinstance(p, str)]
            if position_list
            else [v for row in self._range(start_position, end_position) for v in row]
        )
        numbers = [n for n in map(_number, cells) if n is not None]
        if not numbers:
            raise ToolError("no numbers in those cells")
        return numbers

    def _formula(
        self, start_position: str, end_position: str, position_list: list[Any], operator: str
    ) -> float:
        numbers = self._values(start_position, end_position, position_list)
        ops = {
            "SUM": sum,
            "AVERAGE": lambda x: sum(x) / len(x),
            "MAX": max,
            "MIN": min,
            "PRODUCT": lambda x: __import__("math").prod(x),
        }
        if operator.upper() not in ops:
            raise ToolError(f"operator is one of {OPS}")
        return round(ops[operator.upper()](numbers), 4)

    def _update_by_formula(
        self,
        start_position: str,
        end_position: str,
        position_list: list[Any],
        result_position: str,
        operator: str,
    ) -> list[list[str]]:
        value = self._formula(start_position, end_position, position_list, operator)
        row, col = cell_of(result_position)
        self._put(row, col, _money(value))
        return self._rows()

    def _sort(self, col_num: int, order: str) -> list[list[str]]:
        rows = self._rows()
        if not 1 <= col_num <= len(rows[0]) or order.lower() not in ("asc", "des", "desc"):
            raise ToolError(f"col_num is 1 to {len(rows[0])} and order asc or des")
        self.book[self.open] = sort_rows(rows, col_num, order.lower() != "asc")
        return self.book[self.open]

    def _insert_rows(self, values_list: list[Any], row_idx: int) -> list[list[str]]:
        rows = self._rows()
        if not 1 <= row_idx <= len(rows) + 1 or not all(isinstance(r, list) for r in values_list):
            raise ToolError(f"row_idx is 1 to {len(rows) + 1} and values_list a list of rows")
        self._room(sum(map(len, rows)) + sum(max(len(r), len(rows[0])) for r in values_list))
        rows[row_idx - 1 : row_idx - 1] = [[str(v) for v in r] for r in values_list]
        return rows

    def _insert_cols(self, values_list: list[Any], col_idx: int) -> list[list[str]]:
        rows = self._rows()
        if not 1 <= col_idx <= len(rows[0]) + 1 or not all(isinstance(c, list) for c in values_list):
            raise ToolError(f"col_idx is 1 to {len(rows[0]) + 1} and values_list a list of columns")
        self._room(len(rows) * (len(rows[0]) + len(values_list)))
        for offset, column in enumerate(values_list):
            for r, row in enumerate(rows):
                row.insert(col_idx - 1 + offset, str(column[r]) if r < len(column) else "")
        return rows

    def _delete(self, dimension: str, index_list: list[Any]) -> list[list[str]]:
        rows = self._rows()
        kind = dimension.lower().rstrip("s")
        if kind not in ("row", "col", "column") or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in index_list
        ):
            raise ToolError("dimension is row or col, and index_list 1-based integers")
        limit = len(rows) if kind == "row" else len(rows[0])
        if any(not 1 <= i <= limit for i in index_list):
            raise ToolError(f"indices run from 1 to {limit}")
        gone = set(index_list)
        if kind == "row":
            self.book[self.open] = [r for i, r in enumerate(rows, start=1) if i not in gone]
        else:
            self.book[self.open] = [[v for j, v in enumerate(r, start=1) if j not in gone] for r in rows]
        return self.book[self.open]

    def _filter(self, query: str) -> list[dict[str, str]]:
        """AgentBoard's filter takes a regular expression such as "^(Vegetables|Fruits)$". Words, alternation and
        anchors are read as one; anything else (a quantifier could backtrack for ever) as literal text."""
        pattern = re.compile(query if SAFE_PATTERN.fullmatch(query) else re.escape(query))
        return [
            {"cell": a1(r, c), "value": v}
            for r, row in enumerate(self._rows(), start=1)
            for c, v in enumerate(row, start=1)
            if pattern.search(v)
        ][:100]
