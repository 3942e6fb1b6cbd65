"""Shared fixtures. Area-specific fixtures live next to their tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = Path(__file__).resolve().parent


def _shared_data_dir() -> Path:
    override = os.environ.get("ORCHESTRATOR_SHARED_DATA")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (real catalogs and retrieval sets); skips when this checkout has none beside it."""
    path = _shared_data_dir()
    if not (path / "catalogs").is_dir():
        pytest.skip(f"shared data not found at {path} (set ORCHESTRATOR_SHARED_DATA)")
    return path
