"""User-facing errors: the CLI and stages print them as one line and exit non-zero, no traceback."""


class UserError(Exception):
    """A mistake the user can fix (bad parameter, missing input); the message says how."""
