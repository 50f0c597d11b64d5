"""Every entry point answers `--help` with its usage and options, and does nothing else (issue 37, section 4):
`python -m flows.pipeline --help` used to start the flow, and with no Prefect server reachable it died after
90 s. The entry points are found, not listed: each module with a `__main__` block (`python -m` for a package's,
`python FILE` for a benchmark's), and `python -m gymflow` with each of its subcommands."""

import argparse
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAIN = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)


def walk(root: Path) -> list[Path]:
    """Every file under `root` but those in hidden folders (.git, the .venv the install made) and caches."""
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
        found += [Path(folder) / name for name in names]
    return found


def main_modules() -> list[Path]:
    """The repository's Python files with a `__main__` block (tests and hidden folders aside)."""
    paths = (p for p in walk(ROOT) if p.suffix == ".py" and "tests" not in p.relative_to(ROOT).parts)
    return sorted(p for p in paths if not p.name.startswith(".") and MAIN.search(p.read_text()))


def command(path: Path) -> list[str]:
    """How the repository runs `path`: `-m` with its module name inside a package, else as a file (relative)."""
    rel = path.relative_to(ROOT)
    if (path.parent / "__init__.py").exists():
        return ["-m", ".".join(rel.with_suffix("").parts)]
    return [str(rel)]


def cli_commands() -> list[list[str]]:
    """`python -m gymflow` and each of its subcommands."""
    from gymflow.cli import parser

    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return [["-m", "gymflow"], *(["-m", "gymflow", name] for name in sub.choices)]


MODULES = main_modules()
COMMANDS = [command(p) for p in MODULES] + cli_commands()


def closed_port() -> int:
    """A local port nothing listens on: where PREFECT_API_URL points, so a flow that starts cannot reach a server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files(root: Path) -> dict[Path, int]:
    """Every file under `root` (hidden folders aside, as `walk`) with its modification time."""
    return {p: p.stat().st_mtime_ns for p in walk(root)}


# The long options a module reads: declared to argparse (unless hidden with SUPPRESS), given to
# flows.command_line.parse as a dict key, or looked up in sys.argv by hand; not those it passes to other programs.
DECLARED = re.compile(r"""add_argument\(\s*["'](--[\w-]+)["']([^\n]*)|["'](--[\w-]+)["']\s*:""")
BY_HAND = re.compile(r"""["'](--[\w-]+)["']\s+(?:not\s+)?in\s+sys\.argv""")


def options(cmd: list[str]) -> set[str]:
    """The long options the entry point `cmd` reads, from its module's source (none for `gymflow`'s)."""
    module = {" ".join(command(p)): p for p in MODULES}.get(" ".join(cmd))
    if module is None:
        return set()
    source = module.read_text()
    declared = {a or c for a, rest, c in DECLARED.findall(source) if "SUPPRESS" not in rest}
    return declared | set(BY_HAND.findall(source))


def test_the_entry_points_are_found():
    found = {" ".join(c) for c in COMMANDS}
    for expected in ["-m flows.pipeline", "-m stages.sft", "benchmarks/rl_update.py", "-m gymflow sql"]:
        assert expected in found
    assert "-m gymflow.models.pretrained" in found and len(MODULES) > 40


@pytest.mark.slow  # a process per entry point
@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_entry_point_answers_help_and_does_nothing_else(cmd, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PREFECT_API_URL": f"http://127.0.0.1:{closed_port()}/api",
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
    }
    before = files(ROOT)
    out = subprocess.run(
        [sys.executable, *(str(ROOT / c) if c.endswith(".py") else c for c in cmd), "--help"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("usage: ") and "-h, --help" in out.stdout, out.stdout[:2000]
    missing = [option for option in options(cmd) if option not in out.stdout]
    assert not missing, f"--help does not mention {missing}:\n{out.stdout}"
    assert not list(work.iterdir()), "wrote into its working directory"
    assert files(ROOT) == before, "wrote into the repository"
