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
    """A set of literals (lowercase ASCII, at most 2**INDEX_BITS of them), searched together."""

    def __init__(self, literals: Sequence[str]) -> None:
        if len(literals) > 1 << INDEX_BITS or not all(
            literal and literal.isascii() and "\0" not in literal for literal in literals
        ):
            raise ValueError("Literals takes at most 256 non-empty ASCII strings without NUL")
        self.literals = tuple(literals)
        self._short = [(index, literal) for index, literal in enumerate(literals) if len(literal) in (1, 3)]
        self._pairs = [
            (index, int.from_bytes(literal.encode("ascii"), "little"))
            for index, literal in enumerate(literals)
            if len(literal) == 2
        ]
        self._by_prefix: dict[int, list[tuple[int, str]]] = {}
        """First 4 bytes (little-endian) -> the literals of 4 characters or more starting with them."""
        for index, literal in enumerate(literals):
            if len(literal) >= 4:
                key = int.from_bytes(literal[:4].encode("ascii"), "little")
                self._by_prefix.setdefault(key, []).append((index, literal))
        self._flags: np.ndarray[Any, Any] | None = None

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
        data = text.encode("ascii", "replace") + b"\0\0\0"
        pairs = np.ndarray((len(text),), dtype="<u2", buffer=data, strides=(1,))
        for index, value in self._pairs:
            found.extend(((np.flatnonzero(pairs == value) << INDEX_BITS) | index).tolist())
        if not self._by_prefix:
            return
        windows = np.ndarray((len(text),), dtype="<u4", buffer=data, strides=(1,))
        candidates = np.flatnonzero(self._table()[(windows * np.uint32(_MULTIPLIER)) >> np.uint32(32 - _HASH_BITS)])
        by_prefix = self._by_prefix
        for position, value in zip(candidates.tolist(), windows[candidates].tolist(), strict=True):
            for index, literal in by_prefix.get(value, ()):
                if len(literal) == 4 or text.startswith(literal, position):
                    found.append(position << INDEX_BITS | index)

    def _table(self) -> np.ndarray[Any, Any]:
        """A flag per hash slot: whether a literal's first 4 characters hash there (built on first use)."""
        if self._flags is None:
            import numpy as np

            prefixes = np.array(sorted(self._by_prefix), dtype=np.uint32)
            self._flags = np.zeros(1 << _HASH_BITS, dtype=np.bool_)
            self._flags[(prefixes * np.uint32(_MULTIPLIER)) >> np.uint32(32 - _HASH_BITS)] = True
        return self._flags
