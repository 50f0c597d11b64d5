"""What one sandboxed test run costs: `run_tests` of a small function on 10 cases against `exec` and the same
10 calls in this process, then with the sandbox's layers added one group at a time, to see where the time goes.

    python benchmarks/sandbox_overhead.py        # about 15 seconds
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from gymflow import sandbox
from gymflow.sandbox import LAYERS, Limits

SOURCE = '''
def fee(amount, member):
    """A ColBench-sized function: thresholds and a rule."""
    rate = 0.05 if amount < 100 else 0.03 if amount < 1000 else 0.02
    fee = round(amount * rate, 2)
    return max(fee - 1, 0) if member else fee
'''
CASES = [
    [amount, member] for amount in (0, 50, 99.99, 100, 500, 999, 1000, 5000, 12.5, 250) for member in (False,)
]
REPEATS = 40


def in_process() -> None:
    namespace: dict = {}
    exec(SOURCE, namespace)  # noqa: S102 -- the baseline the sandbox is measured against
    for args in CASES:
        sandbox.encode(namespace["fee"](*args))


def sandboxed(layers: tuple[str, ...]) -> None:
    out = sandbox._run_tests(SOURCE, "fee", CASES, Limits(), 0, layers)
    assert out.ok and all("value" in case for case in out.value), out


def median_ms(run, *args) -> float:
    run(*args)  # warm caches (the harness text, imports)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    """No options: --help describes the benchmark."""
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    base = median_ms(in_process)
    rows = [("exec + 10 calls in this process", base)]
    for label, layers in (
        ("sandbox: rlimits only", ("rlimits",)),
        ("sandbox: rlimits + audit hook", ("rlimits", "audit")),
        ("sandbox: + netns, chroot, uid (kernel)", ("nonewprivs", "netns", "chroot", "rlimits", "uid")),
        ("sandbox: every layer (run_tests)", LAYERS),
    ):
        rows.append((label, median_ms(sandboxed, layers)))
    table = Table(
        title=f"one run of 10 cases, median of {REPEATS}; layers here: {', '.join(sandbox.layers())}"
    )
    table.add_column("how")
    table.add_column("ms", justify="right")
    table.add_column("x in-process", justify="right")
    for label, ms in rows:
        table.add_row(label, f"{ms:.3f}", f"{ms / base:,.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
