import pytest

from gymflow.config import load_params
from gymflow.errors import UserError

GOOD = """
envs: [maze]
instructions: {seed: 0, train: {maze: 10}, eval: {maze: 5}}
trajectories: {tasks: {maze: 8}}
"""


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_valid_params_load(tmp_path):
    params = load_params(write(tmp_path, GOOD))
    assert params.instructions.train == {"maze": 10} and params.trajectories.tasks["maze"] == 8


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD + "typo_section: 1\n", "typo_section: Extra inputs are not permitted"),
        (GOOD.replace("envs: [maze]", "envs: [mazee]"), "unknown environment"),
        (GOOD.replace("train: {maze: 10}", "train: {}"), "instructions.train has no size for \\['maze'\\]"),
        (GOOD.replace("maze: 8", "maze: 80"), "trajectories.tasks exceeds instructions.train"),
        (GOOD.replace("seed: 0", "seed: zero"), "instructions.seed: Input should be a valid integer"),
        ("envs: [maze\n", "not valid YAML"),
        (
            GOOD + "sft: {envs: [maze]}\n",
            "sft.envs: give each environment its passes over AgentTraj, e.g. {maze: 3}",
        ),
        (GOOD + "sft: {envs: {maze: 0}}\n", "sft.envs.maze: Input should be greater than 0"),
        (
            GOOD + "sft: {envs: {maze: 1}, bf16: fast}\n",
            "sft.bf16: 'fast' is not a precision: use true, false or auto",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft}, b: {explorer: c}}}\n",
            "iteration b explores with 'c'; use sft or an earlier iteration \\['a'\\]",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft, temprature: 1}}}\n",
            "evol.iterations.a: temprature: Extra inputs are not permitted",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, learn_from: first, iterations: {a: {explorer: sft}}}\n",
            "evol.learn_from: Input should be 'init', 'sft' or 'last'",
        ),
        (
            GOOD + "evol: {tasks: {wordle: 5}, iterations: {a: {explorer: sft}}}\n",
            "evol.tasks has \\['wordle'\\], which are not in envs",
        ),
    ],
)
def test_bad_params_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(UserError, match=message) as err:
        load_params(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_an_iteration_overrides_the_shared_evol_settings_for_itself_only(tmp_path):
    evol = "evol: {tasks: {maze: 5}, temperature: 0.7, iterations: {a: {explorer: sft}, b: {explorer: a, temperature: 1.0}}}\n"
    params = load_params(write(tmp_path, GOOD + evol)).evol
    assert params.at("a").temperature == 0.7 and params.at("b").temperature == 1.0
    assert params.at("b").tasks == {"maze": 5} and (params.index("a"), params.index("b")) == (1, 2)
