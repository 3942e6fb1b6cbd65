"""Model files come from installed registry packages and are read only after their sha256 matches the
pinned one; failures become one log line.

Shared by both models of the sentence vectors (`model`, `multilingual`).
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

from ..._errors import SemanticUnavailable

__all__ = ["check_hash", "one_line", "package_folder"]

_HASH_CHUNK = 1 << 20


def package_folder(module: str, what: str) -> Path:
    """The folder of the installed package `module` (which ships `what`, named in the error).

    Raises:
        SemanticUnavailable: `missing_extra` when the package is not installed.
    """
    try:
        package = importlib.import_module(module)
    except ImportError as exc:
        raise SemanticUnavailable(
            "missing_extra",
            f"the {what} package is not installed ({exc}); it is part of orchestrator's base install: reinstall it",
        ) from exc
    return Path(str(package.__file__)).resolve().parent


def check_hash(path: Path, expected: str, what: str) -> None:
    """Refuse a file whose sha256 is not `expected` (`hash_mismatch`), or that cannot be read (`load_failed`)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
                digest.update(chunk)
    except OSError as exc:
        raise SemanticUnavailable("load_failed", f"cannot read {what} {path}: {exc}") from exc
    actual = digest.hexdigest()
    if actual != expected:
        raise SemanticUnavailable(
            "hash_mismatch", f"{what} {path} has sha256 {actual[:16]}..., expected {expected[:16]}..."
        )


def one_line(exc: BaseException) -> str:
    """An exception as one short log line (onnxruntime's messages span lines)."""
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
