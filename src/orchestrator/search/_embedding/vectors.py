"""One store's tool vectors: read from the store, else embedded now or in the background.

vectors = ToolVectors(model, folder)        the model (shared) + the folder's VectorStore and Warmer
vectors = ToolVectors(model, store=store)   the same over a Store (Redis: replicas share the vectors)
vectors.embed_tools({name: text})           cached rows, only new or changed texts reach the model
vectors.warm(texts); vectors.wait(keys)     background embedding, and waiting for it
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..._store import FileStore, MemoryStore, RedisStore
from ..._urls import redacted_url
from .model import DIMENSION, SemanticScorer
from .store import CACHE_NAME, VectorStore
from .warmer import Warmer

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..._errors import SemanticUnavailable
    from ..._store import Store

__all__ = ["ToolVectors"]

K = TypeVar("K")


class ToolVectors:
    """Vectors of tool texts in one store, over a shared loaded model.

    Thread-safe. `close` stops the background embedding after its current step and saves it.

    Args:
        model: the loaded model.
        cache_dir: a folder of vector packs (a `FileStore`'s), shared by the processes of one machine;
            None with no `store` keeps vectors in memory only.
        store: a Store to share vectors through instead (Redis: every replica; the caller closes it).
    """

    def __init__(
        self, model: SemanticScorer, cache_dir: Path | str | None = None, *, store: Store | None = None
    ) -> None:
        self.model = model
        self.cache_path: Path | None = None
        """The folder of the vector packs (None: in memory or another store)."""
        if store is None and cache_dir is not None:
            store = FileStore(Path(cache_dir))
            self.cache_path = Path(cache_dir) / CACHE_NAME
        where = str(self.cache_path) if self.cache_path is not None else _describe(store)
        self._store = VectorStore(store if store is not None else MemoryStore(), model.model_id, where)
        self._count_lock = threading.Lock()
        self._warmer = Warmer(self._store, self._embed)
        self.texts_embedded = 0
        """Tool texts these vectors sent to the model (inside searches and in the background)."""

    @property
    def where(self) -> str:
        """Where the vectors are shared, for logs: the pack folder, the Redis URL, or `memory`."""
        return self._store.where

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
        matrix, found = self._store.read(keys)
        if len(found) < len(keys):
            present = set(found.tolist())
            return None, [i for i in range(len(keys)) if i not in present]
        return matrix.reshape(len(keys), DIMENSION), []

    def known(self, keys: Sequence[bytes]) -> bool:
        """Every key was embedded by this process or found in the store (no store read)."""
        with self._store.lock:
            return all(key in self._store.known for key in keys)

    def read(self, keys: Sequence[bytes]) -> tuple[NDArray[np.float32], NDArray[np.intp]]:
        """The cached vectors among `keys` and their positions in `keys` (ascending), without embedding."""
        return self._store.read(keys)

    def embed_tools(self, texts: Mapping[K, str]) -> NDArray[np.float32]:
        """Unit vectors of the tool texts, rows in the mapping's order; only uncached texts hit the model.

        New vectors are written to the store before returning.
        """
        values = list(texts.values())
        return self.embed_keys(self.keys(values), values)

    def embed_keys(self, keys: Sequence[bytes], texts: Sequence[str]) -> NDArray[np.float32]:
        """`embed_tools` with the keys already computed (the blend keeps them per catalog version)."""
        out = np.empty((len(keys), DIMENSION), np.float32)
        cached, found = self._store.read(keys)
        out[found] = cached
        missing = np.setdiff1d(np.arange(len(keys)), found).tolist()
        if missing:
            vectors = self._embed([texts[i] for i in missing])  # outside the lock: searches keep reading
            out[missing] = vectors
            with self._store.lock:
                self._store.add(dict(zip([keys[i] for i in missing], vectors, strict=True)))
            self._store.flush()
        return out

    def warm(self, texts: Mapping[bytes, str]) -> None:
        """Embed these (key -> text) in the background thread; returns at once.

        Vectors land in memory, and in the store at least every WARM_SAVE_INTERVAL_S; `wait`
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
        """Changes whenever this process adds vectors."""
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
                if all(key in store.known for key in keys):
                    embedded = True
                    break
                if self._warmer.error is not None:
                    raise self._warmer.error
                if not self._warmer.running:
                    embedded = False
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                store.changed.wait(remaining)
        if not embedded:  # the background stopped: perhaps another process wrote them
            _, found = store.read(keys)
            return len(found) == len(keys)
        store.flush()  # in the store now, for every other process too
        return True

    def stop(self) -> None:
        """Ask the background thread to end after its current step (no new work afterwards); returns at once."""
        self._warmer.stop(0)

    def close(self, timeout: float | None) -> bool:
        """Stop the background embedding and save what it embedded; False if its step outlasted `timeout`."""
        done = self._warmer.stop(timeout)
        if done:
            self._store.flush()
        return done


def _describe(store: Store | None) -> str:
    if isinstance(store, RedisStore):
        return redacted_url(store.url)
    if isinstance(store, FileStore):
        return str(store.root / CACHE_NAME)
    return "memory"
