"""A catalog version's tool vectors as compact rows, and the cosines of a query with every one of them.

    index, missing = VectorIndex.build(keys, read, previous)   rows reused from `previous` by key, the rest read
    index.cosines(query)                                       each tool's best sentence, one float32 each

A large catalog's vectors are stored as bytes: each divided by its largest component, times 127, plus 128
(one scale per vector), so a tool costs DIMENSION + 4 bytes instead of 4 x DIMENSION. Cosines are then the
integer matrix product of those bytes with the query's, made the same way, through onnxruntime
(`onnx_graph`), times both scales: a quarter of the memory traffic of float32, which is what a scan of
100,000 tools spends its time on. Both operands are unsigned bytes: the CPU's signed x unsigned byte
product saturates on machines without VNNI, the unsigned one does not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .model import DIMENSION
from .onnx_graph import matmul_integer

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["BUILD_CHUNK", "COMPACT_ABOVE", "SCAN_THREADS", "VectorIndex", "encode"]

COMPACT_ABOVE = 20_000
"""Catalogs of more tools than this keep their vectors encoded in bytes (`encode`); smaller ones keep float32
and exact cosines (72 MB at this size, scanned in a few ms), so the development sets rank as before."""
BUILD_CHUNK = 4_096
"""Rows read and encoded at a time while building: never a float32 copy of a whole large catalog."""
SCAN_THREADS = 1
"""onnxruntime threads per scan: searches already run in parallel in the gateway's worker pool."""
_LEVELS = 127
"""Steps on each side of zero: a row's largest component becomes 255 or 1."""
_ZERO = 128
_ZERO_POINT = np.array(_ZERO, np.uint8)

_session: Any = None
_session_lock = threading.Lock()


def _scan_session() -> Any:
    """The process's onnxruntime session of `matmul_integer` (built once; runs are thread-safe)."""
    global _session
    with _session_lock:
        if _session is None:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = SCAN_THREADS
            options.inter_op_num_threads = 1
            options.enable_profiling = False
            _session = onnxruntime.InferenceSession(matmul_integer(), options, providers=["CPUExecutionProvider"])
        return _session


def encode(vectors: NDArray[np.float32]) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """Rows as bytes around 128 and the scale of each (a zero row gets scale 0)."""
    top = np.abs(vectors).max(axis=1) if len(vectors) else np.zeros(0, np.float32)
    scales = (top / _LEVELS).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.rint(vectors / safe[:, None]) + _ZERO
    return codes.astype(np.uint8), scales


class VectorIndex:
    """One catalog version's vectors, in catalog order; immutable once built.

    Up to COMPACT_ABOVE tools they stay float32 rows and cosines are exact; above, each vector is encoded
    in bytes (`encode`) and stored as a column, the layout onnxruntime's integer product reads straight.
    """

    def __init__(
        self,
        vectors: NDArray[np.float32] | None,
        codes: NDArray[np.uint8] | None = None,
        scales: NDArray[np.float32] | None = None,
    ) -> None:
        self.vectors = vectors
        """float32 rows (tools x DIMENSION), or None when encoded."""
        self.codes = codes
        """Encoded vectors as columns (DIMENSION x tools), or None."""
        self.scales = scales
        """The scale of each encoded vector."""

    @property
    def size(self) -> int:
        return len(self.vectors) if self.vectors is not None else len(self.scales if self.scales is not None else ())

    @property
    def compact(self) -> bool:
        return self.codes is not None

    @property
    def nbytes(self) -> int:
        """Memory the vectors take (per tool: DIMENSION + 4 bytes encoded, 4 x DIMENSION in float32)."""
        parts = (self.vectors, self.codes, self.scales)
        return sum(int(part.nbytes) for part in parts if part is not None)

    @classmethod
    def build(
        cls,
        keys: Sequence[bytes],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
        previous: tuple[Sequence[bytes], VectorIndex] | None = None,
    ) -> tuple[VectorIndex | None, list[int]]:
        """The index of `keys`: vectors of unchanged keys copied from `previous` (its keys and index, when
        stored alike), the others from `read` (vectors among the keys asked, and their positions),
        BUILD_CHUNK at a time.

        Returns:
            (index, []) when every key has a vector; (None, positions of the keys without one) otherwise.
        """
        compact = len(keys) > COMPACT_ABOVE
        index = (
            cls(None, np.empty((DIMENSION, len(keys)), np.uint8), np.empty(len(keys), np.float32))
            if compact
            else cls(np.empty((len(keys), DIMENSION), np.float32))
        )
        todo = np.arange(len(keys))
        if previous is not None and previous[1].compact == compact:
            old_keys, old = previous
            where = {key: row for row, key in enumerate(old_keys)}
            pairs = [(position, where[key]) for position, key in enumerate(keys) if key in where]
            if pairs:
                new, was = np.array(pairs, dtype=np.intp).T
                index._copy(new, old, was)
                todo = np.setdiff1d(todo, new)
        missing: list[int] = []
        for start in range(0, len(todo), BUILD_CHUNK):
            positions = todo[start : start + BUILD_CHUNK]
            vectors, found = read([keys[position] for position in positions.tolist()])
            if len(found) < len(positions):
                missing.extend(np.delete(positions, found).tolist())
            if not missing:  # else only the missing positions are wanted now
                index._set(positions, vectors)
        return (None, missing) if missing else (index, [])

    def _copy(self, positions: NDArray[np.intp], old: VectorIndex, rows: NDArray[np.intp]) -> None:
        if self.vectors is not None and old.vectors is not None:
            self.vectors[positions] = old.vectors[rows]
        elif self.codes is not None and self.scales is not None and old.codes is not None and old.scales is not None:
            self.codes[:, positions] = old.codes[:, rows]
            self.scales[positions] = old.scales[rows]

    def _set(self, positions: NDArray[np.intp], vectors: NDArray[np.float32]) -> None:
        if self.vectors is not None:
            self.vectors[positions] = vectors
        elif self.codes is not None and self.scales is not None:
            codes, self.scales[positions] = encode(vectors)
            self.codes[:, positions] = codes.T

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Each tool's cosine with the query's closest sentence (rows of `query`; all unit vectors)."""
        sentences = np.atleast_2d(np.asarray(query, np.float32))
        if self.vectors is not None:
            exact: NDArray[np.float32] = (self.vectors @ sentences.T).max(axis=1)
            return exact
        if not self.size or self.codes is None or self.scales is None:
            return np.zeros(self.size, np.float32)
        query_codes, query_scales = encode(sentences)
        feeds = {"A": query_codes, "B": self.codes, "a_zero": _ZERO_POINT, "b_zero": _ZERO_POINT}
        (products,) = _scan_session().run(None, feeds)
        best: NDArray[np.float32] = (products.astype(np.float32) * query_scales[:, None]).max(axis=0) * self.scales
        return best
