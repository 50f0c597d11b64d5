"""gymflow's modules import without a cycle: every module imports on its own, and the modules each one names in
its imports (read from its source, function bodies and `TYPE_CHECKING` blocks included) form a graph with no
loop. apps' api.py and world.py once imported each other, one of them from inside a function."""

import ast
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gymflow"
SKIP = {"gymflow.__main__"}  # `python -m gymflow`: importing it runs the command line


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path) -> set[str]:
    """The gymflow modules `path` names in its imports (for `from a import b`, a.b where b is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names}
    return {m for m in found if m in MODULES and m != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Module -> the gymflow modules it imports (parsed when a test first asks, not at collection)."""
    return {name: imports(name, path) for name, path in MODULES.items()}


def test_the_graph_is_read():
    assert "gymflow.envs.apps.world" in graph()["gymflow.envs.apps.api"]
    assert "gymflow.config" in graph()["gymflow.rollout.engine"]
    assert "gymflow.envs.apps.api" in graph()["gymflow.envs.apps.env"]


def test_no_import_cycle_among_gymflow_modules():
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join([*path[path.index(module) :], module])}"
        if module in done:
            return
        for dep in sorted(graph()[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph():
        visit(module, [])


@pytest.mark.parametrize("name", sorted(set(MODULES) - SKIP))
def test_every_module_imports(name):
    importlib.import_module(name)
