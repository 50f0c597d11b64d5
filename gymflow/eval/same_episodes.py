"""Did two runs play the same episodes? Compares two rollout folders table by table: each episode's outcome
(reward, turns, end reason), each message's text and token ids, and how far apart its log-probabilities are,
matched by task and sample (episode ids differ between runs). Where an episode was played (in process, on
environment servers, on Ray workers, through vLLM) must not change it.

    python -m gymflow.eval.same_episodes data/rollouts/evaluate/sft /other/checkout/data/rollouts/evaluate/sft
Exits 1 when a table differs beyond `--tol` (log-probabilities) or is missing on one side.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
from rich.console import Console
from rich.table import Table

EPISODES = "select task_id, sample, reward, turns, end_reason from read_parquet($p) order by task_id, sample"
TURNS = """select e.task_id, e.sample, t.turn, t.role, t.text, t.token_ids, t.logprobs
           from read_parquet($t) t join read_parquet($p) e using (episode_id)
           order by e.task_id, e.sample, t.turn"""


def compare(a: Path, b: Path, tol: float) -> tuple[Table, bool]:
    """One row per episodes table of `a` (and of `b`); whether all are the same."""
    names = sorted({p.name for d in (a, b) for p in d.glob("*.episodes.parquet")})
    table = Table("table", "episodes", "outcomes equal", "texts and ids equal", "max |d logprob|")
    db, same = duckdb.connect(), True
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.exists() and pb.exists()):
            table.add_row(name, "-", f"only in {a if pa.exists() else b}", "", "")
            same = False
            continue
        turns = [str(p).replace(".episodes.", ".turns.") for p in (pa, pb)]
        ea, eb = (db.execute(EPISODES, {"p": str(p)}).fetchall() for p in (pa, pb))
        ta, tb = (
            db.execute(TURNS, {"t": t, "p": str(p)}).fetchall() for t, p in zip(turns, (pa, pb), strict=True)
        )
        texts = [r[:6] for r in ta] == [r[:6] for r in tb]
        gap = max(
            (
                abs(x - y)
                for ra, rb in zip(ta, tb, strict=False)
                for x, y in zip(ra[6] or [], rb[6] or [], strict=False)
            ),
            default=0.0,
        )
        ok = ea == eb and texts and gap <= tol
        same &= ok
        table.add_row(
            name.removesuffix(".episodes.parquet"), str(len(ea)), str(ea == eb), str(texts), f"{gap:.1e}"
        )
    return table, same and bool(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--tol", type=float, default=1e-4, help="largest log-probability difference allowed")
    args = parser.parse_args()
    for folder in (args.a, args.b):
        if not folder.is_dir():
            print(
                f"error: {folder} is not a folder of rollout tables (e.g. data/rollouts/evaluate/sft)",
                file=sys.stderr,
            )
            sys.exit(2)
    table, same = compare(args.a, args.b, args.tol)
    Console().print(table)
    print("same episodes" if same else "the runs differ")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
