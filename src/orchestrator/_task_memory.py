"""Task memory: the tools earlier spawns of *similar* tasks called, pinned for a new spawn.

`TaskHistory` pins what earlier spawns of the same task id called. Task memory generalises it: a finished
spawn's task text (redacted) and the tools it called without error are kept in one store record
(`taskmemory/index`, the MAX_TASKS most recent tasks, shared by replicas), and a new spawn whose task
resembles earlier ones (binary tf-idf cosine of their words at least SIMILAR_TASK_FLOOR) gets the tools
those tasks called pinned, best supported first, so it needs no search round for them. A tool is offered
only once `min_spawns` distinct spawns called it (one spawn cannot steer another's plan); the gateway
keeps the offered tools within the profile's `directory_budget_tokens` of schemas.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ._config import TraceSettings
from ._redaction import redact
from ._store import Store, StoreError

__all__ = ["MAX_TASKS", "SIMILAR_TASK_FLOOR", "TaskMemory"]

KEY = "taskmemory/index"
MAX_TASKS = 500
"""Tasks remembered (the most recently finished); the record stays a few hundred kilobytes."""
TASK_CHARS = 600
"""Task text kept per task: what it is about is said first."""
SPAWNS_KEPT = 16
"""Spawn ids kept per tool of a task (enough to count `min_spawns`)."""
SIMILAR_TASK_FLOOR = 0.5
"""Task similarity (binary tf-idf cosine) from which an earlier task's tools are offered."""

_WORD = re.compile(r"[^\W\d_]{2,}")
_STOP = frozenset(
    "a an and are as at be by can could do for from have how i in is it me my of on or our please should "
    "that the then this to we what when where which will with would you your".split()
)


def _words(text: str) -> set[str]:
    return {word for word in (match.lower() for match in _WORD.findall(text)) if word not in _STOP}


class TaskMemory:
    """Earlier tasks and the tools their spawns called, in a `Store`, for similar-task pins.

    Args:
        store: shared by replicas (files, or Redis).
        settings: `mcp.tool_search.traces` (`min_spawns`, `retention_days`).
        clock: Unix time now.

    The one record is replaced whole: replicas finishing spawns at the same instant may lose one task's
    update. Failures of the store are swallowed (memory is an optimisation). Thread-safe.
    """

    def __init__(
        self, store: Store, settings: TraceSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings or TraceSettings()
        self._clock = clock
        self._lock = threading.Lock()

    def _tasks(self) -> list[dict[str, Any]]:
        try:
            record = self.store.get(KEY)
        except (OSError, ValueError, StoreError):  # boundary: no store, no memory
            return []
        tasks = record.get("tasks") if isinstance(record, dict) else None
        if not isinstance(tasks, list):
            return []
        horizon = self._clock() - self.settings.retention_days * 86_400.0
        return [
            task
            for task in tasks
            if isinstance(task, dict)
            and isinstance(task.get("text"), str)
            and isinstance(task.get("tools"), dict)
            and isinstance(task.get("at"), int | float)
            and task["at"] >= horizon
        ]

    def learn(self, task_id: str, task: str, spawn: str, called: Iterable[str]) -> None:
        """Remember that `spawn` of task `task_id` (text `task`) called `called` without error."""
        called = list(dict.fromkeys(called))
        if not called or not task.strip():
            return
        with self._lock:
            known = self._tasks()
            tasks = [entry for entry in known if entry.get("id") != task_id]
            previous = next((entry for entry in known if entry.get("id") == task_id), None)
            tools: dict[str, list[str]] = dict(previous["tools"]) if previous is not None else {}
            for name in called:
                spawns = [str(each) for each in tools.get(name, []) if each != spawn]
                tools[name] = [*spawns, spawn][-SPAWNS_KEPT:]
            tasks.append({"id": task_id, "text": redact(task[:TASK_CHARS]), "at": self._clock(), "tools": tools})
            try:
                self.store.put(KEY, {"tasks": tasks[-MAX_TASKS:]}, ttl_s=self.settings.retention_days * 86_400.0)
            except (OSError, StoreError):  # boundary: a store that is down must not fail a spawn
                pass

    def similar_tools(self, task: str, *, exclude: str | None = None) -> list[str]:
        """Tools earlier similar tasks called, best supported first (summed similarity of the tasks that
        called each), each called by at least `min_spawns` distinct spawns; `exclude` leaves out a task id
        (its own history pins it already)."""
        tasks = [entry for entry in self._tasks() if entry.get("id") != exclude]
        query = _words(task)
        if not tasks or not query:
            return []
        documents = [_words(entry["text"]) for entry in tasks]
        frequency: dict[str, int] = {}
        for words in documents:
            for word in words:
                frequency[word] = frequency.get(word, 0) + 1
        size = len(documents)

        def weights(words: set[str]) -> dict[str, float]:
            # A word no earlier task has weighs as one that a single task has: it says something about this
            # task, but not more than the rarest shared word does.
            found = {word: math.log(1 + (size + 1) / (frequency.get(word, 1) + 0.5)) for word in words}
            norm = math.sqrt(sum(value * value for value in found.values()))
            return {word: value / norm for word, value in found.items()} if norm else {}

        wanted = weights(query)
        support: dict[str, float] = {}
        spawns: dict[str, set[str]] = {}
        for entry, words in zip(tasks, documents, strict=True):
            other = weights(words)
            similarity = sum(value * other.get(word, 0.0) for word, value in wanted.items())
            if similarity < SIMILAR_TASK_FLOOR:
                continue
            for name, callers in entry["tools"].items():
                if isinstance(name, str) and isinstance(callers, list):
                    support[name] = support.get(name, 0.0) + similarity
                    spawns.setdefault(name, set()).update(str(each) for each in callers)
        chosen = [name for name in support if len(spawns[name]) >= self.settings.min_spawns]
        return sorted(chosen, key=lambda name: (-support[name], name))
