"""Task history: the tools each task called, so its later spawns get them pinned.

One small record per task in the store (`tasks/<task id>`): by default a JSON file in the cache root's
`tasks/` folder, so a spawn in another process (the cold path) sees what earlier spawns of the task
called; with `store.url` in Redis, so gateway replicas on several machines see it too. Blocking I/O:
the gateway calls it off its event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ._config import Settings
from ._planning import RECENT_TOOLS_LIMIT
from ._store import FileStore, MemoryStore, Store, StoreError, open_store

__all__ = ["TaskHistory"]


class TaskHistory:
    """The tools each task called, most recent first, so its later spawns get them pinned.

    Args:
        store: where the records live. A `Store`; a folder (one `<task>.json` file per task in it, as
            before the store existed); or None, in memory for this process only.
        namespace: the store namespace of the records (`tasks`: the cache root's `tasks/` folder).
        limit: most tools kept per task.

    Read through on every call (no copy in memory), so replicas sharing a store see each other's
    records. Last writer wins.
    """

    def __init__(
        self, store: Store | Path | None = None, *, namespace: str = "tasks", limit: int = RECENT_TOOLS_LIMIT
    ) -> None:
        if isinstance(store, Path):  # <folder>/<task>.json, as before the store existed
            namespace = store.name
            store = FileStore(store.parent)
        self.store: Store = store if store is not None else MemoryStore()
        self._namespace = namespace
        self._limit = limit

    @classmethod
    def from_settings(cls, settings: Settings, store: Store | None = None) -> TaskHistory:
        """In `store`, else the store `settings` name (files under `mcp.cache_dir`, or `store.url`)."""
        return cls(store if store is not None else open_store(settings))

    def recent(self, task_id: str) -> list[str]:
        """Most recently called first."""
        try:
            data = self.store.get(self._key(task_id))
        except (OSError, ValueError, StoreError):  # boundary: history is an optimisation; no store, no history
            return []
        names = data.get("recent") if isinstance(data, dict) else None
        return [name for name in names if isinstance(name, str)][: self._limit] if isinstance(names, list) else []

    def record(self, task_id: str, called: Iterable[str]) -> list[str]:
        """Add tools called (oldest first, as `MetaStats.called` lists them); returns the new history."""
        names = self.recent(task_id)
        for name in called:
            if name in names:
                names.remove(name)
            names.insert(0, name)
        names = names[: self._limit]
        try:
            self.store.put(self._key(task_id), {"task_id": task_id, "recent": names})
        except (OSError, StoreError):  # boundary: a read-only cache or a store that is down must not fail a spawn
            pass
        return list(names)

    def _key(self, task_id: str) -> str:
        return f"{self._namespace}/{task_id or '_'}"
