"""gymflow.paths names the stages' outputs as dvc.yaml and sweet/dvc.yaml declare them: each path it names is a
stage's output there, or the folder of some; read from the YAML, no DVC run."""

from pathlib import Path

import pytest
import yaml

from gymflow import paths

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ("dvc.yaml", "sweet/dvc.yaml")  # both run from the repository root


def declared(entries: list) -> list[str]:
    """The paths of a stage's outs, metrics or plots (each a string or a one-key dict of options)."""
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


OUTPUTS = {
    path
    for pipeline in PIPELINES
    for stage in yaml.safe_load((ROOT / pipeline).read_text())["stages"].values()
    for kind in ("outs", "metrics", "plots")
    for path in declared(stage.get("do", stage).get(kind, []))
}
FOLDERS = {  # folders of outputs, each output under them a stage's own
    paths.DATA,
    paths.MODELS,
    paths.ROLLOUTS,
    paths.EVALUATE_ROLLOUTS,
    paths.EXPLORE_ROLLOUTS,
    paths.KEPT,
    paths.CRITICS,
    paths.METRICS,
    paths.PLOTS,
    paths.COMPARE,
}
NAMED = [  # what the functions give for the names and foreach items dvc.yaml writes them for
    paths.model("sft"),
    paths.model("${key}"),
    paths.explored("${key}"),
    paths.kept("${key}"),
    paths.critic("${key}"),
    paths.critic_scores("${key}"),
    paths.metrics("sft"),
    paths.metrics("evaluate/${item}"),
    paths.metrics("learn/${key}"),
    paths.metrics("critic/${key}"),
    paths.plot("rl"),
    paths.plot("learn/${key}"),
    paths.plot("best_of_n"),
    paths.comparison("default"),
]


def test_outputs_are_read():
    assert "data/models/sft" in OUTPUTS and "data/critics/${key}.critic_scores.parquet" in OUTPUTS


@pytest.mark.parametrize(
    "name", [n for n, v in vars(paths).items() if isinstance(v, Path) and v not in FOLDERS and n.isupper()]
)
def test_each_output_the_module_names_is_a_stages_output(name):
    assert str(getattr(paths, name)) in OUTPUTS, f"paths.{name} is no output of {' or '.join(PIPELINES)}"


@pytest.mark.parametrize("path", NAMED, ids=str)
def test_each_named_path_is_a_stages_output(path):
    assert str(path) in OUTPUTS


@pytest.mark.parametrize("folder", sorted(FOLDERS), ids=str)
def test_each_folder_holds_a_stages_output(folder):
    assert any(out.startswith(f"{folder}/") for out in OUTPUTS)


def test_under_moves_a_folder_to_another_data_folder(tmp_path):
    assert paths.under(tmp_path, paths.TRAJECTORY_ROLLOUTS) == tmp_path / "rollouts" / "trajectories"
    assert paths.under(paths.DATA, paths.PAIRS) == paths.PAIRS
