"""ReAct turns: `Thought: ...` then `Action: ...`, the format AgentGym's prompts ask for."""

from __future__ import annotations

import re

_ACTION = re.compile(r"Action\s*:", re.IGNORECASE)


def format_react(thought: str, action: str) -> str:
    return f"Thought: {thought.strip()}\nAction: {action.strip()}"


def parse_action(reply: str) -> str | None:
    """The action of a ReAct reply: the first line after the last `Action:`; None if there is none.

    Models sometimes write several `Action:` markers; the last one is the one they settled on.
    """
    matches = list(_ACTION.finditer(reply))
    if not matches:
        return None
    rest = reply[matches[-1].end() :].strip()
    action = rest.splitlines()[0].strip().strip("`\"'").strip() if rest else ""
    return action or None
