"""DuckDB views over every table under `data/`, so a user asks SQL without knowing the file layout.

with connect("data") as db:
    db.sql("select env, avg(reward) from episodes group by env").show()
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from gymflow.store.io import check_version
from gymflow.store.schema import TABLES


def table_files(data_dir: str | Path, table: str) -> list[Path]:
    return sorted(Path(data_dir).rglob(f"*.{table}.parquet"))


# Columns the views expose in a more useful type: success as 0/1, so `avg(success)` is a success rate.
VIEW_COLUMNS = {"episodes": "replace (success::integer as success)"}


def connect(data_dir: str | Path = "data") -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per table (`tasks`, `episodes`, `turns`).

    A table with no files yet is an empty view with the right columns, so queries still run.
    """
    db = duckdb.connect()
    for table, schema in TABLES.items():
        files = table_files(data_dir, table)
        for f in files:
            check_version(f)
        raw = f"_{table}_files"
        if files:
            listing = ", ".join(f"'{f.as_posix()}'" for f in files)
            db.execute(f"create view {raw} as select * from read_parquet([{listing}], union_by_name = true)")
        else:
            db.register(raw, pa.Table.from_pylist([], schema=schema))
        db.execute(f"create view {table} as select * {VIEW_COLUMNS.get(table, '')} from {raw}")
    return db
