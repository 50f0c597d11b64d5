"""Maze in the LMRL-Gym style (AgentGym's MZ): reach the goal seeing only the walls around you.

Mazes are generated from the task seed (a depth-first "perfect" maze with a few walls knocked
out so that there are loops), stored in the task's `hidden` layout so a task never changes when
the generator does. Positions are `row,col` as in LMRL-Gym: moving down adds 1 to the row,
moving right adds 1 to the column. Reward is 1 on reaching the goal, 0 otherwise.

Two views of the same game (`hidden["view"]`, set by `instructions.views`): "coords" (LMRL-Gym's, the
default) shows the position, the goal and the walls, and leaves the arithmetic of where the goal lies to
the agent; "verbal" states what a policy needs in words: "Goal is down and left. Open: up, down. Last
move: up." Two demonstrators: "expert" (a shortest path) and "greedy", which moves toward the goal where
that way is open and at random otherwise, with no memory: it solves about half the tasks, as an imperfect
AgentTraj does.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from typing import Literal

from pydantic import Field, model_validator

from gymflow.envs.base import Env, EnvSpec, Hidden, Step, Task, echo, task_rng

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
SIZES = {"5x5": 5, "6x6": 6, "7x7": 7}
MAX_SIZE = 64  # a task from outside may be larger than the generator's, within reason

VIEWS = ("coords", "verbal")
SYSTEM_PROMPT = (
    "You are an expert maze solver. Reach the goal in as few moves as possible. Each turn you see your "
    "position, the goal and the walls next to you. Positions are row,col: moving down adds 1 to the row, "
    'moving right adds 1 to the column. Actions: "move up", "move down", "move left", "move right". '
    "Answer in the format:\nThought: <your thought>\nAction: <your action>"
)


def carve(size: int, seed: int) -> list[list[set[str]]]:
    """Open passages of a size x size maze: cell (r, c) -> set of directions with no wall."""
    rng = task_rng("maze", size, seed)
    open_dirs: list[list[set[str]]] = [[set() for _ in range(size)] for _ in range(size)]
    opposite = {"up": "down", "down": "up", "left": "right", "right": "left"}
    stack, seen = [(0, 0)], {(0, 0)}
    while stack:
        r, c = stack[-1]
        options = [
            (d, r + dr, c + dc)
            for d, (dr, dc) in MOVES.items()
            if 0 <= r + dr < size and 0 <= c + dc < size and (r + dr, c + dc) not in seen
        ]
        if not options:
            stack.pop()
            continue
        d, nr, nc = rng.choice(options)
        open_dirs[r][c].add(d)
        open_dirs[nr][nc].add(opposite[d])
        seen.add((nr, nc))
        stack.append((nr, nc))
    for _ in range(size):  # knock out a few walls: loops make the maze less of a corridor
        r, c = rng.randrange(size), rng.randrange(size)
        d = rng.choice(list(MOVES))
        nr, nc = r + MOVES[d][0], c + MOVES[d][1]
        if 0 <= nr < size and 0 <= nc < size:
            open_dirs[r][c].add(d)
            open_dirs[nr][nc].add(opposite[d])
    return open_dirs


def shortest_path(
    open_dirs: list[list[set[str]]], start: tuple[int, int], goal: tuple[int, int]
) -> list[str]:
    """Moves of a shortest path from start to goal (breadth-first search)."""
    prev: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for d in sorted(open_dirs[cell[0]][cell[1]]):
            nxt = (cell[0] + MOVES[d][0], cell[1] + MOVES[d][1])
            if nxt not in prev:
                prev[nxt] = (cell, d)
                queue.append(nxt)
    path: list[str] = []
    cell = goal
    while prev[cell] is not None:
        cell, d = prev[cell]  # type: ignore[misc]
        path.append(d)
    return path[::-1]


class MazeHidden(Hidden):
    """A maze as `Maze._reset` reads it: `open[r][c]` the initials of the sides of cell (r, c) with no wall."""

    size: int = Field(ge=2, le=MAX_SIZE)
    open: list[list[str]]
    start: list[int] = Field(min_length=2, max_length=2)
    goal: list[int] = Field(min_length=2, max_length=2)
    view: Literal["coords", "verbal"] = "coords"

    @model_validator(mode="after")
    def _inside(self) -> MazeHidden:
        """Every opening leads to a cell of the maze, and start and goal are two of its cells: otherwise a move
        would walk off the grid (an IndexError in the middle of an episode)."""
        n = self.size
        if len(self.open) != n or any(len(row) != n for row in self.open):
            raise ValueError(f"open must be {n} rows of {n} cells (size {n})")
        full = {d[0]: d for d in MOVES}
        for r, row in enumerate(self.open):
            for c, cell in enumerate(row):
                if not set(cell) <= set(full) or len(set(cell)) != len(cell):
                    raise ValueError(f"open[{r}][{c}] is {cell!r}: a cell is distinct letters of 'udlr'")
                for side in cell:
                    dr, dc = MOVES[full[side]]
                    if not (0 <= r + dr < n and 0 <= c + dc < n):
                        raise ValueError(f"open[{r}][{c}] opens {full[side]}, out of the maze")
        for name, (r, c) in (("start", self.start), ("goal", self.goal)):
            if not (0 <= r < n and 0 <= c < n):
                raise ValueError(f"{name} {r},{c} is outside the {n}x{n} maze")
        if self.start == self.goal:
            raise ValueError("start and goal are the same cell")
        return self


class Maze(Env):
    hidden_schema = MazeHidden
    spec = EnvSpec(
        name="maze",
        description="LMRL-Gym maze: reach the goal from local wall observations",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=15,
        expert="breadth-first shortest path",
    )

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(SIZES)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        rng = task_rng("maze-tasks", seed)
        while True:
            level = rng.choice(list(SIZES))
            size, maze_seed = SIZES[level], rng.randrange(2**31)
            open_dirs = carve(size, maze_seed)
            cells = [(r, c) for r in range(size) for c in range(size)]
            start, goal = rng.sample(cells, 2)
            path = shortest_path(open_dirs, start, goal)
            if not 2 <= len(path) <= cls.spec.max_turns - 3:
                continue
            yield Task(
                env="maze",
                task_id=f"maze-{level}-{maze_seed}-{start[0]}{start[1]}-{goal[0]}{goal[1]}",
                split=split,
                difficulty=level,
                seed=maze_seed,
                instruction=f"Reach the goal at {goal[0]},{goal[1]}.",
                hidden={
                    "size": size,
                    "open": [["".join(d[0] for d in sorted(cell)) for cell in row] for row in open_dirs],
                    "start": list(start),
                    "goal": list(goal),
                    "path": path,
                },
            )

    demonstrators = ("expert", "greedy")

    def _reset(self, task: Task) -> str:
        h = task.hidden
        full = {d[0]: d for d in MOVES}
        self.open = [[{full[ch] for ch in cell} for cell in row] for row in h["open"]]
        self.pos = tuple(h["start"])
        self.goal = tuple(h["goal"])
        self.view = h.get("view", "coords")
        self.last: str | None = None
        return f"{task.instruction} {self._where()}"

    def _where(self) -> str:
        if self.view == "verbal":
            toward = " and ".join(self._toward())
            last = self.last or "none"
            return f"Goal is {toward}. Open: {', '.join(self._open_ways())}. Last move: {last}."
        walls = [d for d in MOVES if d not in self.open[self.pos[0]][self.pos[1]]]
        return f"pos {self.pos[0]},{self.pos[1]} goal {self.goal[0]},{self.goal[1]} walls: {', '.join(walls) or 'none'}"

    def _toward(self) -> list[str]:
        """The directions in which the goal lies (one or two), vertical first."""
        dr, dc = self.goal[0] - self.pos[0], self.goal[1] - self.pos[1]
        return [w for w, n in (("down", dr), ("up", -dr), ("right", dc), ("left", -dc)) if n > 0]

    def _open_ways(self) -> list[str]:
        return [m for m in MOVES if m in self.open[self.pos[0]][self.pos[1]]]

    def _step(self, action: str) -> Step:
        words = action.lower().split()
        direction = words[-1] if words and (len(words) == 1 or words[0] in ("move", "go")) else None
        if direction not in MOVES or len(words) > 2:
            return Step(
                f'Invalid action "{echo(action)}". Use move up, move down, move left or move right.',
                0.0,
                False,
            )
        if direction not in self.open[self.pos[0]][self.pos[1]]:
            return Step(f"A wall blocks {direction}. {self._where()}", 0.0, False)
        self.pos = (self.pos[0] + MOVES[direction][0], self.pos[1] + MOVES[direction][1])
        self.last = direction
        if self.pos == self.goal:
            return Step(f"You reached the goal at {self.goal[0]},{self.goal[1]}.", 1.0, True)
        return Step(self._where(), 0.0, False)

    def available_actions(self) -> list[str]:
        return [f"move {d}" for d in MOVES]

    def expert_step(self) -> tuple[str, str]:
        """The first move of a shortest path, with a thought built only from what the agent sees (where
        the goal lies, which ways open). The tiny default, 3 epochs of maze SFT: 36% held-out success with
        these thoughts, 4% with thoughts that stated the hidden path length (notes of issue 3)."""
        return self._say(shortest_path(self.open, self.pos, self.goal)[0])

    def demonstrator_step(self, kind: str, rng: random.Random) -> tuple[str, str]:
        """ "greedy": toward the goal where open (a random one of two), else a random open way; no memory."""
        if kind != "greedy":
            return super().demonstrator_step(kind, rng)
        open_ways = self._open_ways()
        toward = [d for d in self._toward() if d in open_ways]
        return self._say(rng.choice(toward or open_ways))

    def _say(self, move: str) -> tuple[str, str]:
        """A demonstration's turn: the thought states what the agent sees, then the move."""
        thought = f"The goal is {' and '.join(self._toward())}. Open: {', '.join(self._open_ways())}. I move {move}."
        return thought, f"move {move}"
