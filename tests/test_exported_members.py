"""The public API is exactly `orchestrator.__all__`; everything else lives in internal `_` modules (httpx's rule)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TypeVar, TypeVarTuple, get_origin

import orchestrator


def test_all_exports_resolve_and_nothing_else_is_public() -> None:
    # A subpackage appears as an attribute once imported (`protocols`): internal by its docstring and test below.
    public = {
        name
        for name in dir(orchestrator)
        if not name.startswith("_") and not isinstance(getattr(orchestrator, name), ModuleType)
    }
    assert public == set(orchestrator.__all__), "exported names must be exactly __all__"
    assert orchestrator.__all__ == sorted(orchestrator.__all__)
    for name in orchestrator.__all__:
        value = getattr(orchestrator, name)
        assert value is not None
        if get_origin(value) is not None:  # a type alias (`Literal[...]`, `Callable[...]`): defined by typing
            assert name in vars(sys.modules[orchestrator._EXPORTS[name].replace(".", "orchestrator.", 1)]), name
            continue
        module = getattr(value, "__module__", "")
        assert module.startswith("orchestrator."), (name, module)


def test_the_error_tree_is_exported_whole() -> None:
    errors = [
        getattr(orchestrator, name)
        for name in orchestrator.__all__
        if name.endswith(("Error", "Timeout", "Unavailable"))
    ]
    assert all(issubclass(error, orchestrator.OrchestratorError) for error in errors)
    from orchestrator import _errors

    assert set(_errors.__all__) <= set(orchestrator.__all__)


def test_every_module_below_the_package_is_internal() -> None:
    for info in pkgutil.walk_packages(orchestrator.__path__, prefix="orchestrator."):
        parts = info.name.split(".")[1:]
        if parts in (["protocols"], ["protocols", "mcp"], ["search"]):
            continue  # namespaces only: each says so and holds only `_` modules
        assert any(part.startswith("_") for part in parts), f"{info.name} is public by path; prefix it with _"
    for namespace in ("orchestrator.protocols", "orchestrator.protocols.mcp", "orchestrator.search"):
        module = importlib.import_module(namespace)
        assert not [name for name in vars(module) if not name.startswith("_") and name != "mcp"], namespace


def test_importing_the_package_is_cheap() -> None:
    """Names resolve on first use, so `import orchestrator` pulls in neither the MCP SDK nor numpy."""
    code = "import sys, orchestrator; print(sorted(m for m in ('mcp', 'numpy', 'onnxruntime', 'tiktoken') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def _names_in_module(module: ModuleType) -> tuple[ast.Module, dict[str, str]]:
    """A module's syntax tree, and where each name it binds at top level comes from (imports under
    TYPE_CHECKING included)."""
    path = Path(str(module.__file__))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    home = module.__name__ if path.name == "__init__.py" else module.__name__.rsplit(".", 1)[0]
    origins: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = home.split(".")[: len(home.split(".")) - (node.level - 1)] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            origins.update({alias.asname or alias.name: source for alias in node.names})
        elif isinstance(node, ast.ClassDef) and node.col_offset == 0:
            origins[node.name] = module.__name__
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.col_offset == 0:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            origins.update({target.id: module.__name__ for target in targets if isinstance(target, ast.Name)})
    return tree, origins


def _annotation_names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _annotation_names(ast.parse(node.value, mode="eval").body)
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child is not node:
            found |= _annotation_names(child)
    return found


def _public_annotations(definition: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr | None]:
    """Annotations of a function's parameters and result, or of a class's bases, public fields and public
    methods (its constructor included)."""

    def of(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr | None]:
        arguments = function.args
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        parameters += [extra for extra in (arguments.vararg, arguments.kwarg) if extra is not None]
        return [parameter.annotation for parameter in parameters] + [function.returns]

    if not isinstance(definition, ast.ClassDef):
        return of(definition)
    found: list[ast.expr | None] = list(definition.bases)
    for member in definition.body:
        if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
            if not member.name.startswith("_") or member.name == "__init__":
                found += of(member)
        elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
            if not member.target.id.startswith("_"):
                found.append(member.annotation)
    return found


def test_the_public_api_closes_over_itself() -> None:
    """Every project type in an exported signature (parameters, results, public fields, bases) is exported
    too, so a user can name what the API hands them. Private helpers (`_Model`, `${VAR}`-expanded str
    aliases) and type variables are implementation details."""
    exported = set(orchestrator.__all__)
    leaks = set()
    for name in sorted(exported):
        value = getattr(orchestrator, name)
        module = sys.modules.get(getattr(value, "__module__", ""))
        if module is None or not module.__name__.startswith("orchestrator."):
            continue  # a type alias of builtins
        tree, origins = _names_in_module(module)
        definitions = [
            node
            for node in tree.body
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        ]
        for definition in definitions:
            for annotation in _public_annotations(definition):
                for used in _annotation_names(annotation):
                    origin = origins.get(used, "")
                    private = used.startswith("_") or isinstance(getattr(module, used, None), TypeVar | TypeVarTuple)
                    if origin.startswith("orchestrator") and used not in exported and not private:
                        leaks.add(f"{name} uses {used} ({origin})")
    assert sorted(leaks) == []
