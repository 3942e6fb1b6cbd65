"""Tool vectors in the store, keyed by sha256(model id + text): embedded once, read by every process that
shares the store.

Each vector is DIMENSION little-endian float32 values, a binary record under its 32-byte key in the store's
namespace `vectors` (`Store.put_blobs`): pack files in the cache folder for processes on one machine
(`FileStore`), or Redis (`store.url`) for replicas anywhere. A record of the wrong size, or not a unit
vector, is ignored like a missing one, and a store that fails is logged once and answers nothing: a
damaged cache only costs re-embedding, never an error. Vectors this process embedded stay in memory until
they are written.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..._store import StoreError
from .model import DIMENSION

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..._store import Store

__all__ = ["CACHE_LIMIT", "CACHE_NAME", "READ_CHUNK", "VectorStore"]

log = logging.getLogger(__name__)

CACHE_NAME = "vectors"
"""The store namespace of the tool vectors (with a FileStore, the folder of its pack files)."""
CACHE_LIMIT = 150_000
"""Most vectors a store keeps (about 540 MB at 896 float32 each): room for a 100,000-tool catalog and the
texts its servers had before; the least recently written go first."""
READ_CHUNK = 4_096
"""Vectors read from the store at a time: reading 100,000 never holds more than a few MB of records."""
_UNIT_TOLERANCE = 1e-3
"""A stored vector whose length is further than this from 1 is damaged."""
_RECORD_BYTES = DIMENSION * 4


class VectorStore:
    """The vectors of one store, and the ones this process embedded that are not written yet.

    `lock` guards the unsaved vectors and `known`; `changed` is notified whenever vectors are added.

    Args:
        store: where vectors are shared (a FileStore of the cache folder, Redis, or a MemoryStore).
        model_id: part of every key, so another model never reads these vectors.
        where: how logs name the store (its folder or URL).
    """

    def __init__(self, store: Store, model_id: str, where: str) -> None:
        self.store = store
        self.where = where
        self._model_id = model_id.encode()
        self._unsaved: dict[bytes, NDArray[np.float32]] = {}
        self.known: set[bytes] = set()
        """Keys this process embedded or found in the store: what `wait` checks without a store read."""
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        # One flush at a time: two at once (the warmer's and a waiter's) would both write the same vectors.
        self._flushing = threading.Lock()
        self.generation = 0
        """Bumped (under `lock`) whenever this process adds vectors."""
        self._failed: set[str] = set()

    @property
    def dirty(self) -> bool:
        """Vectors were added since the store was last written."""
        return bool(self._unsaved)

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self._model_id + b"\0" + text.encode("utf-8", "surrogatepass")).digest()

    def read(self, keys: Sequence[bytes]) -> tuple[NDArray[np.float32], NDArray[np.intp]]:
        """The stored vectors among `keys` (rows) and their positions in `keys` (ascending): this process's
        unsaved ones, then the store's, READ_CHUNK at a time. Do not hold `lock`."""
        parts: list[tuple[NDArray[np.intp], NDArray[np.float32]]] = []
        with self.lock:
            mine = [(position, self._unsaved[key]) for position, key in enumerate(keys) if key in self._unsaved]
        if mine:
            parts.append((np.array([p for p, _v in mine], np.intp), np.stack([v for _p, v in mine])))
        taken = {position for position, _vector in mine}
        rest = [position for position in range(len(keys)) if position not in taken]
        found: list[bytes] = []
        for start in range(0, len(rest), READ_CHUNK):
            chunk = rest[start : start + READ_CHUNK]
            positions, vectors = _decoded(chunk, self._get([keys[p] for p in chunk]))
            parts.append((positions, vectors))
            found.extend(keys[p] for p in positions.tolist())
        if found:
            with self.lock:
                self.known.update(found)
        if not parts:
            return np.zeros((0, DIMENSION), np.float32), np.zeros(0, np.intp)
        positions = np.concatenate([p for p, _v in parts])
        order = np.argsort(positions, kind="stable")
        return np.concatenate([v for _p, v in parts])[order], positions[order]

    def _get(self, keys: list[bytes]) -> list[bytes | None]:
        try:
            return self.store.get_blobs(CACHE_NAME, keys)
        except (StoreError, OSError) as exc:  # boundary: a store that fails only costs re-embedding
            self._note("read", exc)
            return [None] * len(keys)

    def add(self, vectors: Mapping[bytes, NDArray[np.float32]]) -> None:
        """Keep new vectors in memory until `flush` writes them. Hold `lock`."""
        self._unsaved.update(vectors)
        self.known.update(vectors)
        self.generation += 1
        self.changed.notify_all()

    def flush(self) -> None:
        """Write the unsaved vectors to the store, outside `lock` (a slow Redis must not hold up searches);
        they stay in memory, and are tried again, when it fails. Do not hold `lock`."""
        with self._flushing:
            with self.lock:
                unsaved = dict(self._unsaved)
            if not unsaved:
                return
            records = {key: np.ascontiguousarray(vector, "<f4").tobytes() for key, vector in unsaved.items()}
            try:
                self.store.put_blobs(CACHE_NAME, records, limit=CACHE_LIMIT)
            except (StoreError, OSError) as exc:  # boundary: a read-only cache dir or a Redis outage
                self._note("write", exc)
                return
            with self.lock:
                for key, vector in unsaved.items():
                    if self._unsaved.get(key) is vector:
                        del self._unsaved[key]

    def _note(self, action: str, exc: Exception) -> None:
        if action not in self._failed:
            self._failed.add(action)
            log.warning("embedding cache %s: cannot %s vectors (%s); they are embedded again", self.where, action, exc)


def _decoded(positions: list[int], records: list[bytes | None]) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
    """The records that hold a vector, as rows, with their positions: absent and damaged ones (wrong size,
    not finite, not of unit length) are left out."""
    sized = [i for i, record in enumerate(records) if record is not None and len(record) == _RECORD_BYTES]
    if not sized:
        return np.zeros(0, np.intp), np.zeros((0, DIMENSION), np.float32)
    joined = b"".join(records[i] or b"" for i in sized)
    vectors = np.frombuffer(joined, "<f4").reshape(len(sized), DIMENSION).astype(np.float32)
    with np.errstate(all="ignore"):
        norms = np.linalg.norm(vectors, axis=1)
    good = np.isfinite(norms) & (np.abs(norms - 1.0) <= _UNIT_TOLERANCE)
    return np.array(positions, np.intp)[sized][good], vectors[good]
