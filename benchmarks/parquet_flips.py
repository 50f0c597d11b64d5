"""Every single-byte flip of three small tables, written as gymflow writes them and as it did before (no page
checksums, min/max statistics): how many the readers' check catches, how many read back the same, and how many
read back silently changed, through pyarrow (the readers) and through DuckDB's own Parquet reader (the views).

    python benchmarks/parquet_flips.py        # about 3 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import tempfile
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.table import Table

from gymflow.envs.instructions import build_splits
from gymflow.envs.maze import Maze
from gymflow.store import io as store
from gymflow.store.io import is_intact, read_rows, write_rows


def turns(n: int) -> list[dict[str, Any]]:
    r = random.Random(0)
    return [
        {"episode_id": f"e{i // 8}", "turn": i % 8, "role": r.choice(["user", "assistant"])}
        | {"text": "word " * r.randint(1, 30), "action": "go", "reward": r.random()}
        | {"token_ids": [r.randint(0, 500) for _ in range(r.randint(0, 20))], "logprobs": [-r.random()] * 3}
        | {"critic_score": None, "advantage": r.random()}
        for i in range(n)
    ]


def episodes(n: int) -> list[dict[str, Any]]:
    r = random.Random(0)
    return [
        {"episode_id": f"e{i}", "run": "main", "stage": "evaluate", "iteration": 0, "policy": "sft"}
        | {"policy_hash": "abc", "config_hash": "d", "env": "maze", "task_id": f"t{i}", "split": "eval"}
        | {"difficulty": "5x5", "group": f"t{i}@0", "sample": 0, "seed": i, "reward": r.random()}
        | {"success": r.random() > 0.5, "turns": r.randint(1, 9), "horizon": 15, "end_reason": "done"}
        | {"tokens": None}
        for i in range(n)
    ]


def sweep(path: Path, table: str, rows: list[dict[str, Any]]) -> dict[str, int]:
    write_rows(path, table, rows)
    good, want = path.read_bytes(), read_rows(path)
    want_duck = duckdb.sql(f"select * from read_parquet('{path}')").fetchall()
    out = dict.fromkeys(["bytes", "caught", "same", "changed", "duckdb error", "duckdb changed"], 0)
    out["bytes"] = len(good)
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x10
        path.write_bytes(bytes(data))
        with contextlib.redirect_stderr(io.StringIO()):
            intact = is_intact(path, table)
        if not intact:
            out["caught"] += 1
            continue
        out["same" if read_rows(path) == want else "changed"] += 1
        try:
            out["duckdb changed"] += (
                duckdb.sql(f"select * from read_parquet('{path}')").fetchall() != want_duck
            )
        except duckdb.Error:
            out["duckdb error"] += 1
    return out


def main() -> None:
    """No options: --help describes the benchmark."""
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    splits = build_splits(Maze, 4, 2, seed=0)
    tables = {"tasks": [t.to_row() for s in splits.values() for t in s], "episodes": episodes(50)}
    tables["turns"] = turns(200)
    now = dict(store.WRITE_OPTIONS)
    result = Table("written", "table", "bytes", "caught", "same", "changed", "duckdb error", "duckdb changed")
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in [("before", {}), ("now", now)]:
            store.WRITE_OPTIONS = options
            for table, rows in tables.items():
                counts = sweep(Path(tmp) / f"x.{table}.parquet", table, rows)
                result.add_row(name, table, *map(str, counts.values()))
    store.WRITE_OPTIONS = now
    Console().print(result)


if __name__ == "__main__":
    main()
