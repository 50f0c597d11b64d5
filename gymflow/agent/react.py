"""ReAct turns: `Thought: ...` then `Action: ...`, the format AgentGym's prompts ask for."""

from __future__ import annotations

import re

_ACTION = re.compile(r"Action\s*:", re.IGNORECASE)
_ACTION_LINE = re.compile(r"^Action\s*:", re.IGNORECASE | re.MULTILINE)  # a marker that starts a line


def format_react(thought: str, action: str) -> str:
    return f"Thought: {thought.strip()}\nAction: {action.strip()}"


def parse_action(reply: str, multiline: bool = False) -> str | None:
    """The action of a ReAct reply: the first line after the last `Action:`; None if there is none.

    Models sometimes write several `Action:` markers; the last one is the one they settled on.
    `multiline` (an environment whose actions carry code, `EnvSpec.multiline_actions`): everything after the
    first `Action:` that starts a line (else the first anywhere), since code after it may hold another
    (`action: str` in a signature).
    """
    if multiline:
        first = _ACTION_LINE.search(reply) or _ACTION.search(reply)
        return (reply[first.end() :].strip() or None) if first else None
    matches = list(_ACTION.finditer(reply))
    if not matches:
        return None
    rest = reply[matches[-1].end() :].strip()
    action = rest.splitlines()[0].strip().strip("`\"'").strip() if rest else ""
    return action or None
