"""A training run's state between two runs of its stage: written whole or not at all, and a damaged one read
as none, so an interrupted run resumes and a broken checkpoint restarts the run instead of crashing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from gymflow.store.io import atomic_path


def save_state(path: Path, state: dict[str, Any]) -> None:
    """`state` (tensors, optimizer states, rows of numbers) at `path`, replacing what was there in one step."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_state(path: Path) -> dict[str, Any] | None:
    """The state saved at `path`, or None if there is none. One that cannot be read (truncated, foreign) is
    removed and counts as none: the run starts afresh."""
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=False)
    except Exception as e:  # whatever torch raises, it is not a state to resume
        print(f"{path} is unreadable ({type(e).__name__}); starting afresh")
        path.unlink()
        return None


class Stateful(Protocol):
    """What a run's checkpoint holds of a model, an optimizer, a schedule or a head."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


def save_run(path: Path, parts: dict[str, Stateful], bookkeeping: dict[str, Any]) -> None:
    """A trainer's checkpoint: each part's state under its name, beside the run's own bookkeeping (rows of the
    curve, steps, seconds), written whole or not at all."""
    save_state(path, bookkeeping | {name: part.state_dict() for name, part in parts.items()})


def load_parts(state: dict[str, Any], parts: dict[str, Stateful]) -> dict[str, Any]:
    """Each part set to its state in a checkpoint `load_state` read; the bookkeeping that is left."""
    rest = dict(state)
    for name, part in parts.items():
        part.load_state_dict(rest.pop(name))
    return rest
