"""Tool vectors on disk: one `.npz` file per cache folder, keyed by sha256(model id + text).

Read once, rewritten atomically (`atomic_write`, the one atomic write of every cache) after new vectors
were added. An unreadable file is ignored (and replaced), never an error: a damaged cache only costs a
re-embedding.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...protocols.mcp._cache import atomic_write
from .model import DIMENSION

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CACHE_LIMIT", "CACHE_NAME", "VectorStore"]

log = logging.getLogger(__name__)

CACHE_NAME = "vectors.npz"
"""The one file in a vector cache folder."""
CACHE_LIMIT = 20_000
"""Most vectors kept on disk (about 72 MB at 896 floats each): the current catalog's first, then the most recent others."""
_DIGEST_BYTES = 32  # sha256


class VectorStore:
    """Vectors keyed by sha256(model id + text), in memory and (with a folder) in `<folder>/vectors.npz`.

    The file holds `keys` (n x 32 uint8 digests) and `vectors` (n x DIMENSION float32). `lock` guards the rows
    and the file; `changed` is notified whenever vectors are added.
    """

    def __init__(self, directory: Path | None, model_id: str) -> None:
        self.path = directory / CACHE_NAME if directory is not None else None
        """The cache file; None keeps vectors in memory only."""
        self._model_id = model_id.encode()
        self._rows: dict[bytes, NDArray[np.float32]] | None = None
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.generation = 0
        """Bumped (under `lock`) whenever vectors are added."""
        self.dirty = False
        """Vectors were added since the file was last written."""

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self._model_id + b"\0" + text.encode("utf-8", "surrogatepass")).digest()

    def rows(self) -> dict[bytes, NDArray[np.float32]]:
        """Every cached vector by key (read from disk on first use). Hold `lock`."""
        if self._rows is None:
            self._rows = self._read()
        return self._rows

    def _read(self) -> dict[bytes, NDArray[np.float32]]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            # Our own handle: np.load leaks the one it opens when a file starts like a zip but is not one.
            with self.path.open("rb") as handle, np.load(handle, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
            if keys.dtype != np.uint8 or keys.shape[1:] != (_DIGEST_BYTES,) or vectors.shape[0] != len(keys):
                raise ValueError(f"unexpected arrays {keys.dtype}{keys.shape} / {vectors.shape}")
            if vectors.shape[1:] != (DIMENSION,):  # written by an earlier model: its keys could never match
                log.info("embedding cache %s holds another model's vectors; it will be rebuilt", self.path)
                return {}
        except Exception as exc:  # boundary: a damaged cache only costs a re-embedding
            log.warning("embedding cache %s unreadable (%s); it will be rebuilt", self.path, exc)
            return {}
        vectors = vectors.astype(np.float32, copy=False)
        return {row.tobytes(): vectors[i] for i, row in enumerate(keys)}

    def add(
        self, vectors: Mapping[bytes, NDArray[np.float32]], *, first: Sequence[bytes] = (), save: bool = True
    ) -> None:
        """Keep new vectors (and write the file when `save`). Hold `lock`."""
        self.rows().update(vectors)
        self.generation += 1
        self.dirty = True
        if save:
            self.write(first)
        self.changed.notify_all()

    def write(self, first: Sequence[bytes] = ()) -> None:
        """Save, keeping `first` (the current catalog) and then the others, up to `CACHE_LIMIT`. Hold `lock`."""
        self.dirty = False
        if self.path is None:
            return
        rows = self.rows()
        wanted = dict.fromkeys(k for k in first if k in rows)
        for key in reversed(list(rows)):  # newest additions last in the dict: keep them first
            if len(wanted) >= CACHE_LIMIT:
                break
            wanted.setdefault(key, None)
        keys = list(wanted)[:CACHE_LIMIT]
        matrix = np.stack([rows[k] for k in keys]) if keys else np.zeros((0, DIMENSION), np.float32)
        digests = np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), _DIGEST_BYTES)
        buffer = io.BytesIO()
        np.savez(buffer, keys=digests, vectors=matrix)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, buffer.getvalue())
        except OSError as exc:  # boundary: a read-only cache dir only costs re-embedding next time
            log.warning("embedding cache %s not written: %s", self.path, exc)
