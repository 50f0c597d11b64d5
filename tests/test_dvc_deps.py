"""dvc.yaml's deps cover the code each stage runs, so a change to shared code reruns the stages that use it.

A stage's code is its script plus every gymflow module the script imports, followed transitively (imports
inside functions too: they run when the function does), and the C++ sources such a module compiles. A dep on a
folder covers the files under it.
"""

import ast
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # DVC's pipeline: dvc.yaml's deps against the code each stage imports

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ("dvc.yaml", "sweet/dvc.yaml")  # the default pipeline and SWEET-RL's (run from the root)
STAGES = {  # foreach: its template
    name: stage.get("do", stage)
    for pipeline in PIPELINES
    for name, stage in yaml.safe_load((ROOT / pipeline).read_text())["stages"].items()
}
PACKAGES = ("gymflow", "stages")
COMPILED = {  # a module -> the sources it compiles and runs (not imports, so the walk cannot see them)
    "gymflow/models/decode_attention.py": ["gymflow/models/decode_attention.cpp"],
}


def module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported_names(path: Path) -> list[str]:
    """Modules named by `path`'s imports (for `from a import b`, both a and a.b: b may be a module)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if is_type_checking(node) for n in ast.walk(node)}
    names = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else ())
            module = ".".join(part for part in (base, node.module or "") if part)
            names += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return names


def runs_code(path: Path) -> bool:
    """False for a package `__init__.py` holding only a docstring and constants: importing it changes nothing."""
    for node in ast.parse(path.read_text()).body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        constant = isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        if not (docstring or constant):
            return True
    return False


def code_of(module: str) -> set[str]:
    """The repository files importing `module` executes: the module, the packages above each module it
    imports (Python runs `gymflow/envs/__init__.py` for `gymflow.envs.base`), and so on transitively."""
    files: set[Path] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        if parts[0] not in PACKAGES:
            continue
        for i in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:i]))
            if path is not None and path not in files:
                files.add(path)
                todo += imported_names(path)
    code = {str(p.relative_to(ROOT)) for p in files if p.name != "__init__.py" or runs_code(p)}
    return code | {source for path in code for source in COMPILED.get(path, [])}


def stage_module(stage: dict) -> str:
    words = stage["cmd"].split()
    assert words[:3] == ["python", "-m", words[2]] and words[2].startswith("stages."), stage["cmd"]
    return words[2]


def covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_stages_deps_cover_every_file_of_code_it_runs(name):
    stage = STAGES[name]
    code = code_of(stage_module(stage))
    assert f"{stage_module(stage).replace('.', '/')}.py" in code
    missing = sorted(path for path in code if not covered(path, stage["deps"]))
    assert not missing, f"dvc.yaml stage {name} imports these but does not depend on them: {missing}"


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_code_dep_of_a_stage_is_code_it_runs(name):
    """The converse: a dep on code the stage never imports would rerun it for another stage's change."""
    stage = STAGES[name]
    code = code_of(stage_module(stage))
    unused = [
        dep
        for dep in stage["deps"]
        if dep.split("/")[0] in PACKAGES and not any(covered(path, [dep]) for path in code)
    ]
    assert not unused, f"dvc.yaml stage {name} depends on code it does not run: {unused}"


def test_the_import_walk_finds_what_a_stage_imports_indirectly():
    """The walk itself: rl reaches the presets (gymflow/config.py) and the draws through train/rl.py, and
    sft reaches the environments through rollout/records.py (its `Task`: Python runs gymflow/envs/__init__.py
    for gymflow.envs.base); TYPE_CHECKING-only imports do not count."""
    rl, sft = code_of("stages.rl"), code_of("stages.sft")
    assert {"gymflow/config.py", "gymflow/train/draws.py", "gymflow/train/pg.py"} <= rl
    assert "gymflow/train/evol.py" not in rl and "gymflow/rollout/play.py" not in sft
    assert {"gymflow/rollout/records.py", "gymflow/envs/maze.py", "gymflow/envs/__init__.py"} <= sft
    assert "gymflow/models/server.py" not in rl | sft  # only `gymflow serve-model` imports it
    assert "gymflow/__init__.py" not in rl  # a docstring and __version__: nothing to depend on


def test_the_params_check_runs_before_every_other_stage():
    """DVC deletes a stage's outputs before running it: depending on data/params.ok makes `dvc repro` run
    the check (stages/params.py) first and stop there on a bad params.yaml."""
    check = STAGES["params"]
    outs = [next(iter(out)) if isinstance(out, dict) else out for out in check["outs"]]
    assert "params.yaml" in check["deps"] and outs == ["data/params.ok"]
    late = [
        name for name, stage in STAGES.items() if name != "params" and "data/params.ok" not in stage["deps"]
    ]
    assert not late, (
        f"these stages do not depend on data/params.ok, so DVC may run them before the check: {late}"
    )


def test_no_default_stage_depends_on_what_the_sweet_pipeline_writes():
    """A dependency on a folder or file that sweet/dvc.yaml writes makes SWEET-RL's stages upstream of the default
    pipeline, so a plain `dvc repro` would run both (it once did, through plot_evol's folder of evaluations)."""

    def outs(stage: dict) -> list[str]:
        found = []
        for kind in ("outs", "metrics", "plots"):
            found += [next(iter(o)) if isinstance(o, dict) else o for o in stage.get(kind, [])]
        return found

    sweet = yaml.safe_load((ROOT / "sweet/dvc.yaml").read_text())["stages"]
    written = {
        out.replace("${item}", "").replace("${key}", "")
        for stage in sweet.values()
        for out in outs(stage.get("do", stage))
    }
    default = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in default.items():
        for dep in stage.get("do", stage)["deps"]:
            hits = [
                w
                for w in written
                if w == dep or w.startswith(dep.rstrip("/") + "/") or dep.startswith(w + "/")
            ]
            assert not hits, (
                f"dvc.yaml stage {name} depends on {dep}, which sweet/dvc.yaml writes ({hits[0]})"
            )


def test_plot_evol_depends_on_the_evaluation_of_sft_and_of_every_agentevol_iteration():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    wanted = {f"data/metrics/evaluate/{p}.json" for p in ["sft", *params["evol"]["iterations"]]}
    deps = {d for d in STAGES["plot_evol"]["deps"] if d.startswith("data/metrics/")}
    assert deps == wanted
