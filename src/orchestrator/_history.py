"""Task history: the tools each task called, so its later spawns get them pinned.

One small JSON file per task in the cache root's `tasks/` folder, written atomically; a spawn in
another process (the cold path) sees what earlier spawns of the task called. Blocking file I/O: the
gateway calls it off its event loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ._config import Settings
from ._planning import RECENT_TOOLS_LIMIT
from .protocols.mcp._cache import atomic_write

__all__ = ["TaskHistory"]


class TaskHistory:
    """The tools each task called, most recent first, so its later spawns get them pinned.

    Kept in memory and, when `folder` is given, in one small JSON file per task, so a spawn in another
    process (the cold path) sees what earlier spawns of the task called. Last writer wins.
    """

    def __init__(self, folder: Path | None = None, *, limit: int = RECENT_TOOLS_LIMIT) -> None:
        self._folder = folder
        self._limit = limit
        self._memory: dict[str, list[str]] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> TaskHistory:
        """Kept on disk in the cache root's `tasks/` folder (`mcp.cache_dir`)."""
        return cls(settings.mcp.task_history_dir())

    def recent(self, task_id: str) -> list[str]:
        """Most recently called first."""
        if task_id in self._memory:
            return list(self._memory[task_id])
        names = self._read(task_id)
        self._memory[task_id] = names
        return list(names)

    def record(self, task_id: str, called: Iterable[str]) -> list[str]:
        """Add tools called (oldest first, as `MetaStats.called` lists them); returns the new history."""
        names = list(self.recent(task_id))
        for name in called:
            if name in names:
                names.remove(name)
            names.insert(0, name)
        names = names[: self._limit]
        self._memory[task_id] = names
        self._write(task_id, names)
        return list(names)

    def _path(self, task_id: str) -> Path | None:
        if self._folder is None:
            return None
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in task_id)[:100] or "_"
        return self._folder / f"{safe}.json"

    def _read(self, task_id: str) -> list[str]:
        path = self._path(task_id)
        if path is None:
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # no history yet, or a damaged file: start afresh
            return []
        names = data.get("recent") if isinstance(data, dict) else None
        return [name for name in names if isinstance(name, str)][: self._limit] if isinstance(names, list) else []

    def _write(self, task_id: str, names: list[str]) -> None:
        path = self._path(task_id)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps({"task_id": task_id, "recent": names}))
        except OSError:  # boundary: history is an optimisation; a read-only cache must not fail a spawn
            pass
