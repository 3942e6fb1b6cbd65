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
HASHED_MIN_CHARS = 2000
"""Shortest text read through the hash; shorter ones are searched with `str.find` per literal."""
_HASH_BITS = 16
_MULTIPLIER = 0x9E3779B1
"""Knuth's multiplicative hash constant: spreads 4-byte values over the table's 2**16 slots."""


class Literals:
    """A set of literals (ASCII without NUL, at most 2**INDEX_BITS of them), searched together."""

    def __init__(self, literals: Sequence[str]) -> None:
        if len(literals) > 1 << INDEX_BITS or not all(
            literal and literal.isascii() and "\0" not in literal for literal in literals
        ):
            raise ValueError("Literals takes at most 256 non-empty ASCII strings without NUL")
        self.literals = tuple(literals)
        self._short = [(index, literal) for index, literal in enumerate(literals) if len(literal) in (1, 3)]
        self._pairs = [(index, literal.encode("ascii")) for index, literal in enumerate(literals) if len(literal) == 2]
        self._long = [(index, literal) for index, literal in enumerate(literals) if len(literal) >= 4]
        self._arrays: _Arrays | None = None

    def find(self, text: str) -> list[int]:
        """Every occurrence in `text` as `position << INDEX_BITS | index`, sorted (by position, then index)."""
        found: list[int] = []
        pairs = self._short if len(text) >= HASHED_MIN_CHARS else enumerate(self.literals)
        for index, literal in pairs:
            position = text.find(literal)
            while position != -1:
                found.append(position << INDEX_BITS | index)
                position = text.find(literal, position + 1)
        if len(text) >= HASHED_MIN_CHARS:
            self._hashed(text, found)
        found.sort()
        return found

    def _hashed(self, text: str, found: list[int]) -> None:
        """Adds the occurrences of the literals of 2 characters and of 4 or more, read through numpy."""
        import numpy as np  # only long texts pay for it (the gateway and search load it anyway)

        # One byte per character ('?' for non-ASCII, never part of a literal), so offsets stay those of `text`.
        data = text.encode("ascii", "replace") + bytes(7)
        size, single = len(text), np.frombuffer(data, dtype=np.uint8)
        for index, (first, second) in self._pairs:
            matches = np.flatnonzero((single[:size] == first) & (single[1 : size + 1] == second))
            found.extend(((matches << INDEX_BITS) | index).tolist())
        if not self._long:
            return
        arrays = self._tables()
        windows = np.ndarray((len(text),), dtype="<u4", buffer=data, strides=(1,))
        candidates = np.flatnonzero(arrays.slots[(windows * np.uint32(_MULTIPLIER)) >> np.uint32(32 - _HASH_BITS)])
        eights = np.ndarray((len(text),), dtype="<u8", buffer=data, strides=(1,))[candidates]
        rows, columns = np.nonzero((eights[:, None] & arrays.masks) == arrays.values)
        codes = (candidates[rows] << INDEX_BITS) | arrays.indexes[columns]
        longer = arrays.longer[columns]
        found.extend(codes[~longer].tolist())
        for code in codes[longer].tolist():
            if text.startswith(self.literals[code & _INDEX_MASK], code >> INDEX_BITS):
                found.append(code)

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
