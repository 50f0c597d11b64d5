"""What the read-only `gymflow sql` console costs: copying the tables into memory before locking DuckDB.

`gymflow.store.db.read_only` loads every table (it cannot leave them as views over the files: allowing a file
for reading also allows writing it), where `connect` only creates views. Per way of opening, in a fresh
process: seconds to open plus one query over every turn, and the peak resident memory. `--copies K` queries K
copies of the data folder's tables, for a run K times larger. Run after `dvc repro`:

    python benchmarks/sql_console.py [--data data] [--copies 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUERY = "select (select count(*) from episodes), count(*), sum(length(text)) from turns"

CHILD = """
import json, resource, sys, time
from gymflow.store.db import connect, read_only
start = time.perf_counter()
db = {"connect": connect, "read_only": read_only}[sys.argv[1]](sys.argv[2])
opened = time.perf_counter() - start
rows = db.execute(sys.argv[3]).fetchall()
total = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
print(json.dumps({"open_s": opened, "open_and_query_s": total, "peak_mib": peak, "rows": rows}))
"""


def measure(how: str, data: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, how, str(data), QUERY], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("data"))
    p.add_argument("--copies", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per way; the fastest is reported")
    args = p.parse_args()
    files = sorted(args.data.rglob("*.parquet"))
    if not files:
        sys.exit(f"error: no Parquet files under {args.data}: run `dvc repro` first")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.copies):  # each copy in its own folder, so the table names stay as they are
            for f in files:
                target = Path(tmp) / str(k) / f.relative_to(args.data)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*.parquet")) / 2**20
        print(f"{args.copies} x {args.data}: {size:.1f} MiB of Parquet")
        baseline = None
        for how in ("connect", "read_only"):
            runs = [measure(how, Path(tmp)) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["open_and_query_s"])
            baseline = baseline or best
            assert best["rows"] == baseline["rows"], (best["rows"], baseline["rows"])
            print(
                f"{how:9s}  open {best['open_s']:.2f} s  open+query {best['open_and_query_s']:.2f} s  "
                f"peak {max(r['peak_mib'] for r in runs):.0f} MiB  ({best['rows'][0][1]} turns)"
            )


if __name__ == "__main__":
    main()
