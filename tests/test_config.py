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
            GOOD + "evaluate: {envs: [maze], policies: [sft], servers: {stf: 'http://x/v1'}}\n",
            "evaluate.servers names \\['stf'\\], which are not in evaluate.policies",
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
