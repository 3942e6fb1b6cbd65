"""The source tree keeps the shape the structure pass gave it: small classes and functions, no import cycle
(type-checking and function-level imports count too), and the search stack apart from the MCP layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "orchestrator"
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 100


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _imports(name: str, path: Path, package: bool, known: set[str]) -> set[str]:
    """Every project module `name` imports, anywhere in the file, with the packages each import loads."""
    home = name if package else name.rsplit(".", 1)[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = home.split(".")[: len(home.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    loaded = set()
    for target in targets & known:
        parts = target.split(".")
        loaded.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {module for module in loaded & known if module != name and not name.startswith(module + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_the_package() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, package, set(modules)) for name, (path, package) in modules.items()}
    assert _cycles(graph) == []


def test_a_real_cycle_would_be_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(SRC)))
def test_no_class_or_function_is_too_long(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            assert lines <= limit, f"{node.name} is {lines} lines"


def test_ranking_lives_in_the_search_package_not_the_mcp_layer() -> None:
    mcp_layer = {path.stem for path in (PACKAGE / "protocols" / "mcp").rglob("*.py")}
    assert mcp_layer.isdisjoint({"_ranking", "_lexical", "_search", "_engine", "_embedding", "_evaluation"})
    assert not (PACKAGE / "protocols" / "mcp" / "_embedding").exists()
    assert {"_engine", "_lexical", "_tuning", "_evaluation"} <= {
        path.stem for path in (PACKAGE / "search").glob("*.py")
    }
