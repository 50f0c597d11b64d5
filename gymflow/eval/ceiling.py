"""Imitation ceilings: how well a lookup table over what a policy needs can do with the same demonstrations.

    python -m gymflow.eval.ceiling maze              # reads data/instructions and data/rollouts/trajectories

The table maps a state's features (maze: where the goal lies, the open ways, the last move) to the action the
demonstrations took most often there. Fitted on AgentTraj, it is what imitation of those demonstrations can
reach without learning to read; fitted on the shortest-path expert's moves over the same train tasks, it is
about the best any policy over those features does. Both next to SFT show the gap a model leaves.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from gymflow.agent.react import parse_action
from gymflow.envs import make_env
from gymflow.envs.base import Task
from gymflow.envs.maze import MOVES

Key = tuple[str, ...]
VERBAL = re.compile(r"Goal is ([a-z ]+)\. Open: ([a-z, ]*)\. Last move: ([a-z]+)\.")
COORDS = re.compile(r"pos (\d+),(\d+) goal (\d+),(\d+) walls: ([a-z, ]+)")


def maze_features(observation: str, last_move: str | None) -> Key | None:
    """(goal directions, open ways, last move) from either view's observation text; None for one that shows
    no state (the goal reached, an invalid action)."""
    if m := VERBAL.search(observation):
        return m.group(1), m.group(2), m.group(3)
    if m := COORDS.search(observation):
        r, c, gr, gc = map(int, m.group(1, 2, 3, 4))
        walls = set(m.group(5).split(", "))
        toward = [
            w for w, n in (("down", gr - r), ("up", r - gr), ("right", gc - c), ("left", c - gc)) if n > 0
        ]
        return " and ".join(toward), ", ".join(d for d in MOVES if d not in walls), last_move or "none"
    return None


def states_and_moves(messages: list[dict[str, str]]) -> Iterable[tuple[Key, str]]:
    """Each (features, action) of a demonstration's chat messages, the features read from the observation
    before the move."""
    observation, last = None, None
    for message in messages:
        if message["role"] == "user":
            observation = message["content"]
        elif message["role"] == "assistant" and observation is not None:
            action = parse_action(message["content"])
            if action is None:
                continue
            if (key := maze_features(observation, last)) is not None:
                yield key, action
            last = action.split()[-1]


class LookupPolicy:
    """The most frequent demonstrated action per key; an unseen key backs off to (goal, open), then to the
    first open way toward the goal."""

    def __init__(self, pairs: Iterable[tuple[Key, str]]) -> None:
        self.full: dict[Key, Counter[str]] = defaultdict(Counter)
        self.coarse: dict[Key, Counter[str]] = defaultdict(Counter)
        for key, action in pairs:
            self.full[key][action] += 1
            self.coarse[key[:2]][action] += 1

    def __call__(self, key: Key) -> str:
        for table, k in ((self.full, key), (self.coarse, key[:2])):
            if table.get(k):
                return min(table[k].items(), key=lambda kv: (-kv[1], kv[0]))[0]  # ties: alphabetical
        toward, open_ways = key[0].split(" and "), key[1].split(", ")
        return f"move {next((d for d in toward if d in open_ways), open_ways[0])}"


def play(policy: Callable[[Key], str], tasks: list[Task]) -> float:
    """Success of `policy` over `tasks`, played in process within the environment's turn limit."""
    env = make_env("maze")
    wins = 0
    for task in tasks:
        observation, last = env.reset(task), None
        for _ in range(env.spec.max_turns):
            action = policy(maze_features(observation, last))
            step = env.step(action)
            observation = step.observation
            last = action.split()[-1] if step.observation[:13] != "A wall blocks" else last
            if step.done:
                wins += step.reward >= env.spec.success_threshold
                break
    return wins / len(tasks)


def ceilings(data_dir: str | Path) -> dict[str, float | int]:
    """Held-out success of the lookup tables fitted on AgentTraj and on the expert over the same train tasks
    (the first as many as AgentTraj attempted), with how many episodes AgentTraj kept of how many."""
    from gymflow.envs.instructions import load_tasks
    from gymflow.rollout.expert import run_expert
    from gymflow.store.io import file_metadata, table_path
    from gymflow.train.sft import conversations

    trajectories = Path(data_dir) / "rollouts" / "trajectories"
    attempted = int(file_metadata(table_path(trajectories, "maze", "episodes"))["gymflow.attempted"])
    train, held_out = load_tasks(data_dir, "maze", "train")[:attempted], load_tasks(data_dir, "maze", "eval")
    agenttraj = [conv["messages"] for conv in conversations(trajectories, ["maze"])]
    env = make_env("maze")
    expert = [[{"role": m.role, "content": m.text} for m in run_expert(env, t).messages] for t in train]
    return {
        "agenttraj_episodes": len(agenttraj),
        "agenttraj_attempted": attempted,
        "table_from_agenttraj": play(
            LookupPolicy(p for m in agenttraj for p in states_and_moves(m)), held_out
        ),
        "table_from_expert": play(LookupPolicy(p for m in expert for p in states_and_moves(m)), held_out),
        "held_out_tasks": len(held_out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env", choices=["maze"], help="the environment (maze: the only one with a table yet)")
    parser.add_argument("--data", default="data", help="the data folder (default: data)")
    args = parser.parse_args()
    for name, value in ceilings(args.data).items():
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
