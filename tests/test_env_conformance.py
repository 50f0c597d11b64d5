"""One conformance suite, run over every registered environment."""

import pytest

from gymflow.envs import ENVS, EpisodeOver, make_env
from gymflow.envs.instructions import build_splits

N_TASKS = 4
BAD_ACTIONS = ["", "   ", "dance wildly", "Action: ???", "x" * 500, "move", "craft", "go to", "\n\n"]


@pytest.fixture(scope="module", params=sorted(ENVS))
def env_name(request):
    return request.param


@pytest.fixture(scope="module")
def splits(env_name):
    return build_splits(ENVS[env_name], n_train=N_TASKS, n_eval=N_TASKS, seed=7)


def test_splits_are_disjoint_and_balanced(env_name, splits):
    train, eval_ = splits["train"], splits["eval"]
    assert len(train) == N_TASKS and len(eval_) == N_TASKS
    assert not {t.task_id for t in train} & {t.task_id for t in eval_}
    levels = ENVS[env_name].difficulties()
    if levels:
        assert all(t.difficulty in levels for t in train + eval_)
        spread = {t.difficulty for t in eval_}
        assert len(spread) == min(len(levels), N_TASKS), "eval split should cover the difficulties"


def test_instruction_present(env_name, splits):
    env = make_env(env_name)
    try:
        for task in splits["eval"]:
            assert task.instruction.strip()
            obs = env.reset(task)
            assert obs.strip()
            assert env.spec.system_prompt.strip()
    finally:
        env.close()


def test_same_seed_same_tasks(env_name):
    a = build_splits(ENVS[env_name], n_train=3, n_eval=3, seed=11)
    b = build_splits(ENVS[env_name], n_train=3, n_eval=3, seed=11)
    assert [t.to_row() for t in a["train"] + a["eval"]] == [t.to_row() for t in b["train"] + b["eval"]]


def test_same_task_same_first_observation(env_name, splits):
    task = splits["train"][0]
    env1, env2 = make_env(env_name), make_env(env_name)
    try:
        assert env1.reset(task) == env2.reset(task)
    finally:
        env1.close()
        env2.close()


def test_invalid_actions_never_crash(env_name, splits):
    env = make_env(env_name)
    try:
        env.reset(splits["eval"][0])
        for action in BAD_ACTIONS:
            if env.done:
                break
            step = env.step(action)
            assert isinstance(step.observation, str) and step.observation.strip()
            assert env.spec.reward_range[0] <= step.reward <= env.spec.reward_range[1]
    finally:
        env.close()


def test_step_after_end_is_an_error(env_name, splits):
    env = make_env(env_name)
    try:
        with pytest.raises(EpisodeOver):
            env.step("anything")  # before reset
        env.reset(splits["eval"][0])
        for _ in range(env.spec.max_turns * 4):
            _, action = env.expert_step()
            if env.step(action).done:
                break
        assert env.done
        with pytest.raises(EpisodeOver):
            env.step("anything")
    finally:
        env.close()


def test_expert_solves_tasks(env_name, splits):
    env = make_env(env_name)
    try:
        for task in splits["train"]:
            env.reset(task)
            step = None
            for _ in range(env.spec.max_turns):
                thought, action = env.expert_step()
                assert thought.strip() and action.strip()
                step = env.step(action)
                if step.done:
                    break
            assert step is not None and env.spec.is_success(step.reward), (task.task_id, step)
    finally:
        env.close()
