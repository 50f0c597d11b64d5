"""The recipes of docs/scaling.md work as written (issue 37, 4.2): its Ray recipe once failed at the first step,
`dvc exp run -S rollout.engine=ray` giving "Key 'engine' is not in struct", because params.yaml lacked the key.

The recipes are read from the page itself, so a recipe added or edited there is checked too: every shell command
of its code blocks and every command, params setting and option named in its prose. Running them whole is too
heavy for CI (a Ray cluster, GPUs, 16 processes over two machines, an S3 bucket, a Prefect server), so each is
checked as far as a tiny, local run can take it, by the code that would take it:

- every params setting (`dvc exp run -S key=value`, a `section: {...}` snippet, `section.key: value`) is applied to
  a tiny copy of params.yaml (test_pipeline's) as DVC applies it, hydra's struct check included, and must then
  pass the `params` stage's check; a dotted key named without a value must exist in the params schema;
- every program answers `--help`, through the subcommands the recipe names, and the help names every option
  the recipe passes; an inline `--option` of the page's prose is named by the help of a command of its section;
  `gymflow`'s subcommands also parse the recipe's arguments (an environment `serve-env` does not serve fails);
- every stage a `dvc` command targets is a stage of dvc.yaml, every module run with `-m` exists, every
  `GYMFLOW_*` variable a recipe sets is read by the code, and every `gymflow.` callable named exists.

Not checked: `pip install` (it installs), `export` (the shell's), and vLLM's own server where this checkout has no
.venv-vllm (`./install.sh --vllm`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import itertools
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from dvc.exceptions import InvalidArgumentError
from dvc.utils.hydra import apply_overrides
from pydantic import BaseModel
from test_pipeline import tiny_params

from gymflow.config import Params, check_machine, load_params
from gymflow.errors import UserError
from gymflow.train.presets import switches

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/scaling.md"
BIN = Path(sys.executable).parent  # the programs the install put beside this Python (dvc, ray, prefect, ...)
COMMAND = re.compile(
    r"^(python -m |gymflow |dvc |ray |prefect |accelerate |\./)"
)  # an inline span that is one
NOT_RUN = {"pip", "export"}  # installs, or the shell's own


@dataclass(frozen=True)
class Recipe:
    section: str  # the page's `##` heading it is under
    argv: tuple[str, ...]
    env: tuple[str, ...] = ()  # NAME=value words before the program

    def __str__(self) -> str:
        return " ".join(self.argv)


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each `##` section; the text before the first is the section ""."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def commands(line: str, section: str) -> list[Recipe]:
    """The commands of one shell line: comments dropped, split at `&&`, `;` and `&`."""
    words = shlex.split(line, comments=True)
    found, current = [], []
    for word in [*words, ";"]:
        if word in ("&&", ";", "&", "||"):
            env = tuple(itertools.takewhile(lambda w: re.match(r"^[A-Z_]+=", w), current))
            if argv := current[len(env) :]:
                found.append(Recipe(section, tuple(argv), env))
            current = []
        else:
            current.append(word)
    return found


def read_page() -> tuple[list[Recipe], list[tuple[str, str]]]:
    """The page's commands (code blocks and prose) and its other inline spans, as (section, span)."""
    recipes, spans = [], []
    for section, body in sections(PAGE.read_text()):
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", body, re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                recipes += commands(line.replace("&&", " && ").replace(" &", " & "), section)
        prose = re.sub(r"```.*?```", "", body, flags=re.DOTALL)
        for span in re.findall(r"`([^`\n]+)`", prose):
            if COMMAND.match(span):
                recipes += commands(span, section)
            else:
                spans.append((section, span))
    return recipes, spans


RECIPES, SPANS = read_page()
RUN = [r for r in RECIPES if r.argv[0] not in NOT_RUN]
SET = [r for r in RECIPES if r.argv[:3] == ("dvc", "exp", "run")]
SNIPPETS = [span for _, span in SPANS if re.match(r"^\w+: \{.*\}$", span)]  # params.yaml in YAML's flow style
DOTTED = [span for _, span in SPANS if re.match(rf"^({'|'.join(Params.model_fields)})\.\w+(: .+)?$", span)]
OPTIONS = [(section, span) for section, span in SPANS if re.match(r"^--[\w-]+$", span)]


def test_the_recipes_are_found() -> None:
    found = {str(r) for r in RECIPES}
    assert "dvc exp run -S rollout.engine=ray -S rollout.workers=16 -S rollout.ray_address=auto" in found
    assert "gymflow serve-env sciworld --host 0.0.0.0 --port 8100 --max-sessions 128" in found
    assert "python -m flows.pipeline --pools" in found and "dvc repro evaluate@sft" in found
    assert len(RUN) > 20 and len(SNIPPETS) == 3 and len(DOTTED) >= 6 and len(OPTIONS) >= 4


# ---- params --------------------------------------------------------------------------------------------------


def check_params(data: dict, folder: Path) -> None:
    """What the `params` stage checks (stages/params.py), on `data` written as params.yaml in `folder`."""
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    if params.rl is not None:
        switches(params.rl)
    check_machine(params)


def with_overrides(params: dict, overrides: list[str], folder: Path) -> dict:
    """`params` after `dvc exp run -S` with `overrides`, applied by DVC's own code."""
    path = folder / "overridden.yaml"
    path.write_text(yaml.safe_dump(params))
    apply_overrides(path, overrides)
    return yaml.safe_load(path.read_text())


def merged(base: dict, snippet: dict) -> dict:
    """`snippet` written into `base` as a user would edit params.yaml: its keys set, the others kept."""
    out = copy.deepcopy(base)
    for key, value in snippet.items():
        out[key] = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


@pytest.mark.parametrize("recipe", SET, ids=str)
def test_a_dvc_exp_run_recipe_sets_params_the_check_accepts(recipe: Recipe, tmp_path: Path) -> None:
    overrides = [recipe.argv[i + 1] for i, word in enumerate(recipe.argv) if word in ("-S", "--set-param")]
    assert overrides, "a dvc exp run recipe here sets params"
    check_params(with_overrides(tiny_params(), overrides, tmp_path), tmp_path)


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_a_params_snippet_passes_the_check(snippet: str, tmp_path: Path) -> None:
    check_params(merged(tiny_params(), yaml.safe_load(snippet)), tmp_path)


def key_exists(model: type[BaseModel], path: list[str]) -> bool:
    """Whether the dotted `path` names a field of `model` (a dict-valued field takes any key below it)."""
    field = model.model_fields.get(path[0])
    if field is None:
        return False
    if len(path) == 1:
        return True
    inner = [a for a in (field.annotation, *getattr(field.annotation, "__args__", ())) if isinstance(a, type)]
    models = [a for a in inner if issubclass(a, BaseModel)]
    return any(key_exists(m, path[1:]) for m in models) if models else "dict" in str(field.annotation)


@pytest.mark.parametrize("span", DOTTED)
def test_a_named_params_key_exists_and_its_value_passes(span: str, tmp_path: Path) -> None:
    key, _, value = span.partition(": ")
    assert key_exists(Params, key.split(".")), f"{key} is not a key of params.yaml (gymflow.config.Params)"
    if value:
        check_params(with_overrides(tiny_params(), [f"{key}={value}"], tmp_path), tmp_path)


def test_a_recipe_naming_a_missing_key_fails(tmp_path: Path) -> None:
    """What the Ray recipe met when params.yaml lacked `rollout.engine`, and a misspelt key."""
    params = tiny_params()
    del params["rollout"]["engine"]
    with pytest.raises(InvalidArgumentError) as missing:
        with_overrides(params, ["rollout.engine=ray"], tmp_path)
    assert "Could not override 'rollout.engine'" in str(missing.value.__cause__)
    with pytest.raises(InvalidArgumentError):
        with_overrides(tiny_params(), ["rollout.engin=ray"], tmp_path)
    with pytest.raises(UserError, match="rollout.workers"):  # a value out of range: the check names the key
        check_params(with_overrides(tiny_params(), ["rollout.workers=-1"], tmp_path), tmp_path)


# ---- commands ------------------------------------------------------------------------------------------------


def program(recipe: Recipe) -> list[str] | None:
    """How this checkout runs the recipe's program and the subcommands it names; None where it cannot here."""
    name, *rest = recipe.argv
    if name == "python":
        if rest[1].startswith("vllm."):  # an environment of its own
            vllm = ROOT / ".venv-vllm/bin/python"
            return [str(vllm), "-m", rest[1]] if vllm.exists() else None
        return [sys.executable, "-m", rest[1]]
    if name.startswith("./"):
        return [str(ROOT / name)]
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert path, f"{name}: not installed beside {sys.executable} nor on PATH"
    sub = []
    for word in rest:
        if word.startswith("-"):
            break
        sub.append(word)
    return [str(path), *sub]


def options_of(recipe: Recipe) -> list[str]:
    """The options the recipe passes its program (for `accelerate launch`, not those of the module it runs)."""
    argv = list(recipe.argv[3:] if recipe.argv[0] == "python" else recipe.argv[1:])
    if recipe.argv[0] == "accelerate" and "-m" in argv:
        argv = argv[: argv.index("-m")]
    return [w.split("=")[0] for w in argv if w.startswith("-")]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def help_text(argv: tuple[str, ...], scratch: str) -> str:
    """`argv --help`'s output, which must succeed; no Prefect server or Hub is reached."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": f"http://127.0.0.1:{closed_port()}/api",
        "PREFECT_HOME": str(Path(scratch) / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "DVC_NO_ANALYTICS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    out = subprocess.run([*argv, "--help"], cwd=scratch, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(argv)} --help failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("help"))


@pytest.mark.slow  # a process per command
@pytest.mark.parametrize("recipe", RUN, ids=str)
def test_a_command_answers_help_naming_the_options_it_is_given(recipe: Recipe, scratch: str) -> None:
    argv = program(recipe)
    if argv is None:
        pytest.skip(f"{recipe.argv[2]} runs in .venv-vllm, which this checkout lacks (./install.sh --vllm)")
    text = help_text(tuple(argv), scratch)
    missing = [o for o in options_of(recipe) if not re.search(rf"(^|[\s,\[]){re.escape(o)}\b", text, re.M)]
    assert not missing, f"{' '.join(argv)} --help does not name {missing}:\n{text[:3000]}"
    if recipe.argv[0] == "gymflow":
        from gymflow.cli import parser

        parser().parse_args(list(recipe.argv[1:]))  # argparse exits on an argument it does not take
    if "-m" in recipe.argv and recipe.argv[0] != "python":  # accelerate launch -m MODULE
        module = recipe.argv[recipe.argv.index("-m") + 1]
        assert importlib.util.find_spec(module), f"{module} does not exist"
    for variable in (e.split("=")[0] for e in recipe.env):
        code = "\n".join(p.read_text() for d in ("flows", "gymflow") for p in (ROOT / d).rglob("*.py"))
        assert variable in code + (ROOT / "prefect.yaml").read_text(), f"nothing reads {variable}"


@pytest.mark.slow  # a process per command
@pytest.mark.parametrize("section, option", OPTIONS, ids=lambda v: v)
def test_an_option_of_the_prose_is_one_of_its_sections_commands(
    section: str, option: str, scratch: str
) -> None:
    helps = [help_text(tuple(argv), scratch) for r in RUN if r.section == section if (argv := program(r))]
    assert any(re.search(rf"(^|[\s,\[]){re.escape(option)}\b", h, re.M) for h in helps), (
        f"{option} ({section}) is not an option of {[str(r) for r in RUN if r.section == section]}"
    )


def stage_names(folder: Path) -> set[str]:
    """Every stage address of dvc.yaml, foreach items expanded, as DVC reads it (in a scratch copy, `folder`)."""
    from dvc.repo import Repo

    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, folder / name)
    return {s.name for s in Repo.init(str(folder), no_scm=True).index.stages}


@pytest.mark.slow  # a DVC project
def test_every_stage_a_dvc_command_targets_exists(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))  # DVC's state stays in tmp_path
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    names = stage_names(tmp_path)
    targets = [
        (str(r), word)
        for r in RUN
        if r.argv[0] == "dvc" and r.argv[1] in ("repro", "commit", "push", "pull")
        for word in r.argv[2:]
        if not word.startswith("-") and not word.isupper()  # STAGE: a placeholder
    ]
    assert targets and all(stage in names for _, stage in targets), (targets, sorted(names))


def test_every_gymflow_callable_named_exists() -> None:
    named = {m for _, span in SPANS for m in re.findall(r"\b(gymflow(?:\.\w+)+)\(", span)}
    assert named
    for dotted in named:
        module, _, attr = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), dotted
