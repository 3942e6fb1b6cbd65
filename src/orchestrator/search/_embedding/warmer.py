"""Background embedding of one cache folder's tool texts, so searches never wait for a whole catalog.

A thread embeds pending texts WARM_CHUNK at a time, adds each step's vectors to the store and writes them
at least every WARM_SAVE_INTERVAL_S. Its first step takes the shortest texts; each later one a run of
texts of about one length from a random place, after dropping those another process (a replica sharing the
store) wrote meanwhile, so replicas warming the same catalog share the work instead of repeating it. It
ends when nothing is pending, or when `stop` is called (by `EmbeddingRuntime.close()`): then it finishes
its current step and saves it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..._errors import SemanticUnavailable
from .pinned import one_line

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .store import VectorStore

__all__ = ["WARM_CHUNK", "WARM_SAVE_INTERVAL_S", "Warmer"]

log = logging.getLogger(__name__)

WARM_CHUNK = 32
"""Texts per background step (about half a second): `stop` waits at most one step."""
WARM_SAVE_INTERVAL_S = 2.0
"""Background vectors are written to the cache at least this often, so a short-lived process that
stops before its catalog is embedded still leaves its progress for the next one."""


class Warmer:
    """One store's background embedding.

    Args:
        store: where the vectors go (its `lock` also guards this object's pending texts).
        embed: texts -> unit vectors, rows in order (the model's `embed_texts`).
    """

    def __init__(self, store: VectorStore, embed: Callable[[Sequence[str]], NDArray[np.float32]]) -> None:
        self._store = store
        self._embed = embed
        self._pending: dict[bytes, str] = {}
        self._queue: list[tuple[bytes, str]] = []
        """The pending texts by length (rebuilt when texts are requested); a step takes a run of it."""
        self._steps = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: SemanticUnavailable | None = None
        """Why the last run stopped early, if it failed."""

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopped(self) -> bool:
        """`stop` was called: requests are ignored from now on."""
        return self._stop.is_set()

    def request(self, texts: Mapping[bytes, str]) -> None:
        """Embed these (key -> text) unless already stored; starts the thread if needed and returns at once."""
        store = self._store
        with store.lock:
            added = {key: text for key, text in texts.items() if key not in store.known and key not in self._pending}
            if added:
                self._pending.update(added)
                self._queue = sorted(self._pending.items(), key=lambda item: len(item[1]))
            if self._pending and self._thread is None and not self._stop.is_set():
                self.error = None
                self._thread = threading.Thread(target=self._run, name="orchestrator-embed-warm", daemon=True)
                self._thread.start()

    def stop(self, timeout: float | None) -> bool:
        """Finish the current step, save, and end the thread; no new work afterwards.

        Returns False when the thread was still running after `timeout` seconds (it then saves and ends
        on its own after the step).
        """
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _run(self) -> None:
        store = self._store
        saved = time.monotonic()
        try:
            while True:
                with store.lock:
                    chunk = self._take()
                    if not chunk or self._stop.is_set():
                        self._end()
                        break
                _, found = store.read([key for key, _text in chunk])  # written by another process meanwhile
                todo = np.setdiff1d(np.arange(len(chunk)), found).tolist()
                vectors = self._embed([chunk[i][1] for i in todo]) if todo else None
                with store.lock:
                    for key, _text in chunk:
                        self._pending.pop(key, None)
                    if vectors is None:  # all written by another process: news for searches all the same
                        store.generation += 1
                        store.changed.notify_all()
                    else:
                        store.add({chunk[i][0]: vector for i, vector in zip(todo, vectors, strict=True)})
                if time.monotonic() - saved >= WARM_SAVE_INTERVAL_S:
                    store.flush()
                    saved = time.monotonic()
        except Exception as exc:  # boundary: a failed background run must end as a reported fallback
            error = exc if isinstance(exc, SemanticUnavailable) else SemanticUnavailable("embed_failed", one_line(exc))
            log.warning("background embedding of %d tool texts failed: %s", len(self._pending), error.reason)
            with store.lock:
                self.error = error
                self._pending.clear()
                self._queue.clear()
                self._end()
        store.flush()  # what the run embedded, once it no longer counts as running (`wait` flushes too)

    def _end(self) -> None:
        """The run is over (hold the store's lock): no longer `running`, and waiters woken."""
        self._thread = None
        self._store.changed.notify_all()

    def _take(self) -> list[tuple[bytes, str]]:
        """The next step's texts, taken off the queue: the shortest first, then a run from a random place.
        Hold the store's lock."""
        queue = self._queue
        while queue:
            first = self._steps == 0 or len(queue) <= WARM_CHUNK
            start = 0 if first else random.randrange(len(queue) - WARM_CHUNK + 1)
            self._steps += 1
            chunk = [item for item in queue[start : start + WARM_CHUNK] if item[0] in self._pending]
            del queue[start : start + WARM_CHUNK]
            if chunk:
                return chunk
        return []
