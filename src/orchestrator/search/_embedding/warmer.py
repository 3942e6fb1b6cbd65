"""Background embedding of one cache folder's tool texts, so searches never wait for a whole catalog.

A thread embeds pending texts, shortest first, WARM_CHUNK at a time, adds each step's vectors to the
store and writes the file at least every WARM_SAVE_INTERVAL_S. It ends when nothing is pending, or when
`stop` is called (by `EmbeddingRuntime.close()`): then it finishes its current step and saves it.
"""

from __future__ import annotations

import logging
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
            rows = store.rows()
            self._pending.update((key, text) for key, text in texts.items() if key not in rows)
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
                    rows = store.rows()
                    for key in [key for key in self._pending if key in rows]:
                        del self._pending[key]
                    if not self._pending or self._stop.is_set():
                        self._finish()
                        return
                    chunk = sorted(self._pending.items(), key=lambda item: len(item[1]))[:WARM_CHUNK]
                vectors = self._embed([text for _key, text in chunk])
                with store.lock:
                    for key, _text in chunk:
                        self._pending.pop(key, None)
                    save = time.monotonic() - saved >= WARM_SAVE_INTERVAL_S
                    store.add({key: vector for (key, _text), vector in zip(chunk, vectors, strict=True)}, save=save)
                    if save:
                        saved = time.monotonic()
        except Exception as exc:  # boundary: a failed background run must end as a reported fallback
            error = exc if isinstance(exc, SemanticUnavailable) else SemanticUnavailable("embed_failed", one_line(exc))
            log.warning("background embedding of %d tool texts failed: %s", len(self._pending), error.reason)
            with store.lock:
                self.error = error
                self._pending.clear()
                self._finish()

    def _finish(self) -> None:
        """End of the thread (hold the store's lock): save what is unsaved and wake waiters."""
        if self._store.dirty:
            self._store.write()
        self._thread = None
        self._store.changed.notify_all()
