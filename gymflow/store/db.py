"""DuckDB over every table under `data/`, so a user asks SQL without knowing the file layout.

db = connect("data")                     # from code: a full DuckDB session, views read the files lazily
db.sql("select env, avg(reward) from episodes group by env").show()
db = read_only("data")                   # for SQL a user types (`gymflow sql`): reads and writes no file
"""

from __future__ import annotations

import contextlib
import math
import re
import resource
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
from rich.cells import cell_len

from gymflow import paths
from gymflow.errors import UserError
from gymflow.store.io import check_table, damaged, schema_problem, unreadable
from gymflow.store.schema import TABLES


def table_files(data_dir: str | Path, table: str) -> list[Path]:
    """Every `table` file under `data_dir` but those in hidden folders, where a second name of a table waits
    for a resumed run (`gymflow.rollout.play.shadow`) and would count each episode twice."""
    root = Path(data_dir)
    return sorted(
        p
        for p in root.rglob(f"*.{table}.parquet")
        if not any(part.startswith(".") for part in p.relative_to(root).parts[:-1])
    )


# Columns the views expose in a more useful type: success as 0/1, so `avg(success)` is a success rate.
VIEW_COLUMNS = {"episodes": "replace (success::integer as success)"}

# Applied in this order once the views exist; `lock_configuration` last, so no SET can undo the rest.
LOCKED = {
    "temp_directory": "''",  # no spill files (DuckDB's default is ./.tmp); settable only before the next line
    "enable_external_access": "false",  # no file or URL: read_*, glob, COPY, ATTACH of a file, EXPORT, INSTALL
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
    "allow_extension_repositories": "'forbidden'",
    "allow_persistent_secrets": "false",  # a persistent secret is a file under ~/.duckdb
    "python_enable_replacements": "false",  # no reading the caller's Python variables as tables
    "lock_configuration": "true",
}


def _create_views(db: duckdb.DuckDBPyConnection, data_dir: str | Path) -> None:
    """One view per table over its files, read by DuckDB's own Parquet reader, every file checked whole first;
    a table with no files yet is empty with the right columns."""
    for table, schema in TABLES.items():
        files = table_files(data_dir, table)
        for f in files:
            check_table(f, table)
        if files:
            listing = ", ".join("'" + f.as_posix().replace("'", "''") + "'" for f in files)
            source = f"read_parquet([{listing}], union_by_name = true)"
        else:
            source = f"_{table}_empty"
            db.register(source, pa.Table.from_pylist([], schema=schema))
        db.execute(f"create view {table} as select * {VIEW_COLUMNS.get(table, '')} from {source}")


def connect(data_dir: str | Path = paths.DATA) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per table (`tasks`, `episodes`, `turns`) over the Parquet files.

    A full DuckDB session, for gymflow's own queries and for Python users, who can touch any file anyway.
    """
    db = duckdb.connect()
    _create_views(db, data_dir)
    return db


def read_only(data_dir: str | Path = paths.DATA, memory_mb: int = 0) -> duckdb.DuckDBPyConnection:
    """The same views, in a DuckDB that then reads and writes no file itself and loads no extension, and whose
    operators hold at most `memory_mb` MB (0: DuckDB's default, 80% of the machine's); no query can change it.

    DuckDB cannot be given the tables' files (allowing a file for reading also lets `COPY ... TO` overwrite it),
    so each table is an Arrow dataset of its files that pyarrow scans for DuckDB as a query asks, verifying
    page checksums as it reads. Opening reads only each file's footer (is it Parquet, does it hold its table's
    columns): 0.1 s and no table in memory at 10 M turns, where checking and copying every file took 11-21 s and
    5 GiB (docs/results/store.md). A damaged page is found by the first query that reads it, which then fails
    with the file's name and how to rebuild it (`damaged_file`) rather than answer from damaged bytes.
    """
    db = duckdb.connect()
    db.execute("set enable_progress_bar = false")  # it would print into the results
    if memory_mb:
        db.execute(f"set memory_limit = '{int(memory_mb)}MB'")
    for table, schema in TABLES.items():
        fragments = [_fragment(f, table) for f in table_files(data_dir, table)]
        source = ds.FileSystemDataset(fragments, schema, _VERIFIED_PARQUET, _LOCAL)
        db.register(f"_{table}_files", source)
        db.execute(f"create view {table} as select * {VIEW_COLUMNS.get(table, '')} from _{table}_files")
    for name, value in LOCKED.items():
        db.execute(f"set {name} = {value}")
    return db


# Page checksums verified as pages are read. Not pre-buffered (pyarrow's default for datasets): coalescing each
# file's reads up front serves object stores; on a local disk it was no faster and took more memory
# (benchmarks/store_scale.py, mode `prebuffered`: peak RSS 1.6 against 1.3 GiB over its queries at 10 M turns).
_VERIFIED_PARQUET = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(
        page_checksum_verification=True, pre_buffer=False
    )
)
_LOCAL = pyarrow.fs.LocalFileSystem()


def _fragment(path: Path, table: str) -> ds.ParquetFileFragment:
    """`path` as a dataset fragment whose footer is read and checked now (Parquet, `table`'s columns); the scans
    reuse the parsed footer, which a first query would otherwise parse again."""
    fragment = _VERIFIED_PARQUET.make_fragment(str(path.absolute()), filesystem=_LOCAL)
    try:
        fragment.ensure_complete_metadata()
        schema = fragment.physical_schema
    except Exception as e:  # pyarrow raises a dozen kinds of it
        raise unreadable(path, e) from None
    if problem := schema_problem(schema, table):
        raise damaged(path, problem)
    return fragment


_STREAM_FAILED = re.compile(r"reading the stream registered as '_(\w+)_files' failed")


def damaged_file(error: Exception, data_dir: str | Path) -> UserError | None:
    """When `error` is a query of `read_only`'s failing to read one of a table's files, the one-line error that
    names the damaged file and the stage that rebuilds it (found by checking that table's files whole)."""
    found = _STREAM_FAILED.search(str(error))
    if not found or found[1] not in TABLES:
        return None
    for f in table_files(data_dir, found[1]):
        try:
            check_table(f, found[1])
        except UserError as damage:
            return damage
    return None


def text_rows(rel: duckdb.DuckDBPyRelation, limit: int) -> tuple[list[list[str | None]], int]:
    """The first `limit` rows (0: all) as DuckDB writes each value as text (NULL as None), and the row count.

    One run, streamed: the rows after the first `limit` are only counted. A run-time error can come mid-stream,
    where pyarrow raises it as an OSError with DuckDB's message.
    """
    rows: list[list[str | None]] = []
    total = 0
    for batch in rel.project("columns(*)::varchar").to_arrow_reader(8192):
        take = batch.num_rows if limit == 0 else min(batch.num_rows, max(limit - len(rows), 0))
        if take:
            columns = [c.to_pylist() for c in batch.slice(0, take).columns]
            rows.extend(map(list, zip(*columns, strict=True)))
        total += batch.num_rows
    return rows, total


T = TypeVar("T")


class QueryTimeout(Exception):
    """A query ran past its time bound and was interrupted."""


def interruptible(db: duckdb.DuckDBPyConnection, work: Callable[[], T], seconds: float = 0) -> T:
    """`work()` (queries on `db`) in a worker thread, so that Ctrl-C interrupts it, and so does its time bound of
    `seconds` (0: none), past which it raises QueryTimeout.

    DuckDB 2.0 stops a query on SIGINT itself only in some calls (a long count streamed to Arrow ran on for
    minutes), and then as a RuntimeError. Here the main thread waits, takes the KeyboardInterrupt or sees the
    time run out, and interrupts the connection until the work has stopped.
    """
    deadline = time.monotonic() + seconds if seconds else math.inf
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        try:
            while not future.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    _stop(db, future)
                    raise QueryTimeout(f"query stopped after {seconds:g} s")
                # wakes up, so a signal is seen whichever thread got it
                wait([future], timeout=min(0.1, left))
        except KeyboardInterrupt:
            _stop(db, future)
            raise
        return future.result()


def _stop(db: duckdb.DuckDBPyConnection, future: Future[Any]) -> None:
    while not future.done():  # the work may start another query after the first is interrupted
        db.interrupt()
        wait([future], timeout=0.1)


@contextlib.contextmanager
def memory_bound(mb: int) -> Iterator[None]:
    """Inside, this process's data segment (what RLIMIT_DATA bounds: its private writable memory) may grow by at
    most `mb` MB (0: no bound); an allocation past it fails, as DuckDB's "Out of Memory Error" or a MemoryError.
    DuckDB's memory_limit bounds its operators only: `repeat('x', 2000000000)` took 3.9 GB past a limit of 100 MB.
    Where /proc has no VmData (not Linux), only that limit holds."""
    size = _data_size() if mb else None
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    bound = min([size + (mb << 20)] + [x for x in (soft, hard) if x != resource.RLIM_INFINITY])
    resource.setrlimit(resource.RLIMIT_DATA, (bound, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _data_size() -> int | None:
    """This process's VmData in bytes; None where /proc does not say."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) << 10
    return None


def run_query(
    db: duckdb.DuckDBPyConnection, query: str, limit: int, seconds: float = 0, memory_mb: int = 0
) -> tuple[list[str], list[list[str | None]], int] | None:
    """Run `query` (Ctrl-C interrupts it) in at most `seconds` and `memory_mb` more MB (0: no bound; see
    `interruptible` and `memory_bound`): its column names, its first `limit` rows as text (0: all) and its row
    count; None for a statement that returns no rows."""

    def work() -> tuple[list[str], list[list[str | None]], int] | None:
        rel = db.sql(query)
        return None if rel is None else (rel.columns, *text_rows(rel, limit))

    with memory_bound(memory_mb):
        return interruptible(db, work, seconds)


def empty_tables(db: duckdb.DuckDBPyConnection, query: str) -> list[str]:
    """The tables `query` reads (after FROM or JOIN) that hold no row, having no file or only empty ones: why a
    query returned nothing, when it is not the query's own conditions."""
    named = [t for t in TABLES if re.search(rf"\b(from|join)\s+{t}\b", query, re.IGNORECASE)]
    return [t for t in named if not db.sql(f"select 1 from {t} limit 1").fetchall()]


ESCAPED = frozenset(["Cc", "Cf", "Zl", "Zp"])  # control and format characters, line and paragraph separators


def visible(text: str) -> str:
    """`text` as it is, but tabs as spaces and the characters a terminal would act on or hide escaped (`\\x1b`,
    `\\u202e`): controls, format characters (bidirectional overrides, zero widths) and line separators."""
    out = []
    for ch in text.expandtabs(8):
        if ch != "\n" and unicodedata.category(ch) in ESCAPED:
            code = ord(ch)
            ch = (
                f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            )
        out.append(ch)
    return "".join(out)


def box(columns: Sequence[str], rows: Sequence[Sequence[str | None]]) -> str:
    """A table drawn around the cells as they are: nothing wrapped, cut or read as markup; a multi-line cell
    spans several lines, and a wide cell widens its column (the terminal or `less -S` handles the width)."""
    table = [list(columns), *(["NULL" if v is None else v for v in row] for row in rows)]
    cells = [[visible(v).split("\n") for v in row] for row in table]
    widths = [max(cell_len(line) for row in cells for line in row[i]) for i in range(len(columns))]

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def lines(row: list[list[str]], bar: str) -> list[str]:
        height = max(len(c) for c in row)
        padded = [
            [f" {line}{' ' * (w - cell_len(line))} " for line in c + [""] * (height - len(c))]
            for c, w in zip(row, widths, strict=True)
        ]
        return [bar + bar.join(parts) + bar for parts in zip(*padded, strict=True)]

    multiline = any(len(c) > 1 for row in cells[1:] for c in row)
    out = [rule("┏", "┳", "┓", "━"), *lines(cells[0], "┃"), rule("┡", "╇", "┩", "━")]
    for i, row in enumerate(cells[1:]):
        if multiline and i:
            out.append(rule("├", "┼", "┤", "─"))  # rows apart, when a cell spans lines
        out += lines(row, "│")
    out.append(rule("└", "┴", "┘", "─"))
    return "\n".join(out)
