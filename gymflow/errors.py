"""User-facing errors: the CLI and stages print them as one line and exit non-zero, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(Exception):
    """A mistake the user can fix (bad parameter, missing input); the message says how."""


def run_command(main: Callable[[], None]) -> None:
    """Run a module's command line (`main` parses its own arguments): a user's mistake is one line on stderr and
    exit 2, not a traceback."""
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
