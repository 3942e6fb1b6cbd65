"""Names spelled like an unknown one, for corrective errors: difflib over a few candidates, not the catalog.

`difflib.get_close_matches` compares a name with every possibility in Python: a mistyped name cost 1 s of
CPU at 10,000 tools and 8 s at 100,000 (14 s for a name built to pass its quick filters), on the worker
thread every agent shares. difflib keeps a possibility only when its `quick_ratio` (characters in
common, as counts) reaches the cutoff; `NameSpellings` computes an upper bound of that ratio for every
name at once (numpy, character counts by bucket), and difflib then reads only the names that reach it,
at most MAX_CANDIDATES of them in a large catalog, the most promising first. Otherwise the result is
difflib's own.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

__all__ = ["EXACT_UP_TO", "MAX_CANDIDATES", "NameSpellings"]

MAX_CANDIDATES = 128
"""Most names difflib compares an unknown name with, in a catalog of more than EXACT_UP_TO names."""
EXACT_UP_TO = 2_000
"""Up to this many names, every name that can reach the cutoff is compared: difflib's own result, at no more
cost than difflib alone (its quick filters pass the same names)."""
_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:"
_BUCKETS = len(_ASCII) + 1
"""A count per character of `_ASCII`, and one for every other character (an upper bound for those)."""
_BUCKET_OF = np.full(129, len(_ASCII), np.intp)
_BUCKET_OF[[ord(char) for char in _ASCII]] = np.arange(len(_ASCII))


class NameSpellings:
    """The character counts of a list of names, for `close_matches`."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(dict.fromkeys(names))  # a name many servers share is one possibility
        self._lengths = np.fromiter(map(len, self.names), np.int64, len(self.names))
        self._counts = _counts(self.names, self._lengths)

    def close_matches(self, name: str, n: int, cutoff: float) -> list[str]:
        """`difflib.get_close_matches(name, self.names, n, cutoff)`, reading only the names whose
        characters could reach `cutoff` (the MAX_CANDIDATES likeliest when more can)."""
        if not self.names or not name:
            return []
        query = _counts([name], np.array([len(name)], np.int64))[0]
        common = np.minimum(self._counts, query).sum(axis=1)
        bound = 2.0 * common / (self._lengths + len(name))  # >= difflib's quick_ratio >= its ratio
        passing = np.flatnonzero(bound >= cutoff)
        if passing.size > MAX_CANDIDATES and len(self.names) > EXACT_UP_TO:
            best = np.argpartition(-bound[passing], MAX_CANDIDATES - 1)[:MAX_CANDIDATES]
            passing = np.sort(passing[best])
        return difflib.get_close_matches(name, [self.names[i] for i in passing.tolist()], n, cutoff)


def _counts(names: Sequence[str], lengths: np.ndarray) -> np.ndarray:
    """One row per name: how many of each `_ASCII` character it holds, and of all others together."""
    codes = np.frombuffer("".join(names).encode("utf-32-le", "surrogatepass"), np.uint32)
    buckets = _BUCKET_OF[np.minimum(codes, 128)]
    rows = np.repeat(np.arange(len(names), dtype=np.intp), lengths)
    flat = np.bincount(rows * _BUCKETS + buckets, minlength=len(names) * _BUCKETS)
    counts: np.ndarray = flat.reshape(len(names), _BUCKETS).astype(np.int32)
    return counts
