"""BabyAI (AgentGym's BB): minigrid's BabyAI levels as text, with AgentGym's high-level actions.

A task is one BabyAI level (from `minigrid`) and the seed that lays it out; the category is the
level family (goto, pickup, open, unlock, putnext). The agent sees its 7x7 egocentric view as
one compact line: each visible object with an index telling same-kind objects apart (nearest is
1, as in AgentGym) and its offset ("red ball 1 (2 ahead, 1 left)"), what is straight ahead, and
what it carries. Indices are recomputed every turn, like AgentGym's action list.

Actions are AgentGym's: the primitives (`turn left`, `turn right`, `move forward`, `pick up`,
`drop`, `toggle`) and high-level ones on objects in view (`go to red ball 1`, `pick up red ball 1`,
`go through red open door 1`, `toggle and go through red closed door 1`) plus `drop next to
<obj> <n>`, which BabyAI's put-next missions need. A high-level action runs several minigrid steps
(a shortest path over the true grid) but is one turn. Reward is minigrid's: 1 - 0.9 * steps /
max_steps when the mission is completed, 0 otherwise, so any positive reward is a success.

The expert plans on the true state: it follows the mission's pending sub-goal (fetch the key, open
the box, pick up, go to, drop next to) and, when the object it needs is out of view, takes the
fewest high-level actions (turns, moves, go-tos) that bring it into view. Tasks the expert cannot
finish in `EXPERT_TURNS` turns are not generated; the expert's actions are kept in `hidden`.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium
import minigrid  # noqa: F401  (importing registers the BabyAI levels with gymnasium)
from minigrid.core.constants import DIR_TO_VEC
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    AndInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)
from pydantic import field_validator

from gymflow.envs.base import Env, EnvSpec, Hidden, Step, Task, echo, task_rng

# Level families (the task categories) and the minigrid levels drawn for each; all fit well
# inside 20 high-level actions.
LEVELS: dict[str, list[str]] = {
    "goto": ["BabyAI-GoToLocal-v0", "BabyAI-GoToObjDoor-v0"],
    "pickup": ["BabyAI-PickupLoc-v0", "BabyAI-PickupDist-v0"],
    "open": ["BabyAI-OpenDoor-v0", "BabyAI-OpenTwoDoors-v0"],
    "unlock": ["BabyAI-UnlockLocal-v0", "BabyAI-UnlockLocalDist-v0", "BabyAI-KeyInBox-v0"],
    "putnext": ["BabyAI-PutNextLocal-v0", "BabyAI-PutNextLocalS6N4-v0"],
}
EXPERT_TURNS = 15  # generated tasks are solved by the expert within this many turns (of 20)
EXPLORE_DEPTH = 4  # high-level actions the expert searches to bring a target into view

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, NOOP = range(7)  # minigrid's action ids
NAMED_TYPES = ("key", "ball", "box", "door")
Pose = tuple[int, int, int]  # x, y, direction (0 east, 1 south, 2 west, 3 north)
Tree = dict[Pose, tuple[Pose, int] | None]  # breadth-first search tree over poses

SYSTEM_PROMPT = (
    "You are an exploration master who finishes every goal you are given in a grid world. Each turn "
    "you see the objects in your 7x7 view, with their offset from you (e.g. red ball 1 (2 ahead, 1 left)), "
    "what is straight ahead and what you carry. Objects of the same kind are numbered from the nearest. "
    "Actions:\n- turn left / turn right / move forward\n- go to <obj> <n>: walk up to face an object in view\n"
    "- pick up <obj> <n>: walk to it and pick it up (you can carry one thing)\n- pick up / drop / toggle: "
    "act on the cell right in front of you (toggle opens doors and boxes)\n- drop next to <obj> <n>: put "
    "what you carry in a free cell next to an object\n- go through <door> <n>: walk through an open door\n"
    "- toggle and go through <door> <n>: open a closed or locked door and walk through; a locked door "
    "needs the key of its colour\n- check available actions\n"
    "Answer in the format:\nThought: <your thought>\nAction: <your action>"
)


@dataclass(frozen=True)
class Seen:
    """An object in the agent's view: `name` is its kind plus index ("red closed door 1")."""

    name: str
    kind: str
    obj: WorldObj
    pos: tuple[int, int]
    ahead: int
    right: int  # negative: to the left


def kind_of(obj: WorldObj) -> str:
    if obj.type == "door":
        state = "open" if obj.is_open else "locked" if obj.is_locked else "closed"
        return f"{obj.color} {state} door"
    return f"{obj.color} {obj.type}"


def offset_text(s: Seen) -> str:
    parts = [f"{s.ahead} ahead"] if s.ahead else []
    if s.right:
        parts.append(f"{abs(s.right)} {'right' if s.right > 0 else 'left'}")
    return ", ".join(parts)


def desc_text(desc: ObjDesc) -> str:
    """How the mission names a set of objects (without re-resolving it, which would mutate it)."""
    text = f"{desc.color} {desc.type or 'object'}" if desc.color else desc.type or "object"
    where = {"front": "in front of me", "behind": "behind me", "left": "on my left", "right": "on my right"}
    article = "a" if len(desc.obj_set) > 1 else "the"
    return f"{article} {text} {where[desc.loc]} at the start" if desc.loc else f"{article} {text}"


def front(pose: Pose) -> tuple[int, int]:
    dx, dy = DIR_TO_VEC[pose[2]]
    return pose[0] + int(dx), pose[1] + int(dy)


def path_in(tree: Tree, goal: Callable[[Pose], bool]) -> list[int] | None:
    """Primitive actions of the shortest path in `tree` to a pose satisfying `goal`."""
    for pose in tree:  # insertion order is breadth-first order: the first hit is the nearest
        if goal(pose):
            actions: list[int] = []
            while (link := tree[pose]) is not None:
                pose, action = link
                actions.append(action)
            return actions[::-1]
    return None


def end_pose(tree: Tree, goal: Callable[[Pose], bool]) -> Pose | None:
    return next((pose for pose in tree if goal(pose)), None)


def parse_ref(text: str) -> tuple[str, int] | None:
    """'the red ball 2' -> ('red ball', 2); the index defaults to 1 (the nearest)."""
    m = re.fullmatch(r"(?:the |a )?([a-z]+(?: [a-z]+)*?)(?: (\d+))?", text)
    return (m.group(1), int(m.group(2) or 1)) if m else None


class Game:
    """One BabyAI level in play: text view, action execution and the expert, on top of minigrid."""

    def __init__(self, level: str) -> None:
        self.level = level
        self.env: Any = gymnasium.make(level).unwrapped
        self.done = True
        self.reward = 0.0
        self._tree: Tree | None = None
        self._seen: tuple[list[Seen], str] | None = None

    def reset(self, seed: int) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its rejection sampling
            self.env.reset(seed=seed)
        self.mission: str = self.env.mission
        self.done, self.reward = False, 0.0
        self._changed()

    def _changed(self) -> None:
        self._tree, self._seen = None, None

    # ---- geometry ---------------------------------------------------------------------------------
    @property
    def pose(self) -> Pose:
        return int(self.env.agent_pos[0]), int(self.env.agent_pos[1]), int(self.env.agent_dir)

    def cell(self, pos: tuple[int, int]) -> WorldObj | None:
        x, y = pos
        grid = self.env.grid
        return grid.get(x, y) if 0 <= x < grid.width and 0 <= y < grid.height else None

    def passable(self, pos: tuple[int, int]) -> bool:
        x, y = pos
        if not (0 <= x < self.env.grid.width and 0 <= y < self.env.grid.height):
            return False
        cell = self.env.grid.get(x, y)
        return cell is None or cell.can_overlap()

    def tree(self, start: Pose | None = None) -> Tree:
        """Every pose reachable by turns and moves, breadth-first (the grid is left unchanged)."""
        if start is None and self._tree is not None:
            return self._tree
        origin = start or self.pose
        tree: Tree = {origin: None}
        queue = deque([origin])
        while queue:
            pose = queue.popleft()
            x, y, d = pose
            moves = [(LEFT, (x, y, (d - 1) % 4)), (RIGHT, (x, y, (d + 1) % 4))]
            if self.passable(front(pose)):
                moves.append((FORWARD, (*front(pose), d)))
            for action, nxt in moves:
                if nxt not in tree:
                    tree[nxt] = (pose, action)
                    queue.append(nxt)
        if start is None:
            self._tree = tree
        return tree

    def seen(self, pose: Pose | None = None) -> tuple[list[Seen], str]:
        """Objects in view from `pose` (default: the agent's), nearest first, and what is ahead."""
        if pose is None and self._seen is not None:
            return self._seen
        env = self.env
        saved = env.agent_pos, env.agent_dir
        x, y, d = pose or self.pose
        env.agent_pos, env.agent_dir = (x, y), d
        try:
            grid, vis = env.gen_obs_grid()
        finally:
            env.agent_pos, env.agent_dir = saved
        fx, fy = (int(v) for v in DIR_TO_VEC[d])
        size = env.agent_view_size
        found, ahead_cells = [], []
        for j in range(size):
            for i in range(size):
                ahead, right = size - 1 - j, i - size // 2
                obj = grid.get(i, j)
                if (ahead, right) == (0, 0) or not vis[i, j] or obj is None:
                    continue
                if right == 0:
                    ahead_cells.append((ahead, obj))
                if obj.type in NAMED_TYPES:
                    pos = (x + fx * ahead - fy * right, y + fy * ahead + fx * right)
                    found.append((ahead + abs(right), ahead, right, obj, pos))
        found.sort(key=lambda t: t[:3])
        counts: dict[str, int] = {}
        items = []
        for _, ahead, right, obj, pos in found:
            kind = kind_of(obj)
            counts[kind] = counts.get(kind, 0) + 1
            items.append(Seen(f"{kind} {counts[kind]}", kind, obj, pos, ahead, right))
        facing = "open floor"
        if ahead_cells:
            dist, obj = min(ahead_cells, key=lambda t: t[0])
            what = next((s.name for s in items if s.right == 0 and s.ahead == dist), obj.type)
            facing = f"{what}, {dist} step{'s' if dist > 1 else ''} away"
        result = (items, facing)
        if pose is None:
            self._seen = result
        return result

    def describe(self) -> str:
        items, facing = self.seen()
        see = "; ".join(f"{s.name} ({offset_text(s)})" for s in items)
        carrying = self.env.carrying
        carry = f"Carrying: {carrying.color} {carrying.type}." if carrying else "Carrying nothing."
        return f"{'You see: ' + see if see else 'You see no objects'}. Facing: {facing}. {carry}"

    # ---- acting -----------------------------------------------------------------------------------
    def run(self, actions: list[int]) -> None:
        """Play minigrid steps until they run out or the level ends (success, failure or time)."""
        for action in actions:
            _, reward, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                self.done, self.reward = True, float(reward)
                break
        self._changed()

    def end_text(self) -> str:
        if self.reward > 0:
            return f"Mission complete: {self.mission}."
        if self.env.step_count >= self.env.max_steps:
            return f"Time is up: the level's {self.env.max_steps}-step limit is reached."
        return "Mission failed."

    def act(self, text: str) -> str:
        """Apply one action (one turn); returns the observation. Invalid actions change nothing."""
        action = " ".join(text.lower().strip().strip(".!\"'`").split())
        action = re.sub(r"^pickup\b", "pick up", action)
        result = self._dispatch(action)
        if result is None:
            return (
                f'Unknown action "{echo(text.strip())}". Valid actions look like "turn left" or '
                f'"go to {self._example("go to")}"; "check available actions" lists them all.'
            )
        if self.done:
            return self.end_text()
        return result

    def _dispatch(self, action: str) -> str | None:
        """The observation for a recognised action; None when the action is not recognised."""
        primitives: dict[str, Callable[[], str]] = {
            "turn left": lambda: self._turn(LEFT),
            "turn right": lambda: self._turn(RIGHT),
            "move forward": self._forward,
            "pick up": self._pickup_front,
            "drop": self._drop_front,
            "toggle": self._toggle_front,
            "check available actions": lambda: "Available actions: " + ", ".join(self.actions()) + ".",
        }
        if action in primitives:
            return primitives[action]()
        verbs: list[tuple[str, Callable[[Seen], str]]] = [
            ("toggle and go through", self._toggle_through),
            ("go through", self._go_through),
            ("go to", self._go_to),
            ("pick up", self._pickup),
            ("drop next to", self._drop_next),
        ]
        for verb, handler in verbs:
            if action == verb:
                return f'Name an object in view after "{verb}", e.g. "{verb} {self._example(verb)}".'
            if action.startswith(verb + " "):
                target = self._resolve(action[len(verb) + 1 :])
                return target if isinstance(target, str) else handler(target)
        return None

    def _example(self, verb: str) -> str:
        items, _ = self.seen()
        doors = [s.name for s in items if s.obj.type == "door"]
        things = [s.name for s in items if s.obj.type != "door"]
        if "through" in verb:
            return doors[0] if doors else "red closed door 1"
        return (things or doors or ["red ball 1"])[0]

    def _resolve(self, ref_text: str) -> Seen | str:
        """The object in view that `ref_text` names, or a message saying why there is none."""
        ref = parse_ref(ref_text)
        items, _ = self.seen()
        if ref is not None:
            kind, index = ref
            match = [s for s in items if s.kind == kind]
            if not match and kind.endswith(" door"):  # "red door 1": any state
                match = [s for s in items if s.obj.type == "door" and s.kind.split()[0] == kind.split()[0]]
            if len(match) >= index >= 1:
                return match[index - 1]
        names = ", ".join(s.name for s in items) or "nothing"
        return f'No "{echo(ref_text)}" in view; you see: {names}.'

    def _after(self, message: str) -> str:
        return f"{message} {self.describe()}".strip()

    def _turn(self, action: int) -> str:
        self.run([action])
        return self._after("")

    def _forward(self) -> str:
        target = front(self.pose)
        if not self.passable(target):
            _, facing = self.seen()
            return f"You cannot move forward: {facing.split(',')[0]} blocks the way."
        self.run([FORWARD])
        return self._after("")

    def _pickup_front(self) -> str:
        obj = self.cell(front(self.pose))
        if self.env.carrying is not None:
            return f"You already carry the {kind_of(self.env.carrying)}; drop it first."
        if obj is None or not obj.can_pickup():
            return "There is nothing in front of you to pick up."
        self.run([PICKUP])
        return self._after(f"You picked up the {kind_of(obj)}.")

    def _drop_front(self) -> str:
        carrying = self.env.carrying
        if carrying is None:
            return "You are not carrying anything to drop."
        if self.cell(front(self.pose)) is not None:
            return "You cannot drop here: the cell in front of you is not free."
        self.run([DROP])
        return self._after(f"You dropped the {kind_of(carrying)}.")

    def _toggle_front(self) -> str:
        obj = self.cell(front(self.pose))
        if obj is None or obj.type not in ("door", "box"):
            return "There is nothing in front of you to toggle (only doors and boxes)."
        if obj.type == "door" and obj.is_locked and not self._has_key(obj):
            return f"The {obj.color} door is locked; you need to carry the {obj.color} key."
        self.run([TOGGLE])
        if obj.type == "box":
            inside = obj.contains
            message = (
                f"You opened the {obj.color} box: {'a ' + kind_of(inside) if inside else 'it was empty'}."
            )
        else:
            message = f"The {obj.color} door is now {'open' if obj.is_open else 'closed'}."
        return self._after(message)

    def _has_key(self, door: WorldObj) -> bool:
        carrying = self.env.carrying
        return carrying is not None and carrying.type == "key" and carrying.color == door.color

    def _go_to(self, target: Seen) -> str:
        path = path_in(self.tree(), lambda p: front(p) == target.pos)
        if path is None:
            return f"There is no free path to {target.name}."
        self.run(path or [NOOP])  # already facing it: a no-op step lets the mission check it
        return self._after("")

    def _pickup(self, target: Seen) -> str:
        if target.obj.type == "door":
            return "You cannot pick up a door."
        if self.env.carrying is not None:
            return f"You already carry the {kind_of(self.env.carrying)}; drop it first."
        path = path_in(self.tree(), lambda p: front(p) == target.pos)
        if path is None:
            return f"There is no free path to {target.name}."
        self.run([*path, PICKUP])
        return self._after(f"You picked up the {target.kind}.")

    def _drop_next(self, target: Seen) -> str:
        carrying = self.env.carrying
        if carrying is None:
            return "You are not carrying anything to drop."
        path = path_in(self.tree(), lambda p: self._drop_spot(p, target.pos))
        if path is None:
            return f"There is no free cell next to {target.name} that you can reach."
        self.run([*path, DROP])
        return self._after(f"You dropped the {kind_of(carrying)} next to {target.name}.")

    def _drop_spot(self, pose: Pose, pos: tuple[int, int]) -> bool:
        spot = front(pose)
        near = abs(spot[0] - pos[0]) + abs(spot[1] - pos[1]) == 1
        inside = 0 <= spot[0] < self.env.grid.width and 0 <= spot[1] < self.env.grid.height
        return near and inside and self.cell(spot) is None

    def _go_through(self, target: Seen) -> str:
        if target.obj.type != "door":
            return f"{target.name} is not a door."
        if not target.obj.is_open:
            return f"{target.name} is shut; use toggle and go through {target.name}."
        path = path_in(self.tree(), lambda p: p[:2] == target.pos)
        if path is None:
            return f"There is no free path to {target.name}."
        self.run(path)
        if not self.done and self.passable(front(self.pose)):
            self.run([FORWARD])
        return self._after("")

    def _toggle_through(self, target: Seen) -> str:
        door = target.obj
        if door.type != "door":
            return f"{target.name} is not a door."
        if door.is_open:
            return f"{target.name} is already open; use go through {target.name}."
        if door.is_locked and not self._has_key(door):
            return f"{target.name} is locked; you need to carry the {door.color} key."
        path = path_in(self.tree(), lambda p: front(p) == target.pos)
        if path is None:
            return f"There is no free path to {target.name}."
        self.run([*path, TOGGLE])
        for _ in range(2):  # into the doorway, then out of it
            if not self.done and self.passable(front(self.pose)):
                self.run([FORWARD])
        return self._after("")

    # ---- listing ----------------------------------------------------------------------------------
    def actions(self) -> list[str]:
        """Actions that would do something now, AgentGym style (objects named by their index)."""
        tree, (items, _) = self.tree(), self.seen()
        carrying = self.env.carrying
        ahead = self.cell(front(self.pose))
        out = ["turn left", "turn right"]
        if self.passable(front(self.pose)):
            out.append("move forward")
        if ahead is not None and ahead.can_pickup() and carrying is None:
            out.append("pick up")
        if carrying is not None and ahead is None:
            out.append("drop")
        if ahead is not None and (ahead.type == "box" or (ahead.type == "door" and self._can_toggle(ahead))):
            out.append("toggle")
        for s in items:
            facing_it = end_pose(tree, lambda p, s=s: front(p) == s.pos) is not None
            if facing_it:
                out.append(f"go to {s.name}")
            if facing_it and s.obj.can_pickup() and carrying is None:
                out.append(f"pick up {s.name}")
            if carrying is not None and end_pose(tree, lambda p, s=s: self._drop_spot(p, s.pos)):
                out.append(f"drop next to {s.name}")
            if s.obj.type == "door" and s.obj.is_open and end_pose(tree, lambda p, s=s: p[:2] == s.pos):
                out.append(f"go through {s.name}")
            if s.obj.type == "door" and not s.obj.is_open and facing_it and self._can_toggle(s.obj):
                out.append(f"toggle and go through {s.name}")
        return [*out, "check available actions"]

    def _can_toggle(self, door: WorldObj) -> bool:
        return not door.is_locked or self._has_key(door)

    # ---- expert -----------------------------------------------------------------------------------
    def pending(self) -> tuple[Any, bool]:
        """The mission clause still to do and whether an earlier clause is done (BabyAI sequences:
        `a, then b`, `a after you b`, `a and b`)."""
        instr, later = self.env.instrs, False
        while isinstance(instr, BeforeInstr | AfterInstr | AndInstr):
            first, second, first_done = (
                (instr.instr_b, instr.instr_a, instr.b_done)
                if isinstance(instr, AfterInstr)
                else (instr.instr_a, instr.instr_b, instr.a_done)
            )
            later = later or first_done == "success"
            instr = second if first_done == "success" else first
        return instr, later

    def expert(self) -> tuple[str, str]:
        instr, later = self.pending()
        done = "The first part is done. " if later else ""
        if isinstance(instr, GoToInstr):
            what = desc_text(instr.desc)
            targets = set(map(tuple, instr.desc.obj_poss))
            return self._approach(f"{done}I must go to {what}.", what, targets, "go to")
        if isinstance(instr, PickupInstr):
            what = desc_text(instr.desc)
            return self._fetch(f"{done}I must pick up {what}.", what, instr.desc.obj_set)
        if isinstance(instr, OpenInstr):
            return self._open(instr, done)
        if isinstance(instr, PutNextInstr):
            return self._put_next(instr, done)
        raise NotImplementedError(f"no expert for {type(instr).__name__}")

    def _positions(self, objs: list[WorldObj]) -> set[tuple[int, int]]:
        grid = self.env.grid
        ids = {id(o) for o in objs}
        return {(i, j) for i in range(grid.width) for j in range(grid.height) if id(grid.get(i, j)) in ids}

    def _reachable(self, targets: set[tuple[int, int]], tree: Tree | None = None) -> bool:
        return end_pose(tree or self.tree(), lambda p: front(p) in targets) is not None

    def _approach(self, why: str, what: str, targets: set[tuple[int, int]], verb: str) -> tuple[str, str]:
        """Use `verb` on the nearest target in view; else clear the way to it or bring it into view."""
        items, _ = self.seen()
        tree = self.tree()
        best: tuple[int, Seen] | None = None
        for s in items:
            if s.pos in targets:
                path = path_in(tree, lambda p, s=s: front(p) == s.pos)
                if path is not None and (best is None or len(path) < best[0]):
                    best = (len(path), s)
        if best is not None:
            name = best[1].name
            how = {"go to": "go to it", "pick up": "pick it up"}[verb]
            return f"{why} I see {name}, so I {how}.", f"{verb} {name}"
        return self._unblock(why, what, targets) or self._explore(why, what, targets)

    def _unblock(self, why: str, what: str, targets: set[tuple[int, int]]) -> tuple[str, str] | None:
        """When a target is in view but objects wall it off: pick up one whose removal opens the way."""
        items, _ = self.seen()
        if not any(s.pos in targets for s in items) or self._reachable(targets):
            return None
        if self.env.carrying is not None:
            return self._free_hands(why)
        tree = self.tree()
        for s in items:
            movable = s.obj.can_pickup() and not (s.obj.type == "box" and s.obj.contains)
            if not movable or not self._reachable({s.pos}, tree):
                continue
            x, y = s.pos
            self.env.grid.set(x, y, None)  # try the removal on the grid, then undo it
            opens = self._reachable(targets, self.tree(self.pose))
            self.env.grid.set(x, y, s.obj)
            if opens:
                return (
                    f"{why} {s.name} blocks the way to {what}, so I pick it up to move it.",
                    f"pick up {s.name}",
                )
        return None

    def _explore(self, why: str, what: str, targets: set[tuple[int, int]]) -> tuple[str, str]:
        """The first of the fewest high-level actions after which a target is in view."""
        targets = {t for t in targets if self.cell(t) is not None}  # a box opened by toggle is gone
        start = self.pose
        frontier: list[tuple[Pose, str | None]] = [(start, None)] if targets else []
        views = {start: self.seen()[0]}
        for _ in range(EXPLORE_DEPTH):
            nxt: list[tuple[Pose, str | None]] = []
            for pose, first in frontier:
                for label, end in self._moves_from(pose, views[pose]):
                    if end in views:
                        continue
                    views[end] = self.seen(end)[0]
                    if any(s.pos in targets for s in views[end]):
                        action = first or label
                        return f"{why} I do not see {what} now, so I {action} to look for it.", action
                    nxt.append((end, first or label))
            frontier = nxt
        return f"{why} I do not see {what} now, so I turn left to look around.", "turn left"

    def _moves_from(self, pose: Pose, items: list[Seen]) -> Iterator[tuple[str, Pose]]:
        """High-level moves that change only where the agent stands: turns, a step, go to."""
        x, y, d = pose
        yield "turn left", (x, y, (d - 1) % 4)
        yield "turn right", (x, y, (d + 1) % 4)
        if self.passable(front(pose)):
            yield "move forward", (*front(pose), d)
        tree = self.tree(pose)
        for s in items:
            end = end_pose(tree, lambda p, s=s: front(p) == s.pos)
            if end is not None:
                yield f"go to {s.name}", end

    def _free_hands(self, why: str) -> tuple[str, str]:
        """Drop what is carried where it cuts no object off, walking to such a spot first if need be."""
        carried = kind_of(self.env.carrying)
        grid = self.env.grid
        objects = {
            (i, j)
            for i in range(grid.width)
            for j in range(grid.height)
            if (c := grid.get(i, j)) is not None and c.type in NAMED_TYPES
        }
        before = {front(p) for p in self.tree()} & objects

        def harmless(pose: Pose) -> bool:
            spot = front(pose)
            if self.cell(spot) is not None or not self.passable(spot):
                return False
            grid.set(*spot, self.env.carrying)  # try the drop on the grid, then undo it
            after = {front(p) for p in self.tree(pose)}
            grid.set(*spot, None)
            return before <= after

        path = path_in(self.tree(), harmless)
        if path == [] or (path is None and self.cell(front(self.pose)) is None):
            return f"{why} I need free hands, so I drop the {kind_of(self.env.carrying)} here.", "drop"
        step = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward"}[path[0] if path else LEFT]
        return (
            f"{why} I need free hands, so I {step} to find a spot where the {carried} is not in the way.",
            step,
        )

    def _fetch(self, why: str, what: str, objs: list[WorldObj]) -> tuple[str, str]:
        carrying = self.env.carrying
        targets = self._positions(objs)
        if carrying is not None and not any(carrying is o for o in objs):
            return self._free_hands(why)
        return self._approach(why, what, targets, "pick up")

    def _open(self, instr: OpenInstr, done: str) -> tuple[str, str]:
        what = desc_text(instr.desc)
        why = f"{done}I must open {what}."
        doors = [d for d in instr.desc.obj_set if not (d.is_locked and not self._has_key(d))]
        if not doors:  # every matching door is locked: clear the way to it, then get the key
            locked = self._positions(instr.desc.obj_set)
            return self._unblock(why, what, locked) or self._get_key(why, instr.desc.obj_set)
        targets = self._positions(doors)
        if front(self.pose) in targets:
            return f"{why} I am facing it, so I toggle it.", "toggle"
        return self._approach(why, what, targets, "go to")

    def _get_key(self, why: str, doors: list[WorldObj]) -> tuple[str, str]:
        colors = {d.color for d in doors}
        key = f"the {' or '.join(sorted(colors))} key"
        why = f"{why[:-1]}, which is locked, so I need {key} first."
        grid = self.env.grid
        cells = [grid.get(i, j) for i in range(grid.width) for j in range(grid.height)]
        keys = [c for c in cells if c is not None and c.type == "key" and c.color in colors]
        if keys:
            return self._fetch(why, key, keys)
        boxes = [c for c in cells if c is not None and c.type == "box" and self._holds_key(c, colors)]
        why += " It is inside a box."
        carrying = self.env.carrying
        if carrying is not None and carrying.type == "box" and self._holds_key(carrying, colors):
            return self._free_hands(f"{why} I carry that box and must put it down to open it.")
        if not boxes:
            raise NotImplementedError("no key for the locked door")
        box_pos = self._positions(boxes)
        if front(self.pose) in box_pos:
            return f"{why} I am facing that box, so I toggle it to open it.", "toggle"
        return self._approach(why, "the box", box_pos, "go to")

    @staticmethod
    def _holds_key(box: WorldObj, colors: set[str]) -> bool:
        inside = box.contains
        return inside is not None and inside.type == "key" and inside.color in colors

    def _put_next(self, instr: PutNextInstr, done: str) -> tuple[str, str]:
        moving, fixed = instr.desc_move, instr.desc_fixed
        what_move, what_fixed = desc_text(moving), desc_text(fixed)
        why = f"{done}I must put {what_move} next to {what_fixed}."
        carrying = self.env.carrying
        if carrying is None or not any(carrying is o for o in moving.obj_set):
            return self._fetch(why, what_move, moving.obj_set)
        targets = set(map(tuple, fixed.obj_poss))
        items, _ = self.seen()
        tree = self.tree()
        for s in items:
            if s.pos in targets and path_in(tree, lambda p, s=s: self._drop_spot(p, s.pos)) is not None:
                return (
                    f"{why} I carry it and see {s.name}, so I drop it next to that.",
                    f"drop next to {s.name}",
                )
        return self._explore(why, what_fixed, targets)


def solve(game: Game, max_turns: int) -> list[str] | None:
    """The expert's actions for the level as reset, or None if it does not succeed in time."""
    actions: list[str] = []
    while not game.done and len(actions) < max_turns:
        try:
            _, action = game.expert()
        except NotImplementedError:
            return None
        actions.append(action)
        game.act(action)
    return actions if game.reward > 0 else None


class BabyAIHidden(Hidden):
    level: str

    @field_validator("level")
    @classmethod
    def _known(cls, level: str) -> str:
        """One of the levels tasks are drawn from: any other gymnasium id would be made (or fail) on reset."""
        if level not in {name for names in LEVELS.values() for name in names}:
            raise ValueError(
                f"{echo(level)!r} is not one of the BabyAI levels ({', '.join(LEVELS)} families)"
            )
        return level


class BabyAI(Env):
    hidden_schema = BabyAIHidden
    spec = EnvSpec(
        name="babyai",
        description="BabyAI levels (minigrid) as text with AgentGym's high-level actions",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1e-6,  # minigrid pays 1 - 0.9 * steps / max_steps > 0.09 on success, 0 otherwise
        max_turns=20,
        expert="sub-goal planner with breadth-first paths on the true grid",
    )

    def __init__(self) -> None:
        super().__init__()
        self.games: dict[str, Game] = {}
        self.game: Game | None = None

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("babyai-tasks", seed)
        games: dict[str, Game] = {}
        while True:
            family = rng.choice(list(LEVELS))
            level = rng.choice(LEVELS[family])
            level_seed = rng.randrange(2**31)
            game = games.setdefault(level, Game(level))
            game.reset(level_seed)
            mission = game.mission
            plan = solve(game, EXPERT_TURNS)
            if plan is None:
                continue
            yield Task(
                env="babyai",
                task_id=f"babyai-{level.removeprefix('BabyAI-').removesuffix('-v0')}-{level_seed}",
                split=split,
                difficulty=family,
                seed=level_seed,
                instruction=f"Your goal: {mission}",
                hidden={"level": level, "mission": mission, "plan": plan},
            )

    def _reset(self, task: Task) -> str:
        level = task.hidden["level"]
        if level not in self.games:
            self.games[level] = Game(level)
        self.game = self.games[level]
        self.game.reset(task.seed)
        return f"{task.instruction}\n{self.game.describe()}"

    def _step(self, action: str) -> Step:
        assert self.game is not None
        observation = self.game.act(action)
        info = {"mission": self.game.mission, "minigrid_steps": self.game.env.step_count}
        return Step(observation, self.game.reward, self.game.done, info)

    def available_actions(self) -> list[str] | None:
        return None if self.game is None or self.done else self.game.actions()

    def expert_step(self) -> tuple[str, str]:
        assert self.game is not None
        return self.game.expert()

    def close(self) -> None:
        for game in self.games.values():
            game.env.close()
        self.games.clear()
        self.game = None
