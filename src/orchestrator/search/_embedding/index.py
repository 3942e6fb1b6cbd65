"""A catalog version's tool vectors as compact rows, and the cosines of a query with every one of them.

    index, missing = VectorIndex.build(keys, read, previous)   rows reused from `previous` by key, the rest read
    index.cosines(query)                                       each tool's best sentence, one float32 each

Each row is stored as bytes: the vector divided by its largest component, times 127, plus 128 (one scale
per row), so a tool costs DIMENSION + 4 bytes instead of 4 x DIMENSION. Cosines are the integer matrix
product of those bytes with the query's, made the same way, through onnxruntime (`onnx_graph`), times
both scales: a quarter of the memory traffic of float32, which is what a scan of 100,000 tools spends
its time on. Both operands are unsigned bytes: the CPU's signed x unsigned byte product saturates on
machines without VNNI, the unsigned one does not.
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

COMPACT_ABOVE = 1_000_000_000
"""Catalogs of more tools than this keep their vectors encoded in bytes (`encode`); smaller ones in float32."""
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
    """One catalog version's vectors (rows in catalog order); immutable once built.

    Up to COMPACT_ABOVE tools the rows stay float32 and cosines are exact; above, each row is encoded in
    bytes (`encode`) and scanned as integers.
    """

    def __init__(self, rows: NDArray[np.float32] | NDArray[np.uint8], scales: NDArray[np.float32] | None) -> None:
        self.rows = rows
        self.scales = scales
        """One scale per encoded row; None for float32 rows."""

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def compact(self) -> bool:
        return self.scales is not None

    @property
    def nbytes(self) -> int:
        """Memory the rows take (per tool: DIMENSION + 4 bytes encoded, 4 x DIMENSION in float32)."""
        return int(self.rows.nbytes + (self.scales.nbytes if self.scales is not None else 0))

    @classmethod
    def build(
        cls,
        keys: Sequence[bytes],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
        previous: tuple[Sequence[bytes], VectorIndex] | None = None,
    ) -> tuple[VectorIndex | None, list[int]]:
        """The index of `keys`, rows of unchanged keys copied from `previous` (its keys and index, when
        stored alike), the others from `read` (vectors among the keys asked, and their positions),
        BUILD_CHUNK at a time.

        Returns:
            (index, []) when every key has a vector; (None, positions of the keys without one) otherwise.
        """
        compact = len(keys) > COMPACT_ABOVE
        rows = np.empty((len(keys), DIMENSION), np.uint8 if compact else np.float32)
        scales = np.empty(len(keys), np.float32) if compact else None
        todo = np.arange(len(keys))
        if previous is not None and previous[1].compact == compact:
            old_keys, old = previous
            where = {key: row for row, key in enumerate(old_keys)}
            pairs = [(position, where[key]) for position, key in enumerate(keys) if key in where]
            if pairs:
                new_rows, old_rows = np.array(pairs, dtype=np.intp).T
                rows[new_rows] = old.rows[old_rows]
                if scales is not None and old.scales is not None:
                    scales[new_rows] = old.scales[old_rows]
                todo = np.setdiff1d(todo, new_rows)
        missing: list[int] = []
        for start in range(0, len(todo), BUILD_CHUNK):
            positions = todo[start : start + BUILD_CHUNK]
            vectors, found = read([keys[position] for position in positions.tolist()])
            if len(found) < len(positions):
                missing.extend(np.delete(positions, found).tolist())
            if missing:
                continue  # only the missing positions are wanted now
            if scales is None:
                rows[positions] = vectors
            else:
                rows[positions], scales[positions] = encode(vectors)
        if missing:
            return None, missing
        return cls(rows, scales), []

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Each row's cosine with the query's closest sentence (rows of `query`; all unit vectors)."""
        sentences = np.atleast_2d(np.asarray(query, np.float32))
        if self.scales is None:
            exact: NDArray[np.float32] = (self.rows @ sentences.T).max(axis=1)
            return exact
        if not self.size:
            return np.zeros(0, np.float32)
        query_codes, query_scales = encode(sentences)
        feeds = {"A": self.rows, "B": np.ascontiguousarray(query_codes.T), "a_zero": _ZERO_POINT, "b_zero": _ZERO_POINT}
        (products,) = _scan_session().run(None, feeds)
        best: NDArray[np.float32] = (products.astype(np.float32) * query_scales).max(axis=1) * self.scales
        return best
