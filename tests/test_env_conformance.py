"""One conformance suite, run over every registered environment."""

import unicodedata
from collections.abc import Callable

import pytest

from gymflow.envs import ENVS, EpisodeOver, make_env
from gymflow.envs.apps.env import OBSERVATION_CHARS
from gymflow.envs.base import MAX_ACTION_CHARS, BadTask, task_of_row
from gymflow.envs.instructions import build_splits

N_TASKS = 4
BAD_ACTIONS = ["", "   ", "dance wildly", "Action: ???", "x" * 500, "move", "craft", "go to", "\n\n"]


@pytest.fixture(
    scope="module",  # ScienceWorld's games run in a JVM: slow
    # their games start a process: ScienceWorld's a JVM, household's Inform 7 (on a cold game cache)
    params=[
        pytest.param(n, marks=pytest.mark.slow) if n in ("sciworld", "household") else n for n in sorted(ENVS)
    ],
)
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


def test_generated_tasks_fit_the_schema_an_env_server_checks(env_name, splits):
    """What `gymflow serve-env` checks a row from outside against accepts every task the generator makes,
    as its row, and refuses another environment's."""
    cls = ENVS[env_name]
    for task in splits["train"] + splits["eval"]:
        assert task_of_row(task.to_row()) == task
        cls.check_task(task)
    other = next(e for e in sorted(ENVS) if e != env_name)
    with pytest.raises(BadTask, match=f"not '{env_name}'"):
        cls.check_task(build_splits(ENVS[other], 0, 1, seed=0)["eval"][0])


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


# ---- hostile actions: every environment answers any string, briefly, and plays on ------------------------
# a plain emoji, a family joined by zero-width joiners, a flag with a variation selector
EMOJI = "\U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466\U0001f3f3\ufe0f\u200d\U0001f308"
RTL = "\u202eمرحبا بالعالم\u202c שלום "  # Arabic inside a right-to-left override, then Hebrew
HOSTILE: dict[str, Callable[[str], str]] = {  # name -> action, built from the expert's valid action now
    "100kb": lambda valid: "x" * 100_000,
    "1mb": lambda valid: "y" * 1_000_000,
    "at_the_limit": lambda valid: "z" * MAX_ACTION_CHARS,  # the longest action the game itself sees
    "lone_surrogate": lambda valid: "\ud800",
    "valid_then_surrogate": lambda valid: valid + "\udfff",
    "nul": lambda valid: "\x00" * 8,
    "valid_nul_for_space": lambda valid: valid.replace(" ", "\x00"),
    "control_chars": lambda valid: "".join(map(chr, range(32))) + "\x7f\x85\x9b",
    "ansi": lambda valid: "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J\x1b[H" + valid,
    "newlines": lambda valid: "\n".join([valid] * 3),
    "newlines_100kb": lambda valid: "\n".join([valid] * 5_000),
    "empty": lambda valid: "",
    "whitespace": lambda valid: " \t\n\r\x0b\x0c\u00a0\u2003\u2028\u3000 ",
    "emoji": lambda valid: EMOJI * 20,
    "emoji_1mb": lambda valid: EMOJI * 80_000,
    "rtl": lambda valid: RTL * 10,
    "rtl_100kb": lambda valid: RTL * 5_000,
    "valid_plus_garbage": lambda valid: f"{valid}; rm -rf / && echo {'garbage ' * 25}",
    "valid_trailing_junk": lambda valid: valid + " \x00\x1b[0m!!",
    "valid_then_100kb_of_spaces": lambda valid: valid + " " * 100_000 + "junk",
    "verb_long_object": lambda valid: valid.split()[0] + " " + "a" * 250,
}
SLACK = 200  # how much longer than the environment's normal observations an answer may be


@pytest.fixture(scope="module")
def hostile_env(env_name, splits):
    """One env per environment for the whole battery (a JVM or a TextWorld game costs ~1 s to start), and
    the longest observation one expert episode of its task shows: the yardstick of a normal answer."""
    env, task = make_env(env_name), splits["eval"][0]
    normal = [env.reset(task)]
    while not env.done:
        normal.append(env.step(env.expert_step()[1]).observation)
    env.reset(task)
    # apps: a cell may print up to the environment's cut, whatever the expert's cells happened to print
    bound = OBSERVATION_CHARS + 60 if env_name == "apps" else 0
    yield env, task, max(*map(len, normal), bound)
    env.close()


def check_answer(env, step, turns_before: int, longest: int) -> None:
    """What any step must give: a short printable observation, a reward in range, consistent bookkeeping."""
    obs = step.observation
    assert isinstance(obs, str) and obs.strip()
    assert len(obs) <= longest + SLACK, (len(obs), obs[:200])
    obs.encode("utf-8")  # no lone surrogate made it through
    assert not {ch for ch in obs if unicodedata.category(ch) == "Cc"} - {"\n"}, repr(obs[:200])
    assert env.spec.reward_range[0] <= step.reward <= env.spec.reward_range[1]
    assert env.turns == turns_before + 1 and env.done == step.done and env.reward == step.reward


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_action_is_answered_briefly_and_play_goes_on(hostile_env, case):
    env, task, longest = hostile_env
    if env.done:
        env.reset(task)
    _, valid = env.expert_step()
    turns = env.turns
    check_answer(env, env.step(HOSTILE[case](valid)), turns, longest)
    if not env.done:  # the env still takes a valid action (the hostile one may have been that action)
        _, valid = env.expert_step()
        check_answer(env, env.step(valid), turns + 1, longest)


def test_expert_still_solves_with_hostile_actions_in_between(env_name, hostile_env):
    """Hostile actions before the first move and between later ones leave the game winnable."""
    env, task, _ = hostile_env
    env.reset(task)
    cases, turns = list(HOSTILE.values()), 0
    for _ in range(env.spec.max_turns):
        _, valid = env.expert_step()
        # an ambiguity prompt awaits a number and any other input cancels it (sciworld), and a submit is final
        # whatever garbage follows it (colbench's code), so none then
        final = valid.isdigit() or valid.startswith("submit")
        hostile = [] if final else cases if turns == 0 else [cases[turns % len(cases)]]
        for make in hostile:
            step = env.step(make(valid))
            turns += 1
            if step.done:
                break
            _, valid = env.expert_step()  # a disguised valid action may have moved the game on
            if valid.startswith("submit"):  # ... as far as the final action
                break
        if env.done:
            break
        step = env.step(valid)
        turns += 1
        if step.done:
            break
    assert env.done and env.spec.is_success(env.reward), (task.task_id, env.reward)
    assert env.turns == turns


@pytest.mark.parametrize("action", [None, b"move up", 42, ["move up"]])
def test_non_str_action_is_a_type_error(hostile_env, action):
    """A non-str action is a programming error (the engine always passes text), not a move."""
    env, task, _ = hostile_env
    if env.done:
        env.reset(task)
    turns = env.turns
    with pytest.raises(TypeError, match="str"):
        env.step(action)
    assert env.turns == turns and not env.done
    env.step(env.expert_step()[1])
    assert env.turns == turns + 1
