"""The flows import one another without a cycle: each module's imports of other flows modules, read from its
source, form a graph with no loop (pipeline and evol once imported each other, one of them from inside a function)."""

import ast
from pathlib import Path

FLOWS = Path(__file__).resolve().parents[1] / "flows"


def flows_imports(path: Path) -> set[str]:
    """The flows modules `path` imports, anywhere in the file (function bodies included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flows."):
            found.add(node.module.removeprefix("flows."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("flows.") for a in node.names if a.name.startswith("flows.")}
    return found


def test_flows_modules_import_each_other_without_a_cycle():
    graph = {p.stem: flows_imports(p) for p in FLOWS.glob("*.py") if p.stem != "__init__"}
    assert "evol" in graph["pipeline"]  # the graph is read, not empty
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join([*path, module])}"
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
