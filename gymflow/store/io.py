"""Atomic Parquet writes and version-checked reads.

A file is written to a temporary name in the same folder and renamed into place, so a crash or a
Ctrl-C never leaves a half-written table where a reader (or DVC) would find it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gymflow.errors import UserError
from gymflow.store.schema import SCHEMA_VERSION, TABLES, VERSION_KEY, with_version


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; it replaces `path` only if the block succeeds, so a
    model directory is either the old one or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model directory is shared like any output
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def table_path(folder: str | Path, prefix: str, table: str) -> Path:
    """Files are named `<prefix>.<table>.parquet`, which is how the DuckDB views find them."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; one of {sorted(TABLES)}")
    return Path(folder) / f"{prefix}.{table}.parquet"


def write_rows(
    path: str | Path, table: str, rows: Sequence[dict[str, Any]], metadata: dict[str, str] | None = None
) -> Path:
    """Write `rows` (dicts with exactly the schema's columns) as one Parquet file, atomically."""
    schema = with_version(TABLES[table])
    if metadata:
        schema = schema.with_metadata(
            {**schema.metadata, **{k.encode(): v.encode() for k, v in metadata.items()}}
        )
    data = pa.Table.from_pylist(list(rows), schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(data, tmp)
    return Path(path)


def file_metadata(path: str | Path) -> dict[str, str]:
    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items()}


def check_version(path: str | Path) -> None:
    version = file_metadata(path).get(VERSION_KEY.decode())
    if version != str(SCHEMA_VERSION):
        raise UserError(
            f"{path} has rollout schema version {version}, this gymflow reads version {SCHEMA_VERSION}: "
            "rebuild it with `dvc repro` (or delete it)"
        )


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    check_version(path)
    return pq.read_table(path).to_pylist()
