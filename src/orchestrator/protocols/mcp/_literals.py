"""Every occurrence of a fixed set of short ASCII literals in a text, overlapping ones included.

The detector's rules start from about 75 literal anchors. `str.find` per anchor reads a listing's whole
text once per anchor, and a regex alternation is slower still (Python's engine tries the alternatives at
every position). Here a long text is read once: the 4 bytes at each position are hashed together (numpy),
the positions whose hash is one of an anchor's first 4 characters are candidates, and each candidate is
confirmed with `str.startswith`. Anchors shorter than 4 characters are few and found with `str.find`, as
are all anchors in a short text (numpy's fixed cost per call would exceed the read it saves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["INDEX_BITS", "Literals"]

INDEX_BITS = 8
"""Bits of a found code holding the literal's index: `code >> INDEX_BITS` is the position."""
_HASH_BITS = 16
_MULTIPLIER = 0x9E3779B1
"""Knuth's multiplicative hash constant: spreads 4-byte values over the table's 2**16 slots."""


class Literals:
    """A set of literals (ASCII without NUL, at most 2**INDEX_BITS of them), searched together."""

    def __init__(self, literals: Sequence[str], *, numpy_from: int) -> None:
        if len(literals) > 1 << INDEX_BITS or not all(
            literal and literal.isascii() and "\0" not in literal for literal in literals
        ):
            raise ValueError("Literals takes at most 256 non-empty ASCII strings without NUL")
        self.literals = tuple(literals)
        self.numpy_from = numpy_from
        """Shortest text read through numpy; in shorter ones a `str.find` per literal costs less than
        numpy's fixed cost per call (measured: about 3,000 characters for 4 literals of 2 characters,
        4,000 for 80 anchors, 8,000 for 26 anchors of 3 characters or more)."""
        self._short = [(index, literal.encode("ascii")) for index, literal in enumerate(literals) if len(literal) < 4]
        self._long = [(index, literal) for index, literal in enumerate(literals) if len(literal) >= 4]
        self._arrays: _Arrays | None = None

    def find(self, text: str, data: bytes | None = None) -> list[int]:
        """Every occurrence in `text` as `position << INDEX_BITS | index`, sorted (by position, then index).
        `data` is `text.encode("ascii", "replace")` when the caller has it."""
        if len(text) >= self.numpy_from:
            return self._hashed(text, text.encode("ascii", "replace") if data is None else data)
        found: list[int] = []
        for index, literal in enumerate(self.literals):
            position = text.find(literal)
            while position != -1:
                found.append(position << INDEX_BITS | index)
                position = text.find(literal, position + 1)
        found.sort()
        return found

    def _hashed(self, text: str, encoded: bytes) -> list[int]:
        """`find` through numpy: the literals under 4 characters compared byte by byte at every position, the
        others through the hash (`_long_codes`)."""
        import numpy as np  # only long texts pay for it (the gateway and search load it anyway)

        # One byte per character ('?' for non-ASCII, never part of a literal), so offsets stay those of `text`.
        data = encoded + bytes(7)
        size, single = len(text), np.frombuffer(data, dtype=np.uint8)
        codes = []
        for index, literal in self._short:
            matches = single[:size] == literal[0]
            for offset in range(1, len(literal)):
                matches &= single[offset : size + offset] == literal[offset]
            codes.append((np.flatnonzero(matches) << INDEX_BITS) | index)
        if self._long:
            codes.append(self._long_codes(text, data))
        found = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
        found.sort()
        return found.tolist()

    def _long_codes(self, text: str, data: bytes) -> np.ndarray[Any, Any]:
        """The occurrences of the literals of 4 characters or more: positions whose first 4 bytes hash to one
        of theirs, kept where their 8 bytes are a literal's (and the rest too, for longer literals)."""
        import numpy as np

        arrays = self._tables()
        windows = np.ndarray((len(text),), dtype="<u4", buffer=data, strides=(1,))
        candidates = np.flatnonzero(arrays.slots[(windows * np.uint32(_MULTIPLIER)) >> np.uint32(32 - _HASH_BITS)])
        eights = np.ndarray((len(text),), dtype="<u8", buffer=data, strides=(1,))[candidates]
        rows, columns = np.nonzero((eights[:, None] & arrays.masks) == arrays.values)
        codes = (candidates[rows] << INDEX_BITS) | arrays.indexes[columns]
        longer = arrays.longer[columns]
        confirmed = [
            code
            for code in codes[longer].tolist()
            if text.startswith(self.literals[code & _INDEX_MASK], code >> INDEX_BITS)
        ]
        return np.concatenate((codes[~longer], np.array(confirmed, dtype=codes.dtype)))

    def _tables(self) -> _Arrays:
        """The hash slots of the literals' first 4 characters, and their first 8 (built on first use)."""
        if self._arrays is None:
            import numpy as np

            prefixes = np.array([_bytes_value(literal[:4]) for _, literal in self._long], dtype=np.uint32)
            slots = np.zeros(1 << _HASH_BITS, dtype=np.bool_)
            slots[(prefixes * np.uint32(_MULTIPLIER)) >> np.uint32(32 - _HASH_BITS)] = True
            self._arrays = _Arrays(
                slots=slots,
                masks=np.array([(1 << 8 * min(len(literal), 8)) - 1 for _, literal in self._long], dtype=np.uint64),
                values=np.array([_bytes_value(literal[:8]) for _, literal in self._long], dtype=np.uint64),
                indexes=np.array([index for index, _ in self._long], dtype=np.int64),
                longer=np.array([len(literal) > 8 for _, literal in self._long], dtype=np.bool_),
            )
        return self._arrays


@dataclass(frozen=True)
class _Arrays:
    """What `Literals._hashed` compares with, per literal of 4 characters or more (in `masks` ... `longer`)."""

    slots: np.ndarray[Any, Any]
    """A flag per hash slot: whether a literal's first 4 characters hash there."""
    masks: np.ndarray[Any, Any]
    """The bytes of an 8-byte window that a literal covers."""
    values: np.ndarray[Any, Any]
    """The literal's first 8 bytes (little-endian)."""
    indexes: np.ndarray[Any, Any]
    longer: np.ndarray[Any, Any]
    """Whether the literal runs past 8 characters (confirmed with `str.startswith`)."""


def _bytes_value(text: str) -> int:
    return int.from_bytes(text.encode("ascii"), "little")


_INDEX_MASK = (1 << INDEX_BITS) - 1
