"""One cache folder's tool vectors: read from the store, else embedded now or in the background.

vectors = ToolVectors(model, folder)     the model (shared) + this folder's VectorStore and Warmer
vectors.embed_tools({name: text})        cached rows, only new or changed texts reach the model
vectors.warm(texts); vectors.wait(keys)  background embedding, and waiting for it
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .model import DIMENSION, SemanticScorer
from .store import VectorStore
from .warmer import Warmer

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..._errors import SemanticUnavailable

__all__ = ["ToolVectors"]

K = TypeVar("K")


class ToolVectors:
    """Vectors of tool texts for one cache folder (None: memory only), over a shared loaded model.

    Thread-safe. `close` stops the background embedding after its current step and saves it.
    """

    def __init__(self, model: SemanticScorer, cache_dir: Path | str | None) -> None:
        self.model = model
        self._store = VectorStore(Path(cache_dir) if cache_dir is not None else None, model.model_id)
        self._count_lock = threading.Lock()
        self._warmer = Warmer(self._store, self._embed)
        self.texts_embedded = 0
        """Tool texts this folder sent to the model (inside searches and in the background)."""

    @property
    def cache_path(self) -> Path | None:
        """The vector cache file (None: vectors kept in memory only)."""
        return self._store.path

    def _embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = self.model.embed_texts(texts)
        with self._count_lock:
            self.texts_embedded += len(texts)
        return vectors

    def keys(self, texts: Iterable[str]) -> list[bytes]:
        """Cache keys of `texts` (sha256 of the model id and the text)."""
        return [self._store.key(text) for text in texts]

    def cached(self, keys: Sequence[bytes]) -> tuple[NDArray[np.float32] | None, list[int]]:
        """(matrix of the keys' vectors, []) when every one is cached, else (None, positions missing)."""
        store = self._store
        with store.lock:
            rows = store.rows()
            missing = [i for i, key in enumerate(keys) if key not in rows]
            if missing:
                return None, missing
            if not keys:
                return np.zeros((0, DIMENSION), np.float32), []
            return np.stack([rows[key] for key in keys]), []

    def embed_tools(self, texts: Mapping[K, str]) -> NDArray[np.float32]:
        """Unit vectors of the tool texts, rows in the mapping's order; only uncached texts hit the model.

        New vectors are written to the cache folder (atomically) before returning.
        """
        values = list(texts.values())
        return self.embed_keys(self.keys(values), values)

    def embed_keys(self, keys: Sequence[bytes], texts: Sequence[str]) -> NDArray[np.float32]:
        """`embed_tools` with the keys already computed (the blend keeps them per catalog version)."""
        store = self._store
        with store.lock:
            rows = store.rows()
            missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in rows}
        if missing:
            vectors = self._embed(list(missing.values()))  # outside the lock: searches keep reading
            with store.lock:
                store.add(dict(zip(missing, vectors, strict=True)), first=keys)
        matrix, _ = self.cached(keys)
        assert matrix is not None  # vectors are never dropped from memory
        return matrix

    def warm(self, texts: Mapping[bytes, str]) -> None:
        """Embed these (key -> text) in this folder's background thread; returns at once.

        Vectors land in the cache (memory, and the file at least every WARM_SAVE_INTERVAL_S); `wait`
        blocks until given keys are there. Ignored once `close` was called.
        """
        self._warmer.request(texts)

    @property
    def warming(self) -> bool:
        """The background thread is embedding."""
        return self._warmer.running

    @property
    def warm_error(self) -> SemanticUnavailable | None:
        """Why the last background embedding stopped early, if it failed."""
        return self._warmer.error

    @property
    def generation(self) -> int:
        """Changes whenever vectors are added to this folder's cache."""
        return self._store.generation

    def wait(self, keys: Sequence[bytes], timeout: float | None = None) -> bool:
        """Block until every key is cached (True), the timeout passes or the background stops (False).

        Raises:
            SemanticUnavailable: the background embedding failed (`embed_failed`).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._store
        with store.changed:
            while True:
                rows = store.rows()
                if all(key in rows for key in keys):
                    return True
                if self._warmer.error is not None:
                    raise self._warmer.error
                if not self._warmer.running:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                store.changed.wait(remaining)

    def stop(self) -> None:
        """Ask the background thread to end after its current step (no new work afterwards); returns at once."""
        self._warmer.stop(0)

    def close(self, timeout: float | None) -> bool:
        """Stop the background embedding and save what it embedded; False if its step outlasted `timeout`."""
        done = self._warmer.stop(timeout)
        if done:
            with self._store.lock:
                if self._store.dirty:
                    self._store.write()
        return done
