"""The public API is exactly `orchestrator.__all__`; everything else lives in internal `_` modules (httpx's rule)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

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
