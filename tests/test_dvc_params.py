"""dvc.yaml's `params:` name what each stage reads and no more, so editing a key of params.yaml reruns exactly
the stages that read it: rollout settings have a section of their own, and evaluation's settings no longer
rerun the stages that train (`rl`, `explore`).

Staleness is asked of DVC itself: a copy of dvc.yaml and params.yaml in a scratch repository, every stage's
params recorded as `dvc repro` records them in dvc.lock, then one key edited.
"""

import ast
import inspect
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from dvc.dependency.param import ParamsDependency
from dvc.repo import Repo
from test_dvc_deps import PIPELINES, STAGES

from gymflow.config import Params

pytestmark = pytest.mark.slow  # DVC's pipeline: dvc.yaml against the scripts, and DVC on a scratch copy

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = STAGES  # both pipelines' stages, a foreach stage as its template
# the stages that play episodes
PLAYING = ["evaluate", "evaluate_evol", "explore", "rl", "offline", "evaluate_sweet"]
# A section a stage's script reads that reaches it through a data dependency, whose stage lists it: the
# trajectories' resume hash covers `instructions`, which are data/instructions (stage `instructions`).
READ_THROUGH_DATA = {"trajectories": {"instructions"}}
# A section a `Params` method reads that a stage's calls never reach: `evaluated_envs` reads rl.tasks for RL's
# agent only, which evaluate_evol and plot_evol never ask about, and SWEET-RL's evaluations name their
# environment, so they never ask where an agent trained.
# Scripts that serve two stages by an argument (`python -m stages.control sweet`) read the other method's section
# only when run for it: AgentEvol's control and comparison never read `sweet`, SWEET-RL's never read `evol`/`rl`.
READ_FOR_OTHERS = {
    "evaluate_evol": {"rl"},
    "plot_evol": {"rl"},
    "evaluate_sweet": {"evol", "rl"},
    "control": {"sweet"},
    "compare": {"sweet"},
    "control_sweet": {"evol"},
    "compare_sweet": {"evol", "rl"},
}


def sections_read(script: Path) -> set[str]:
    """The params.yaml sections a stage script reads: `params.<section>` or `load_params().<section>`, and
    those a `Params` method it calls reads (`self.<section>` in the method)."""
    read = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "params":
            method = getattr(Params, node.attr, None)
            if node.attr not in Params.model_fields and inspect.isfunction(method):
                read |= _method_reads(method)
        if isinstance(node, ast.Attribute) and node.attr in Params.model_fields:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "params") or (
                isinstance(owner, ast.Call) and ast.unparse(owner.func) == "load_params"
            ):
                read.add(node.attr)
    return read


def _method_reads(method) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr in Params.model_fields
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }


def sections_listed(stage: dict) -> set[str]:
    return {key.split(".")[0] for key in stage.get("params", [])}


@pytest.mark.parametrize("name", sorted(set(TEMPLATES) - {"params"}))  # `params` depends on the whole file
def test_a_stages_params_name_the_sections_its_script_reads(name):
    script = ROOT / (TEMPLATES[name]["cmd"].split()[2].replace(".", "/") + ".py")
    read = sections_read(script) - READ_THROUGH_DATA.get(name, set()) - READ_FOR_OTHERS.get(name, set())
    assert read, f"{script} reads no params section that the scan recognises"
    assert sections_listed(TEMPLATES[name]) == read, f"{script} reads {sorted(read)}"


def test_the_stages_that_play_episodes_depend_on_rollout_and_training_not_on_evaluate():
    for name in PLAYING:
        assert "rollout" in sections_listed(TEMPLATES[name]), name
    for name in ("explore", "rl"):
        assert "evaluate" not in sections_listed(TEMPLATES[name]), name


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """dvc.yaml and params.yaml in a scratch DVC repository, each stage's params recorded: (repo folder, stage
    address -> its params dependencies)."""
    folder = tmp_path_factory.mktemp("dvc")
    for name in (*PIPELINES, "params.yaml"):
        (folder / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, folder / name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_SITE_CACHE_DIR", str(folder / "site-cache"))  # DVC's state stays in the scratch folder
        mp.setenv("DVC_NO_ANALYTICS", "1")
        repo = Repo.init(str(folder), no_scm=True)
        deps = {
            stage.name: [d for d in stage.deps if isinstance(d, ParamsDependency)]
            for stage in repo.index.stages
        }
        for dep in (d for ds in deps.values() for d in ds):
            dep.save()  # the values dvc.lock would hold after `dvc repro`
        yield folder, deps
        repo.close()


def stale_after(scratch, section: str, key: str, value: object) -> set[str]:
    """The stages DVC finds changed once `section.key` of params.yaml is set to `value`."""
    folder, deps = scratch
    path = folder / "params.yaml"
    original = path.read_text()
    raw = yaml.safe_load(original)
    assert raw[section][key] != value
    raw[section][key] = value
    path.write_text(yaml.safe_dump(raw))
    try:
        return {name for name, ds in deps.items() if any(d.status() for d in ds)}
    finally:
        path.write_text(original)


def stages_of(scratch, *templates: str) -> set[str]:
    names = {name for name in scratch[1] if name.split("@")[0] in templates}
    assert {name.split("@")[0] for name in names} == set(templates)  # each template has its stages
    return names


PLAY = ["evaluate", "evaluate_evol", "explore", "rl", "offline", "actor_pairs", "best_of_n", "evaluate_sweet"]
SWEET = [
    "offline",
    "critic",
    "actor_pairs",
    "actor",
    "control_sweet",
    "rft",
    "mtdpo",
    "best_of_n",
]  # not evaluate_sweet


@pytest.mark.parametrize(
    "section, key, value, rerun",
    [
        ("evaluate", "k", 3, ["evaluate", "evaluate_evol", "evaluate_sweet"]),
        ("evaluate", "seed", 1, ["evaluate", "evaluate_evol", "evaluate_sweet"]),
        ("evaluate", "top_p", 0.9, ["evaluate", "evaluate_evol", "evaluate_sweet"]),
        ("rollout", "batch_size", 7, PLAY),
        ("rollout", "max_new_tokens", 64, PLAY),
        ("rollout", "max_length", 2048, [p for p in PLAY if p != "actor_pairs"]),
        # RL samples in process with the weights it trains: a server for a policy is not its business
        (
            "rollout",
            "servers",
            {"sft": "http://localhost:8000/v1"},
            ["evaluate", "evaluate_evol", "explore"] + ["offline", "evaluate_sweet"],
        ),
        # SWEET-RL: one seed for every draw; each method's settings rerun only it (and what learns from it)
        ("sweet", "seed", 1, SWEET),
        ("sweet", "dpo", {"lr": 0.001}, ["actor", "control_sweet"]),  # the control trains at the actor's lr
        ("sweet", "mtdpo", {"lr": 0.001}, ["mtdpo"]),
        ("sweet", "best_of_n", {"ns": [1, 2], "tasks": 5}, ["best_of_n"]),
        ("sweet", "critic", {"lr": 0.001}, ["critic"]),
        ("sft", "lr", 0.01, ["sft", "learn", "control"]),  # rejection fine-tuning has its own lr
        # the filter reruns the learners; AgentEvol's control reads the row count from the last one's metrics
        ("evol", "keep", "all", ["learn"]),
        ("evol", "lr", 0.001, ["learn", "control"]),
    ],
)
def test_editing_a_key_reruns_exactly_the_stages_that_read_it(scratch, section, key, value, rerun):
    assert stale_after(scratch, section, key, value) == stages_of(scratch, *rerun)


def test_nothing_is_stale_before_an_edit(scratch):
    """The check above can tell: with params.yaml as recorded, DVC finds no stage's params changed."""
    assert not {name for name, ds in scratch[1].items() if any(d.status() for d in ds)}
