"""Warm-start cache of each server's tool list, so a short-lived process has a catalog at once.

One JSON file per server, named after the server and a hash of its whole configuration: a changed
config (command, args, env, url, headers, timeouts...) hashes differently and never reuses an old
entry. The file records when it was written and the tools in `tools/list` wire shape; it holds no
config values (env and headers may carry secrets), only their hash. Writes are atomic (temporary
file in the same folder, then rename), so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

from ..._config import ServerConfig

__all__ = [
    "CACHE_FORMAT",
    "CachedToolList",
    "ToolListCache",
    "atomic_create",
    "atomic_write",
    "config_key",
    "default_cache_dir",
]

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1
"""Bumped when the file layout changes; part of the key, so old files are simply never read."""

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_SLUG_MAX = 48  # keeps file names short on every filesystem; the hash keeps them unique
_KEY_CHARS_IN_NAME = 16  # 64 bits of the hash in the file name; the full hash is checked inside


def default_cache_dir() -> Path:
    """`<user cache dir>/orchestrator/tools` (for example `~/.cache/orchestrator/tools` on Linux)."""
    return Path(platformdirs.user_cache_dir("orchestrator")) / "tools"


def config_key(name: str, config: ServerConfig) -> str:
    """Hex SHA-256 of the server's name and full config (with the resolved program for stdio)."""
    material: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "server": name,
        "config": config.model_dump(mode="json"),
    }
    if config.transport == "stdio":
        material["launch"] = config.launch_command()
    encoded = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedToolList:
    """One server's cached listing."""

    server: str
    key: str
    """`config_key` of the config the list was fetched with."""
    written_at: datetime
    """When the list was fetched and written (UTC)."""
    tools: list[dict[str, Any]]
    """Tools in `tools/list` wire shape, as the server sent them."""


class ToolListCache:
    """Reads and writes cached tool lists in one folder (default: `default_cache_dir()`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()

    def path_for(self, name: str, config: ServerConfig) -> Path:
        """The file that holds `name`'s list for exactly this config."""
        return self._path(name, config_key(name, config))

    def load(self, name: str, config: ServerConfig) -> CachedToolList | None:
        """The cached list for this server and config, or None (missing, other config, unreadable)."""
        key = config_key(name, config)
        path = self._path(name, key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable tool cache %s: %s", path, exc)
            return None
        try:
            if data["format"] != CACHE_FORMAT or data["key"] != key or data["server"] != name:
                return None
            tools = data["tools"]
            if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
                raise TypeError("'tools' is not a list of objects")
            written_at = datetime.fromisoformat(data["written_at"])
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("ignoring malformed tool cache %s: %s", path, exc)
            return None
        return CachedToolList(server=name, key=key, written_at=written_at, tools=tools)

    def store(
        self,
        name: str,
        config: ServerConfig,
        tools: Sequence[Mapping[str, Any]],
        *,
        written_at: datetime | None = None,
    ) -> CachedToolList:
        """Write the list atomically and drop this server's entries for other configs.

        Raises:
            OSError: the folder or file cannot be written (callers treat the cache as best effort).
        """
        key = config_key(name, config)
        entry = CachedToolList(
            server=name,
            key=key,
            written_at=written_at or datetime.now(UTC),
            tools=[dict(tool) for tool in tools],
        )
        payload = {
            "format": CACHE_FORMAT,
            "server": name,
            "key": key,
            "transport": config.transport,
            "written_at": entry.written_at.isoformat(),
            "tools": entry.tools,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(name, key)
        atomic_write(path, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
        self._prune(name, keep=path)
        return entry

    def _path(self, name: str, key: str) -> Path:
        return self.directory / f"{_slug(name)}-{key[:_KEY_CHARS_IN_NAME]}.json"

    def _prune(self, name: str, keep: Path) -> None:
        """Remove entries of the same server written under an older config."""
        for other in self.directory.glob(f"{_slug(name)}-*.json"):
            if other == keep:
                continue
            try:
                if json.loads(other.read_text(encoding="utf-8")).get("server") == name:
                    other.unlink()
            except (OSError, ValueError, AttributeError):
                continue  # someone else's file or a concurrent writer: leave it


def _slug(name: str) -> str:
    return _SLUG_UNSAFE.sub("_", name)[:_SLUG_MAX] or "_"


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write `data` (bytes, or text as UTF-8) to `path` through a temporary file in the same folder, an
    fsync and a rename: readers see the old file or the new one, never half of it, even after a crash.

    The one atomic write of every cache and store (tool lists, task histories, tool vectors, gateway
    state). `durable=False` skips the fsync (still atomic for readers): for records that expire anyway,
    where a crash may lose them. The temporary file (`.<name>.<random>.tmp`) is removed when anything fails.

    Raises:
        OSError: the folder or file cannot be written.
    """
    with _temporary(path, data.encode("utf-8") if isinstance(data, str) else data, durable=durable) as temp_name:
        os.replace(temp_name, path)


def atomic_create(path: Path, data: bytes) -> bool:
    """Write `data` to `path` only if no file is there, atomically (a temporary file, an fsync and a hard
    link, which fails when the name exists): of processes creating one file at once, exactly one gets
    True, and readers never see half of it. False when the file exists.

    Raises:
        OSError: the folder or file cannot be written.
    """
    with _temporary(path, data, durable=True) as temp_name:
        try:
            os.link(temp_name, path)
        except FileExistsError:
            return False
        return True


@contextlib.contextmanager
def _temporary(path: Path, data: bytes, *, durable: bool) -> Iterator[str]:
    """`data` in a temporary file beside `path` (`.<name>.<random>.tmp`, synced when `durable`), for a rename
    or a link into place; whatever still has its name afterwards is removed, even when anything failed."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        yield temp_name
    finally:
        with contextlib.suppress(OSError):  # renamed away already: nothing to remove
            os.unlink(temp_name)
