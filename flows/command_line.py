"""The flows' command lines. `--help` prints a flow's docstring and its options and runs nothing: a flow run
started by it would wait for a Prefect server (90 s, then a RuntimeError where none is reachable)."""

from __future__ import annotations

import argparse


def parse(module: str, doc: str | None, options: dict[str, str], argv: list[str] | None = None):
    """The command line of `python -m <module>`: each option `--name` a switch, a bare NAME an optional
    positional argument; `help` text for each."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name, text in options.items():
        if name.startswith("--"):
            parser.add_argument(name, action="store_true", help=text)
        else:
            parser.add_argument(name.lower(), metavar=name, nargs="?", help=text)
    return parser.parse_args(argv)
