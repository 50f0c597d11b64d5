"""The rollout store at scale: ~10 million turns written through gymflow's own writer, then the README's queries.

The rows are the real ones under `--data` resampled: every rollout file there (`rollouts/<stage>/...`) gets a
file of the same name whose episodes are drawn, with replacement, from its own, until the whole holds `--turns`
turns. So the stages, policies, environments, turns per episode, text lengths and token-id counts follow the
real run's; every episode gets a new id and task id, every observation and reply a suffix naming the copy, and
every sampled reply's log-probabilities a factor of their own (so a column's values are not the same few copies,
which Parquet would store once). Written with `write_rows` and `table_path`, turns then episodes, as
`write_episodes` writes them.

Then, per layout (`--layout`): files and bytes on disk; the open cost and peak memory of `connect` (views, every
file checked), `read_only` (what `gymflow sql` opens: views over Arrow datasets, footers checked), `prebuffered`
(read_only with pyarrow's default scan, each file's column chunks read up front) and `copied` (what read_only was:
every file checked and copied into memory), and how much a whole `check_table` pass costs; each query's seconds
once opened (the best of two runs); and `gymflow sql` itself as a user runs it, against the same with pandas
imported and with pre-buffering (fresh processes: median wall seconds and peak RSS from /usr/bin/time).
Layouts: `current` (the files `write_rows` writes), `rowgroups` (the same rows and options but row groups of
`--row-group` rows) and `tuned` (that, turns sorted by episode and turn, min/max statistics).

Last, the share of rollout wall time spent writing rollouts: for each environment of `evaluate@sft`, the rollout
seconds from its stored speed (episodes / episodes_per_s in data/metrics/evaluate/sft.json) against a timed
`write_rows` of the same episodes and turns.

    python benchmarks/store_scale.py [--turns 10000000] [--layout current rowgroups tuned] [--out /tmp/store_scale]
    python benchmarks/store_scale.py --reuse --layout current    # again, over the store a --keep run left
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from gymflow import paths
from gymflow.store.io import WRITE_OPTIONS, read_rows, table_path, write_rows

# The README's queries (`gymflow sql`), then the library's own over the views (agenttraj.trajectory_metrics,
# evol's per-environment summary, sft.conversations counted) and one episode by id, as a viewer asks.
QUERIES = {
    "readme_success": "select policy, env, avg(success) from episodes where stage = 'evaluate' and sample = 0 "
    "group by all order by all",
    "readme_rl": "select iteration, env, avg(reward), avg(turns) from episodes where stage = 'rl' "
    "group by all order by all",
    "readme_join_limit": "select t.text from turns t join episodes e using (episode_id) where e.env = 'maze' "
    "and t.role = 'assistant' limit 5",
    "traj_metrics": "select e.env, count(*), avg(e.turns), avg(c.chars) from episodes e join "
    "(select episode_id, sum(length(text)) as chars from turns group by 1) c using (episode_id) group by e.env",
    "evol_summary": "select env, count(*), avg(success), count(distinct task_id) filter (where success = 1) "
    "from episodes group by env order by env",
    "sft_conversations": "select count(*), sum(length(t.text)) from turns t join episodes e using (episode_id) "
    "where e.stage = 'trajectories' and list_contains(['maze', 'babyai'], e.env)",
    "one_episode": "select turn, role, text from turns where episode_id = '{episode}' order by turn",
}

# connect: views over DuckDB's Parquet reader, every file checked first (the library's); read_only: views over
# Arrow datasets, footers checked (`gymflow sql`, `gymflow view`); prebuffered: read_only with pyarrow's default
# for datasets, each file's column chunks read up front; copied: what read_only did before, every file checked and
# every table copied into memory. prebuffered and copied are the alternatives read_only is measured against.
MODES = ("connect", "read_only", "prebuffered", "copied")
# current: as `write_rows` writes; rowgroups: the same with `--row-group` rows per row group; tuned: that, turns
# sorted by (episode_id, turn), and min/max statistics.
LAYOUTS = ["current", "rowgroups", "tuned"]

CHILD = """
import json, sys, time
from gymflow.store.db import LOCKED, connect, read_only, table_files
from gymflow.store.io import check_table
from gymflow.store.schema import TABLES

def copied(data):
    # read_only before it went lazy: every file checked whole, every table copied into a locked DuckDB
    db = connect(data)
    for table in TABLES:
        db.execute(f"create table _{table} as select * from {table}")
        db.execute(f"drop view {table}")
        db.execute(f"alter table _{table} rename to {table}")
    for name, value in LOCKED.items():
        db.execute(f"set {name} = {value}")
    return db

mode, data, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
start = time.perf_counter()
for table in TABLES:
    for f in table_files(data, table):
        check_table(f, table)
out["check_s"] = time.perf_counter() - start
start = time.perf_counter()
db = {"connect": connect, "read_only": read_only, "prebuffered": read_only, "copied": copied}[mode](data)
out["open_s"] = time.perf_counter() - start
for name, q in queries.items():
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        rows = db.execute(q).fetchall()
        best = min(best, time.perf_counter() - start)
    out[name] = best
print(json.dumps(out))
"""


def log(msg: str) -> None:
    print(msg, flush=True)


def real_files(data: Path) -> list[tuple[Path, str]]:
    """(folder, prefix) of every rollout file pair under `data/rollouts`."""
    out = []
    for ep in sorted((data / "rollouts").rglob("*.episodes.parquet")):
        prefix = ep.name.removesuffix(".episodes.parquet")
        if table_path(ep.parent, prefix, "turns").exists():
            out.append((ep.parent, prefix))
    return out


def generate(data: Path, root: Path, target_turns: int, seed: int) -> tuple[float, int, int, str]:
    """Write the resampled tables under `root`; returns (seconds in write_rows, episodes, turns, a sample id)."""
    pairs = real_files(data)
    loaded = []
    for folder, prefix in pairs:
        turns: dict[str, list[dict[str, Any]]] = {}
        for t in read_rows(table_path(folder, prefix, "turns")):
            turns.setdefault(t["episode_id"], []).append(t)
        loaded.append((folder, prefix, read_rows(table_path(folder, prefix, "episodes")), turns))
    real_turns = sum(len(ts) for *_, turns in loaded for ts in turns.values())
    scale = target_turns / real_turns
    log(f"real tables: {len(pairs)} file pairs, {real_turns:,} turns; scaling each file by {scale:.1f}")
    rng = random.Random(seed)
    write_s, n_episodes, n_turns, sample_id = 0.0, 0, 0, ""
    for folder, prefix, episodes, turns in loaded:
        out_folder = root / folder.relative_to(data)
        new_eps, new_turns = [], []
        for j in range(round(len(episodes) * scale)):
            e = rng.choice(episodes)
            # a new task: its id sorts anywhere, not beside the other copies of the same real episode
            task = f"{e['task_id']}-{rng.getrandbits(40):010x}"
            eid = e["episode_id"].replace(f"/{e['task_id']}/", f"/{task}/")
            group = e["group"].replace(e["task_id"], task)
            new_eps.append(e | {"episode_id": eid, "task_id": task, "group": group})
            scale_lp = np.float32(1 + rng.random() * 1e-3)
            for t in turns[e["episode_id"]]:
                text = t["text"] if t["role"] == "system" else f"{t['text']} [{j}]"
                row = t | {"episode_id": eid, "text": text}
                if t[
                    "logprobs"
                ]:  # a new sample's own values, not the copied episode's (Parquet would store them once)
                    row["logprobs"] = (np.asarray(t["logprobs"], np.float32) * scale_lp).tolist()
                new_turns.append(row)
        start = time.perf_counter()
        write_rows(table_path(out_folder, prefix, "turns"), "turns", new_turns)
        write_rows(table_path(out_folder, prefix, "episodes"), "episodes", new_eps)
        write_s += time.perf_counter() - start
        n_episodes += len(new_eps)
        n_turns += len(new_turns)
        if len(new_eps) > 100 and not sample_id:
            sample_id = new_eps[len(new_eps) // 2]["episode_id"]
    return write_s, n_episodes, n_turns, sample_id


def sample_episode(root: Path) -> str:
    """The episode `generate` picks for the lookup: the middle one of the first episodes file with over 100."""
    for f in sorted(root.rglob("*.episodes.parquet")):
        ids = pq.read_table(f, columns=["episode_id"])["episode_id"]
        if len(ids) > 100:
            return ids[len(ids) // 2].as_py()
    sys.exit(f"error: no episodes file of over 100 episodes under {root}")


def rewrite(src: Path, dst: Path, row_group: int, tuned: bool) -> float:
    """Rewrite every table under `src` to `dst` with row groups of `row_group` rows and else `write_rows`'s
    options (the `rowgroups` layout: the same rows in the same order); if `tuned`, also turns sorted by
    (episode_id, turn) and min/max statistics. Returns the seconds taken."""
    start = time.perf_counter()
    for f in sorted(src.rglob("*.parquet")):
        table = pq.read_table(f)
        if tuned and f.name.endswith(".turns.parquet"):
            table = table.sort_by([("episode_id", "ascending"), ("turn", "ascending")])
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        options = (
            WRITE_OPTIONS | {"row_group_size": row_group} | ({"write_statistics": True} if tuned else {})
        )
        pq.write_table(table, target, **options)
    return time.perf_counter() - start


def on_disk(root: Path) -> tuple[int, int, int]:
    files = sorted(root.rglob("*.parquet"))
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)
    return len(files), sum(f.stat().st_size for f in files), groups


def timed(command: list[str]) -> tuple[str, float, float]:
    """Run `command` under /usr/bin/time -v: (its stdout, wall seconds, peak RSS MiB). Not getrusage in the
    child: Linux keeps the peak of the forked copy of this (large) process across exec."""
    start = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode:
        sys.exit(f"error: {' '.join(command[:3])} failed:\n{out.stderr[-2000:]}")
    rss = next(line for line in out.stderr.splitlines() if "Maximum resident set size" in line)
    return out.stdout, wall, int(rss.split(":")[1]) / 1024


def measure(mode: str, root: Path, queries: dict[str, str]) -> dict[str, float]:
    code = PREBUFFER + CHILD if mode == "prebuffered" else CHILD
    stdout, _, rss = timed([sys.executable, "-c", code, mode, str(root), json.dumps(queries)])
    return json.loads(stdout.splitlines()[-1]) | {"peak_rss_mib": rss}


# read_only's files scanned as pyarrow scans a dataset by default, each file's column chunks read up front (pandas
# kept out, as `gymflow sql` keeps it).
PREBUFFER = """
from gymflow.cli import _without_pandas
with _without_pandas():
    import pyarrow.dataset as ds
    import gymflow.store.db
options = ds.ParquetFragmentScanOptions(page_checksum_verification=True, pre_buffer=True)
gymflow.store.db._VERIFIED_PARQUET = ds.ParquetFileFormat(default_fragment_scan_options=options)
"""

# `gymflow sql` as installed, and two alternatives: pandas imported first (as pyarrow.dataset would import it, were
# the console not keeping it out), and the files pre-buffered.
CONSOLES = {
    "gymflow sql": [str(Path(sys.executable).with_name("gymflow"))],
    "with pandas": [sys.executable, "-c", "import pandas; from gymflow.cli import main; main()"],
    "prebuffered": [sys.executable, "-c", PREBUFFER + "from gymflow.cli import main; main()"],
}


def cli(console: list[str], root: Path, query: str, runs: int) -> tuple[list[float], float]:
    """`console --data ROOT sql QUERY` as a user runs it, `runs` times: (sorted wall seconds, peak RSS MiB)."""
    walls, peak = [], 0.0
    for _ in range(runs):
        _, wall, rss = timed([*console, "--data", str(root), "sql", query])
        walls.append(wall)
        peak = max(peak, rss)
    return sorted(walls), peak


def write_share(data: Path) -> None:
    """Writing rollouts as a share of rollout wall time, for evaluate@sft's environments."""
    speeds = json.loads((data / "metrics/evaluate/sft.json").read_text())
    log("\nwriting rollouts as a share of rollout time (evaluate@sft: stored speed, timed write_rows)")
    log(f"{'env':16} {'episodes':>8} {'turns':>7} {'rollout_s':>9} {'write_s':>8} {'share':>7}")
    total_roll = total_write = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for env, m in sorted(speeds.items()):
            folder = data / "rollouts/evaluate/sft"
            if (
                "all" not in m
                or not m["all"].get("episodes_per_s")
                or not table_path(folder, env, "turns").exists()
            ):
                continue
            turns = read_rows(table_path(folder, env, "turns"))
            episodes = read_rows(table_path(folder, env, "episodes"))
            rollout_s = len(episodes) / m["all"]["episodes_per_s"]
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                write_rows(table_path(tmp, env, "turns"), "turns", turns)
                write_rows(table_path(tmp, env, "episodes"), "episodes", episodes)
                best = min(best, time.perf_counter() - start)
            total_roll += rollout_s
            total_write += best
            log(
                f"{env:16} {len(episodes):8} {len(turns):7} {rollout_s:9.1f} {best:8.3f} {best / rollout_s:7.2%}"
            )
    log(f"{'all':16} {'':8} {'':7} {total_roll:9.1f} {total_write:8.3f} {total_write / total_roll:7.2%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=paths.DATA, help="the real tables to resample")
    p.add_argument("--turns", type=int, default=10_000_000)
    p.add_argument("--layout", nargs="+", choices=LAYOUTS, default=LAYOUTS)
    p.add_argument("--row-group", type=int, default=128 * 1024, help="rows per row group (rowgroups, tuned)")
    p.add_argument("--out", type=Path, default=Path("/tmp/store_scale"), help="deleted at the end")
    p.add_argument("--keep", action="store_true", help="keep --out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--cli",
        nargs="*",
        choices=list(QUERIES),
        default=["readme_success", "readme_rl", "readme_join_limit", "one_episode"],
        help="queries also run through `gymflow sql` itself (each opens the whole store)",
    )
    p.add_argument("--cli-runs", type=int, default=7, help="fresh `gymflow sql` processes per query")
    p.add_argument("--reuse", action="store_true", help="measure the store a --keep run left in --out")
    args = p.parse_args()
    if not real_files(args.data):
        sys.exit(f"error: no rollout tables under {args.data}/rollouts: run `dvc repro` first")
    current = args.out / "current"
    if args.reuse and not any(current.rglob("*.parquet")):
        sys.exit(f"error: no store under {current} to reuse: run once with --keep")
    try:
        if args.reuse:
            episode = sample_episode(current)
        else:
            write_share(args.data)
            shutil.rmtree(args.out, ignore_errors=True)
            start = time.perf_counter()
            write_s, n_eps, n_turns, episode = generate(args.data, current, args.turns, args.seed)
            total = time.perf_counter() - start
            log(
                f"\nwrote {n_eps:,} episodes, {n_turns:,} turns: {write_s:.0f} s in write_rows "
                f"({n_turns / write_s:,.0f} turns/s), {total:.0f} s with making the rows"
            )
        queries = {k: q.format(episode=episode) for k, q in QUERIES.items()}
        roots = {}
        if "current" in args.layout:
            roots["current"] = current
        for name in ("rowgroups", "tuned"):
            if name in args.layout:
                roots[name] = args.out / name
                took = rewrite(current, roots[name], args.row_group, tuned=name == "tuned")
                log(f"{name} layout rewritten in {took:.0f} s")
        results = {}
        for name, root in roots.items():
            files, size, groups = on_disk(root)
            log(f"\n[{name}] {files} files, {size / 2**20:,.0f} MiB, {groups} row groups")
            res = {mode: measure(mode, root, queries) for mode in MODES}
            for mode, r in res.items():
                log(
                    f"  {mode:11}: open {r['open_s']:.2f} s (check_table alone {r['check_s']:.2f} s), "
                    f"peak RSS {r['peak_rss_mib']:,.0f} MiB"
                )
            log(
                f"  {'query seconds':18} "
                + " ".join(f"{m:>11}" for m in MODES)
                + "  x read_only: prebuffered copied"
            )
            for q in queries:
                times = " ".join(f"{res[m][q]:11.3f}" for m in MODES)
                ratios = " ".join(
                    f"{res[m][q] / res['read_only'][q]:11.2f}" for m in ("prebuffered", "copied")
                )
                log(f"  {q:18} {times}  {ratios}")
            log(
                f"  `gymflow sql QUERY` as a user runs it, a fresh process each (open, query, print), "
                f"{args.cli_runs} runs: median (min-max) wall seconds, peak RSS"
            )
            for q in args.cli:
                line = {}
                for console_name, console in CONSOLES.items():
                    walls, rss = cli(console, root, queries[q], args.cli_runs)
                    median = line[console_name] = walls[len(walls) // 2]
                    log(
                        f"    {q:18} {console_name:12} {median:5.2f} s ({walls[0]:.2f}-{walls[-1]:.2f}), "
                        f"{rss:,.0f} MiB"
                    )
                ratios = ", ".join(
                    f"{n} {line[n] / line['gymflow sql']:.2f}" for n in CONSOLES if n != "gymflow sql"
                )
                log(f"    {q:18} x gymflow sql: {ratios}")
            results[name] = (res, size)
        if "current" in results:
            cur, cur_size = results["current"]
            for name, (res, size) in results.items():
                if name == "current":
                    continue
                log(f"\n{name} / current: bytes {size / cur_size:.2f}")
                for mode in MODES:
                    ratios = " ".join(f"{q}={res[mode][q] / cur[mode][q]:.2f}" for q in queries)
                    log(f"  {mode}: open {res[mode]['open_s'] / cur[mode]['open_s']:.2f}; queries {ratios}")
    finally:
        if not (args.keep or args.reuse):
            shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
