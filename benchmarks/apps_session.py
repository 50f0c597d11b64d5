"""Why `apps` keeps one interpreter per episode: a cell in a persistent sandboxed session (`gymflow.sandbox.session`)
against the alternative that keeps no process, replaying every earlier cell in a fresh sandbox each turn (LOOP's
footnote 1: "the environment replays all code from the entire interaction history"), over one expert episode.

    python benchmarks/apps_session.py        # about 20 seconds
"""

from __future__ import annotations

import argparse
import itertools
import time

from rich.console import Console
from rich.table import Table

from gymflow.envs.apps.api import ApiError, World
from gymflow.envs.apps.env import LIMITS, Apps, code_cells
from gymflow.envs.apps.world import build_world
from gymflow.rollout.expert import run_expert
from gymflow.sandbox import run_python
from gymflow.sandbox.session import CallRefused, Session

EPISODES = 6


def expert_cells(n: int) -> list[tuple[int, list[str]]]:
    """(world seed, the code cells) of `n` expert episodes."""
    env = Apps()
    out = []
    for task in itertools.islice(Apps.generate("eval", 0), n):
        episode = run_expert(env, task)
        cells = ["\n".join(code_cells(m.action)) for m in episode.messages if m.role == "assistant"]
        out.append((task.hidden["world_seed"], cells))
    env.close()
    return out


def persistent(seed: int, cells: list[str]) -> float:
    world = World(build_world(seed))

    def call(app: str, api: str, args: list, kwargs: dict) -> object:
        try:
            return world.call(app, api, args, kwargs)
        except ApiError as e:
            raise CallRefused(str(e)) from None

    start = time.perf_counter()
    with Session(call, LIMITS) as session:
        for cell in cells:
            assert session.run(cell).error is None
    return time.perf_counter() - start


def replayed(cells: list[str]) -> float:
    """A fresh sandbox per turn running the history so far; `apis` calls are stubbed (no door back to a world
    in run_python), so this is a lower bound on that design's cost."""
    stub = "class _A:\n    def __getattr__(self, n):\n        return self\n    def __call__(self, *a, **k):\n"
    stub += "        return _D()\nclass _D(dict):\n    def __getitem__(self, k):\n        return _D()\napis = _A()\n"
    start = time.perf_counter()
    for turn in range(1, len(cells) + 1):
        run_python(stub + "\n".join(f"try:\n{_indent(c)}\nexcept Exception:\n    pass" for c in cells[:turn]))
    return time.perf_counter() - start


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


def main() -> None:
    """No options: --help describes the benchmark."""
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    episodes = expert_cells(EPISODES)
    cells = sum(len(c) for _, c in episodes)
    kept = sum(persistent(seed, c) for seed, c in episodes)
    fresh = sum(replayed(c) for _, c in episodes)
    table = Table(title=f"{EPISODES} expert episodes of apps, {cells} cells")
    table.add_column("interpreter")
    table.add_column("ms per cell", justify="right")
    table.add_row("one sandboxed session per episode (gymflow)", f"{1000 * kept / cells:.1f}")
    table.add_row("a fresh sandbox per turn, replaying the history", f"{1000 * fresh / cells:.1f}")
    Console().print(table)
    print(f"persistent session: {fresh / kept:.0f}x faster per cell")


if __name__ == "__main__":
    main()
