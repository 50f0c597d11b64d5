"""Demonstrations (AgentTraj): the environment's expert solver, or one of its imperfect demonstrators, plays,
each move written as a ReAct turn."""

from __future__ import annotations

from gymflow.agent.react import format_react
from gymflow.envs.base import Env, Task, task_rng, turn_limit
from gymflow.rollout.records import Episode, Message


def run_expert(env: Env, task: Task, max_turns: int | None = None, demonstrator: str = "expert") -> Episode:
    """Play `task` with the expert solver (or `demonstrator`, one of `env.demonstrators`, its random choices
    seeded by the task) for at most `max_turns` turns (default: the env's limit)."""
    horizon = turn_limit(env.spec, max_turns)
    rng = task_rng("demonstrator", demonstrator, task.env, task.task_id)
    messages = [Message("system", env.spec.system_prompt), Message("user", env.reset(task))]
    end_reason, reward = "turn_limit", 0.0
    for _ in range(horizon):
        thought, action = env.demonstrator_step(demonstrator, rng)
        messages.append(Message("assistant", format_react(thought, action), action=action))
        step = env.step(action)
        reward = step.reward
        messages.append(Message("user", step.observation, reward=step.reward))
        if step.done:
            end_reason = "done"
            break
    return Episode(
        task=task,
        messages=messages,
        reward=reward,
        success=env.spec.is_success(reward),
        turns=env.turns,
        horizon=horizon,
        end_reason=end_reason,
    )
