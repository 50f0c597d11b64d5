"""Atomic Parquet writes and checked reads.

A file is written to a temporary name in the same folder and renamed into place, so a crash or a
Ctrl-C never leaves a half-written table where a reader (or DVC) would find it. A file can still be damaged
afterwards (truncated, a flipped byte, another tool's table under our name): every reader checks it whole
against its table's schema (`check_table`) and names it with the stage that rebuilds it, and a stage's resume
check counts a damaged file as missing (`is_intact`), so rerunning the stage writes it again.
"""

from __future__ import annotations

import csv
import glob
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gymflow.errors import UserError
from gymflow.store.schema import SCHEMA_VERSION, TABLES, VERSION_KEY, with_version

# Page checksums: without them a flipped byte often reads back as a silently different value (42% of the
# single-byte flips of three small tables, 68% of a turns file's); with them, all but 1 of 20,897 flips are caught
# or change nothing (`benchmarks/parquet_flips.py`). No min/max statistics: a flipped statistic reads back as
# unchanged data, but DuckDB would skip row groups by it.
WRITE_OPTIONS: dict[str, Any] = {"write_page_checksum": True, "write_statistics": False}


def _create_beside(path: Path, make: Callable[[Path], None]) -> Path:
    """A new hidden name beside `path`, made by `make` (which fails if the name exists). Temporaries an earlier
    write of `path` left (a `kill -9` skips every clean-up) are removed first: in an output folder, DVC would
    take them for part of the output."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            make(tmp)
            return tmp
        except FileExistsError:
            continue


def _new_file(path: Path) -> None:
    # 0o666 less the umask, as open() makes a file (tempfile.mkstemp would make it 0o600: private)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(path, _new_file)
    try:
        yield tmp
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
    tmp = _create_beside(path, os.mkdir)  # 0o777 less the umask, as any directory
    try:
        yield tmp
        share_modes(tmp)
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


def share_modes(folder: Path) -> None:
    """Give what is under `folder` at least the permissions `folder` got from mkdir (0o777 less the umask; files
    without the execute bits): some writers make their files private (safetensors writes model weights 0o600)."""
    mode = stat.S_IMODE(folder.stat().st_mode)
    for p in folder.rglob("*"):
        if not p.is_symlink():
            p.chmod(stat.S_IMODE(p.stat().st_mode) | (mode if p.is_dir() else mode & 0o666))


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(path: str | Path, rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> None:
    """A CSV of `rows` with the columns `fields` (keys not among them are left out), written whole or not at
    all: the curves `dvc plots` draws."""
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def table_path(folder: str | Path, prefix: str, table: str) -> Path:
    """Files are named `<prefix>.<table>.parquet`, which is how the DuckDB views find them."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; one of {sorted(TABLES)}")
    return Path(folder) / f"{prefix}.{table}.parquet"


def table_of(path: str | Path) -> str:
    """The table a file holds by its name, `<prefix>.<table>.parquet`."""
    parts = Path(path).name.split(".")
    if len(parts) < 3 or parts[-1] != "parquet" or parts[-2] not in TABLES:
        raise ValueError(f"{path} is not named <prefix>.<table>.parquet with a table of {sorted(TABLES)}")
    return parts[-2]


def write_table(path: str | Path, data: pa.Table) -> Path:
    """Write an Arrow table as one Parquet file, atomically, with `WRITE_OPTIONS`."""
    with atomic_path(path) as tmp:
        pq.write_table(data, tmp, **WRITE_OPTIONS)
    return Path(path)


def write_rows(
    path: str | Path, table: str, rows: Sequence[dict[str, Any]], metadata: dict[str, str] | None = None
) -> Path:
    """Write `rows` (dicts with exactly the schema's columns) as one Parquet file, atomically."""
    schema = with_version(TABLES[table])
    if metadata:
        schema = schema.with_metadata(
            {**schema.metadata, **{k.encode(): v.encode() for k, v in metadata.items()}}
        )
    return write_table(path, pa.Table.from_pylist(list(rows), schema=schema))


# ---- reading ------------------------------------------------------------------------------------------


def rebuild_hint(path: str | Path) -> str:
    """What to do about a damaged `path`: DVC itself names the stage whose output holds it (so `foreach`
    stages come out as `evaluate@sft`); a file no stage writes is only deleted."""
    try:
        from dvc.exceptions import OutputNotFoundError
        from dvc.repo import Repo

        where = Path(path).absolute()
        start = next(p for p in where.parents if p.is_dir())
        with Repo(str(start)) as repo:
            try:
                outs = repo.find_outs_by_path(str(where), strict=False)
            except OutputNotFoundError:
                return "no stage writes it: delete it"
            stages = " ".join(sorted({out.stage.addressing for out in outs}))
        return f"delete it and run `dvc repro {stages}` to rebuild it"
    except Exception:  # not in a DVC project, or dvc.yaml unreadable: the generic advice still holds
        return "delete it and run `dvc repro` to rebuild it"


def _why_unreadable(path: Path, error: Exception) -> str:
    if path.is_file() and path.stat().st_size == 0:
        return "empty"
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if "magic bytes" in first:
        return "truncated, or not Parquet"
    return first if len(first) <= 100 else first[:97] + "..."


def schema_problem(schema: pa.Schema, table: str) -> str | None:
    """How a file's schema differs from `table`'s (version, then column names and types); None if it does not."""
    version = (schema.metadata or {}).get(VERSION_KEY)
    if version != str(SCHEMA_VERSION).encode():
        if version is None:
            return "has no gymflow schema version (written by another tool?)"
        return f"has schema version {version.decode(errors='replace')}, this gymflow reads version {SCHEMA_VERSION}"
    want = {f.name: f.type for f in TABLES[table]}
    have = {f.name: f.type for f in schema}
    diffs = [f"no column {n}" for n in want if n not in have]
    diffs += [f"column {n} is {have[n]}, not {t}" for n, t in want.items() if n in have and have[n] != t]
    diffs += [f"unknown column {n}" for n in have if n not in want]
    if len(have) != len(schema.names):
        diffs.append("a column twice")
    if diffs:
        more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
        return f"does not hold the {table} table ({', '.join(diffs[:3])}{more})"
    return None


def _read(path: Path, table: str, keep: bool) -> tuple[pa.Table | None, str | None, dict[bytes, bytes]]:
    """Read `path` whole, page checksums verified, and check it against `table`: (the data if `keep`, None,
    the footer's key-value metadata) or (None, what is wrong with it, {})."""
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as f:
            problem = schema_problem(f.schema_arrow, table)
            if problem:
                return None, problem, {}
            metadata = f.schema_arrow.metadata or {}
            # full validation: a string that is not UTF-8 (a flip in a file without checksums) fails here, not
            # later in whoever reads the value
            if keep:
                data = f.read()
                data.validate(full=True)
                return data, None, metadata
            for i in range(f.num_row_groups):  # a row group at a time: memory stays bounded
                f.read_row_group(i).validate(full=True)
            return None, None, metadata
    except Exception as e:  # any failure to read is damage; pyarrow raises a dozen kinds of it
        return None, f"is unreadable ({_why_unreadable(path, e)})", {}


def damaged(path: str | Path, problem: str) -> UserError:
    shown = str(path) if str(path).isprintable() else ascii(str(path))  # a name with a newline stays one line
    return UserError(f"{shown} {problem}: {rebuild_hint(path)}")


def check_table(path: str | Path, table: str) -> None:
    """Raise a one-line UserError, naming `path` and how to rebuild it, unless it reads whole as `table`."""
    _, problem, _ = _read(Path(path), table, keep=False)
    if problem:
        raise damaged(path, problem)


def read_table(path: str | Path, table: str | None = None) -> pa.Table:
    """A table file (its table by default from its name) as Arrow, checked as `check_table` checks."""
    data, problem, _ = _read(Path(path), table or table_of(path), keep=True)
    if problem:
        raise damaged(path, problem)
    return data


def read_rows(path: str | Path, table: str | None = None) -> list[dict[str, Any]]:
    return read_table(path, table).to_pylist()


def unreadable(path: str | Path, error: Exception) -> UserError:
    """The one-line error for a file that does not read as Parquet at all."""
    return damaged(path, f"is unreadable ({_why_unreadable(Path(path), error)})")


def file_metadata(path: str | Path) -> dict[str, str]:
    """The key-value metadata of a Parquet file (its footer only)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as e:
        raise unreadable(path, e) from None
    return _decoded(meta)


def _decoded(meta: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in meta.items()}


def is_intact(path: str | Path, table: str, metadata: dict[str, str] | None = None) -> bool:
    """A resume check: whether `path` reads whole as `table` and its metadata holds `metadata`.

    A damaged file counts as missing (with a note on stderr), so the stage writes it again rather than crash.
    """
    path = Path(path)
    if not path.exists():
        return False
    _, problem, footer = _read(path, table, keep=False)
    if problem:
        print(f"{path} {problem}: writing it again", file=sys.stderr)
        return False
    return (metadata or {}).items() <= _decoded(footer).items()
