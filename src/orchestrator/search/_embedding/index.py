"""A catalog version's tool vectors, and the cosines of a query with every one of them.

    index, missing = VectorIndex.build(keys, read, previous)   vectors reused from `previous` by key, the rest read
    index.cosines(query)                                       each tool's best sentence, one float32 each

A large catalog's vectors are stored as bytes: each divided by its largest component, times 127, plus 128
(one scale per vector), DIMENSION + 4 bytes a tool instead of 4 x DIMENSION (onnxruntime's packed copy
for AVX2's unsigned product takes two bytes a component: about 1.9 KB a tool resident). Cosines are then the
integer matrix product of those bytes with the query's, made the same way, through onnxruntime
(`onnx_graph`), times both scales: a quarter of the memory traffic of float32, which is what a scan of
100,000 tools spends its time on. The vectors are part of each shard's model, so onnxruntime lays them out
for its kernel once, not at every query. Both operands are unsigned bytes: the CPU's signed x unsigned
byte product saturates on machines without VNNI, the unsigned one does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._background import Background
from .model import DIMENSION, SemanticScorer
from .onnx_graph import matmul_integer

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["BUILD_CHUNK", "COMPACT_ABOVE", "MAX_SHARDS", "SCAN_THREADS", "SHARD_TOOLS", "VectorIndex", "encode"]

COMPACT_ABOVE = 20_000
"""Catalogs of more tools than this keep their vectors encoded in bytes (`encode`); smaller ones keep float32
and exact cosines (72 MB at this size, scanned in a few ms), so the development sets rank as before."""
SHARD_TOOLS = 16_384
"""Encoded vectors per onnxruntime session: about 15 MB, packed in a fraction of a second."""
MAX_SHARDS = 24
"""More shards than this (a catalog changed many times) are rebuilt into full ones."""
UNUSED_SHARE = 0.25
"""Shards are rebuilt when the vectors no tool uses any more exceed this share of the catalog."""
BUILD_CHUNK = 4_096
"""Rows read and encoded at a time while building: never a float32 copy of a whole large catalog."""
SCAN_THREADS = 1
"""onnxruntime threads per scan: searches already run in parallel in the gateway's worker pool."""
_LEVELS = 127
"""Steps on each side of zero: a row's largest component becomes 255 or 1."""
_ZERO = 128
_ZERO_POINT = np.array(_ZERO, np.uint8)

_KEY = np.dtype("V32")
"""Cache keys (sha256 digests) as numpy items: 32 bytes each, compared and returned whole."""


class _Shard:
    """Up to SHARD_TOOLS encoded vectors inside their own onnxruntime session, which packed them once."""

    def __init__(self, keys: NDArray[np.void], codes: NDArray[np.uint8], scales: NDArray[np.float32]) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = SCAN_THREADS
        options.inter_op_num_threads = 1
        options.enable_profiling = False
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no core burnt waiting
        self.session = onnxruntime.InferenceSession(matmul_integer(codes), options, providers=["CPUExecutionProvider"])
        self.keys = keys
        self.scales = scales

    @property
    def size(self) -> int:
        return len(self.scales)

    def cosines(self, codes: NDArray[np.uint8], scales: NDArray[np.float32]) -> NDArray[np.float32]:
        """Each vector's cosine with the closest of the encoded query rows (`codes`, `scales`)."""
        (products,) = self.session.run(None, {"A": codes, "a_zero": _ZERO_POINT, "b_zero": _ZERO_POINT})
        best: NDArray[np.float32] = (products.astype(np.float32) * scales[:, None]).max(axis=0) * self.scales
        return best


def encode(vectors: NDArray[np.float32]) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """Rows as bytes around 128 and the scale of each (a zero row gets scale 0)."""
    top = np.abs(vectors).max(axis=1) if len(vectors) else np.zeros(0, np.float32)
    scales = (top / _LEVELS).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.rint(vectors / safe[:, None]) + _ZERO
    return codes.astype(np.uint8), scales


class VectorIndex:
    """One catalog version's vectors, in catalog order; immutable once built.

    Up to COMPACT_ABOVE tools they stay float32 rows and cosines are exact. Above, they are encoded in
    bytes (`encode`) in shards of SHARD_TOOLS, each packed once by onnxruntime: a tool's cosine is found
    through `slots` (its column among the shards' columns). A new catalog version keeps the shards of the
    last one whose vectors it still uses and puts only new texts in new shards, so a changed server costs a
    small shard, not a rebuild; shards are rebuilt when too many or too much of them is unused.
    """

    def __init__(
        self,
        vectors: NDArray[np.float32] | None,
        shards: Sequence[_Shard] = (),
        slots: NDArray[np.intp] | None = None,
    ) -> None:
        self.vectors = vectors
        """float32 rows (tools x DIMENSION), or None when encoded."""
        self.shards = list(shards)
        self.slots = slots if slots is not None else np.zeros(0, np.intp)
        """Each tool's column among the shards' columns, in order."""

    @property
    def size(self) -> int:
        return len(self.vectors) if self.vectors is not None else len(self.slots)

    @property
    def compact(self) -> bool:
        return self.vectors is None

    @property
    def nbytes(self) -> int:
        """Memory the vectors take: float32 rows, or per tool DIMENSION bytes of codes (as onnxruntime packed
        them), a scale, a key and a slot."""
        if self.vectors is not None:
            return int(self.vectors.nbytes)
        columns = sum(shard.size for shard in self.shards)
        return int(columns * (DIMENSION + 4 + _KEY.itemsize) + self.slots.nbytes)

    @classmethod
    def build(
        cls,
        keys: Sequence[bytes],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
        previous: tuple[Sequence[bytes], VectorIndex] | None = None,
        moved: NDArray[np.intp] | None = None,
    ) -> tuple[VectorIndex | None, list[int]]:
        """The index of `keys`: vectors of unchanged keys taken from `previous` (its keys and index, when
        stored alike), the others from `read` (vectors among the keys asked, and their positions),
        BUILD_CHUNK at a time. `moved`, when known: per key, the position of the same key among the previous
        keys, or -1 (a catalog version that kept most tools: no key is looked up).

        Returns:
            (index, []) when every key has a vector; (None, positions of the keys without one) otherwise.
        """
        old = previous[1] if previous is not None else None
        if len(keys) <= COMPACT_ABOVE:
            return cls._build_rows(keys, read, previous if old is not None and not old.compact else None)
        if old is None or not old.compact:
            return cls._build_shards(keys, read, [], np.full(len(keys), -1, np.intp))
        return cls._build_shards(keys, read, old.shards, old._places(keys, previous[0] if previous else (), moved))

    @classmethod
    def _build_rows(
        cls,
        keys: Sequence[bytes],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
        previous: tuple[Sequence[bytes], VectorIndex] | None,
    ) -> tuple[VectorIndex | None, list[int]]:
        rows = np.empty((len(keys), DIMENSION), np.float32)
        todo = np.arange(len(keys))
        if previous is not None and previous[1].vectors is not None:
            where = {key: row for row, key in enumerate(previous[0])}
            pairs = [(position, where[key]) for position, key in enumerate(keys) if key in where]
            if pairs:
                new, was = np.array(pairs, dtype=np.intp).T
                rows[new] = previous[1].vectors[was]
                todo = np.setdiff1d(todo, new)
        missing = _read_into(keys, todo, read, lambda positions, vectors: rows.__setitem__(positions, vectors))
        return (None, missing) if missing else (cls(rows), [])

    def _places(
        self, keys: Sequence[bytes], previous: Sequence[bytes], moved: NDArray[np.intp] | None
    ) -> NDArray[np.intp]:
        """Per key, its column among this index's shards' columns (-1: not there): through `moved` (positions
        among `previous`, this index's keys) when given, else by key."""
        if moved is not None:
            places = np.full(len(keys), -1, np.intp)
            kept = moved >= 0
            places[kept] = self.slots[moved[kept]]
            return places
        where: dict[bytes, int] = {}
        for offset, shard in zip(self._offsets().tolist(), self.shards, strict=False):
            where.update((key, offset + column) for column, key in enumerate(shard.keys.tolist()))
        return np.fromiter((where.get(key, -1) for key in keys), np.intp, len(keys))

    def _offsets(self) -> NDArray[np.intp]:
        """The first column of each shard, and the number of columns after the last."""
        return np.concatenate([[0], np.cumsum([shard.size for shard in self.shards])]).astype(np.intp)

    @classmethod
    def _build_shards(
        cls,
        keys: Sequence[bytes],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
        previous: list[_Shard],
        places: NDArray[np.intp],
    ) -> tuple[VectorIndex | None, list[int]]:
        """`places`: per key, its column among `previous`'s columns, or -1 for a vector to read."""
        sizes = np.array([shard.size for shard in previous], dtype=np.intp)
        kept = places >= 0
        number = np.searchsorted(np.cumsum(sizes), places[kept], side="right")  # the shard of each kept key
        used = np.unique(number)
        fresh = int(len(keys) - kept.sum())
        unused = int(sizes[used].sum()) - (len(keys) - fresh)
        if len(used) + -(-fresh // SHARD_TOOLS) > MAX_SHARDS or unused > len(keys) * UNUSED_SHARE:
            used, kept = used[:0], np.zeros(len(keys), bool)  # rebuilt from the store: fewer, fuller shards
            number = number[:0]
        todo = np.flatnonzero(~kept)
        codes = np.empty((DIMENSION, len(todo)), np.uint8)
        scales = np.empty(len(todo), np.float32)
        column_of = np.empty(len(keys), np.intp)
        column_of[todo] = np.arange(len(todo))

        def take(positions: NDArray[np.intp], vectors: NDArray[np.float32]) -> None:
            columns = column_of[positions]
            encoded, scales[columns] = encode(vectors)
            codes[:, columns] = encoded.T

        missing = _read_into(keys, todo, read, take)
        if missing:
            return None, missing
        shards = [previous[at] for at in used.tolist()]
        # A kept shard's columns move by the columns of the unused shards before it.
        shift = np.zeros(len(previous), np.intp)
        if used.size:
            shift[used] = np.cumsum(sizes[used]) - sizes[used] - (np.cumsum(sizes) - sizes)[used]
        slots = np.empty(len(keys), np.intp)
        slots[kept] = places[kept] + shift[number]
        start = int(sizes[used].sum())
        slots[todo] = start + np.arange(len(todo))
        new_keys = np.frombuffer(b"".join(keys[position] for position in todo.tolist()), _KEY)
        for first in range(0, len(todo), SHARD_TOOLS):
            part = slice(first, first + SHARD_TOOLS)
            shards.append(_Shard(new_keys[part], np.ascontiguousarray(codes[:, part]), scales[part].copy()))
        return cls(None, shards, slots), []

    def rows(
        self,
        docs: NDArray[np.intp],
        read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
    ) -> NDArray[np.float32] | None:
        """The float32 vectors of the tools at `docs`: kept rows, or (encoded) read again by key through
        `read` (exact, unlike the bytes); None when the store no longer has one of them."""
        if self.vectors is not None:
            kept: NDArray[np.float32] = self.vectors[docs]
            return kept
        every = np.concatenate([shard.keys for shard in self.shards]) if self.shards else np.zeros(0, _KEY)
        keys = [key.tobytes() for key in every[self.slots[docs]]]
        vectors, found = read(keys)
        return vectors if len(found) == len(keys) else None

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Each tool's cosine with the query's closest sentence (rows of `query`; all unit vectors)."""
        sentences = np.atleast_2d(np.asarray(query, np.float32))
        if self.vectors is not None:
            return SemanticScorer.similarities(sentences, self.vectors)
        if not self.size:
            return np.zeros(0, np.float32)
        codes, scales = encode(sentences)
        # Both cores scan (onnxruntime releases the GIL): the second half of the shards on a pool thread.
        half = (len(self.shards) + 1) // 2
        later = Background(lambda: [shard.cosines(codes, scales) for shard in self.shards[half:]])
        first = [shard.cosines(codes, scales) for shard in self.shards[:half]]
        every: NDArray[np.float32] = np.concatenate(first + later.result())
        return every[self.slots]


def _read_into(
    keys: Sequence[bytes],
    todo: NDArray[np.intp],
    read: Callable[[Sequence[bytes]], tuple[NDArray[np.float32], NDArray[np.intp]]],
    put: Callable[[NDArray[np.intp], NDArray[np.float32]], None],
) -> list[int]:
    """Read the vectors of the keys at `todo`, BUILD_CHUNK at a time, into `put(positions, vectors)`;
    returns the positions without one (then the rest is no longer put)."""
    missing: list[int] = []
    for start in range(0, len(todo), BUILD_CHUNK):
        positions = todo[start : start + BUILD_CHUNK]
        vectors, found = read([keys[position] for position in positions.tolist()])
        if len(found) < len(positions):
            missing.extend(np.delete(positions, found).tolist())
        if not missing:
            put(positions[found], vectors)
    return missing
