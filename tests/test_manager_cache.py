"""The warm-start tool-list cache on its own: keys, atomic writes, stale and broken entries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import ServerConfig
from orchestrator.protocols.mcp._cache import CACHE_FORMAT, ToolListCache, config_key, default_cache_dir

TOOLS = [{"name": "echo", "description": "Echo.", "inputSchema": {"type": "object"}}]


def _config(**changes: object) -> ServerConfig:
    base: dict[str, object] = {"command": "python", "args": ["-m", "some_server"], "env": {"TOKEN": "secret"}}
    return ServerConfig.model_validate({**base, **changes})


@pytest.mark.parametrize(
    "change",
    [
        {"args": ["-m", "other_server"]},
        {"env": {"TOKEN": "rotated"}},
        {"cwd": "/tmp"},
        {"startup_timeout_s": 3},
        {"transport": "http", "url": "http://127.0.0.1:1/mcp", "command": None},
    ],
)
def test_any_config_change_gives_a_different_key(change: dict[str, object]) -> None:
    assert config_key("srv", _config(**change)) != config_key("srv", _config())


def test_the_key_depends_on_the_server_name_and_is_stable() -> None:
    assert config_key("a", _config()) == config_key("a", _config())
    assert config_key("a", _config()) != config_key("b", _config())


def test_a_stored_list_loads_back_with_when_it_was_written(tmp_path: Path) -> None:
    cache = ToolListCache(tmp_path)
    written_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    cache.store("srv", _config(), TOOLS, written_at=written_at)
    entry = cache.load("srv", _config())
    assert entry is not None
    assert (entry.server, entry.tools, entry.written_at) == ("srv", TOOLS, written_at)
    data = json.loads(cache.path_for("srv", _config()).read_text())
    assert data["written_at"] == "2026-01-02T03:04:05+00:00"
    assert data["format"] == CACHE_FORMAT
    assert "secret" not in cache.path_for("srv", _config()).read_text()  # config values are only hashed


def test_a_changed_config_misses_and_its_store_replaces_the_old_entry(tmp_path: Path) -> None:
    cache = ToolListCache(tmp_path)
    cache.store("srv", _config(), TOOLS)
    changed = _config(args=["-m", "other_server"])
    assert cache.load("srv", changed) is None
    cache.store("srv", changed, TOOLS[:0])
    assert [p.name for p in tmp_path.iterdir()] == [cache.path_for("srv", changed).name]
    assert cache.load("srv", _config()) is None


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path: Path) -> None:
    cache = ToolListCache(tmp_path / "nested" / "dir")
    for index in range(5):
        cache.store("srv", _config(), [*TOOLS, {"name": f"t{index}"}])
    files = list((tmp_path / "nested" / "dir").iterdir())
    assert [f.suffix for f in files] == [".json"]
    entry = cache.load("srv", _config())
    assert entry is not None and entry.tools[-1] == {"name": "t4"}


@pytest.mark.parametrize("content", ["{not json", '{"format": 1}', '{"format": 1, "server": "srv"}', "[]"])
def test_a_broken_cache_file_is_ignored(tmp_path: Path, content: str) -> None:
    cache = ToolListCache(tmp_path)
    cache.path_for("srv", _config()).write_text(content)
    assert cache.load("srv", _config()) is None


def test_servers_with_odd_names_get_safe_distinct_files(tmp_path: Path) -> None:
    cache = ToolListCache(tmp_path)
    cache.store("a/b", _config(), TOOLS)
    cache.store("a b", _config(), TOOLS)
    assert len(list(tmp_path.iterdir())) == 2
    assert all("/" not in p.name for p in tmp_path.iterdir())
    assert cache.load("a/b", _config()) is not None and cache.load("a b", _config()) is not None


def test_the_default_folder_is_under_the_user_cache_dir() -> None:
    assert default_cache_dir().parts[-2:] == ("orchestrator", "tools")
