"""The lexical index's data: postings, document lengths and name order in compact arrays, replaced per
change without touching what stayed.

Documents live in slots (int32). A fresh corpus puts document i in slot i; an update frees the slots of
removed documents and fills the lowest free slots with added ones, so only the postings of the changed
documents' terms are rewritten. `order` lists the slots by qualified name (a document's position in the
catalog, the ranking's tie-break). BM25's collection statistics (document count, average length, document
frequencies, the idf floor) come from counts that do not depend on the order documents arrived in and are
summed exactly (`math.fsum`), so an updated corpus scores exactly like one built fresh from the same entries.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..protocols.mcp._catalog import ToolEntry

__all__ = ["EPSILON", "Batch", "Corpus", "ServerNames", "idf", "server_numbers"]

EPSILON = 0.25
"""rank-bm25's BM25Okapi floor: a term in more than half the documents (negative idf) gets this share of
the average idf instead."""

_Posting = tuple[np.ndarray, np.ndarray]
"""(slots int32, weighted frequencies) of the documents holding one term; frequencies in the narrowest
float type that holds every one of them exactly (`_narrow`)."""


@dataclass(frozen=True)
class Batch:
    """Documents counted together (`_lexical.count`): each distinct (term, document) pair, term-major."""

    terms: list[str]
    """Each distinct term once, in the order of `starts`."""
    starts: np.ndarray
    """Where each term's pairs begin in `docs` and `freqs` (int64); the last term's end is their size."""
    docs: np.ndarray
    """The document (its index in the batch) of each pair, ascending within a term (int32)."""
    freqs: np.ndarray
    """The weighted frequency of each pair (float64)."""
    lengths: np.ndarray
    """Each document's weighted length, the sum of its frequencies (float64)."""

    @property
    def size(self) -> int:
        return len(self.lengths)

    def slices(self) -> Iterable[tuple[str, int, int]]:
        """(term, start, end) of each term's pairs."""
        starts = self.starts.tolist()
        return zip(self.terms, starts, [*starts[1:], len(self.docs)][: len(starts)], strict=True)


@dataclass(frozen=True)
class Corpus:
    """One immutable state of the index's documents; `updated` returns the next one."""

    documents: list[ToolEntry | None]
    """The entry in each slot (None: a free slot)."""
    lengths: np.ndarray
    """Weighted length of the document in each slot (float64; 0 for a free slot)."""
    postings: dict[str, _Posting]
    order: np.ndarray
    """Slots sorted by the documents' qualified names (int32): position -> slot."""
    rank: np.ndarray = field(repr=False)
    """Position of each slot in `order` (int32; -1 for a free slot)."""
    free: np.ndarray = field(repr=False)
    """Free slots, ascending (int32)."""
    df_counts: dict[int, int] = field(repr=False)
    """Document frequency -> how many terms have it (the idf floor's average needs only these)."""
    servers: dict[str, np.ndarray] = field(repr=False)
    """Server (`ToolEntry.server`) -> the slots of its documents (int32)."""
    avgdl: float = field(init=False)
    eps: float = field(init=False)
    """The idf given to a term in more than half the documents."""

    def __post_init__(self) -> None:
        size = len(self.order)
        object.__setattr__(self, "avgdl", _exact_sum(self.lengths) / size if size else 0.0)
        object.__setattr__(self, "eps", EPSILON * _average_idf(size, self.df_counts))

    @classmethod
    def build(cls, entries: Sequence[ToolEntry], batch: Batch) -> Corpus:
        """Entry i in slot i; `order` by name (a catalog's entries are sorted already)."""
        freqs = _narrow(batch.freqs)
        postings = {term: (batch.docs[start:end], freqs[start:end]) for term, start, end in batch.slices()}
        df_counts = _histogram(end - start for _term, start, end in batch.slices())
        size = len(entries)
        names = [entry.name for entry in entries]
        if all(map(operator.lt, names, itertools.islice(names, 1, None))):
            order = np.arange(size, dtype=np.int32)
        else:
            order = np.asarray(sorted(range(size), key=names.__getitem__), dtype=np.int32)
        rank = np.empty(size, dtype=np.int32)
        rank[order] = np.arange(size, dtype=np.int32)
        return cls(
            documents=list(entries),
            lengths=batch.lengths.astype(np.float64),
            postings=postings,
            order=order,
            rank=rank,
            free=np.empty(0, dtype=np.int32),
            df_counts=df_counts,
            servers=_slots_by_server(entries),
        )

    @property
    def size(self) -> int:
        """Documents held (slots in use)."""
        return len(self.order)

    @property
    def capacity(self) -> int:
        """Slots, free ones included: the length of a dense score array."""
        return len(self.documents)

    def slot(self, name: str) -> int | None:
        """The slot of the document with this qualified name."""
        order, documents = self.order, self.documents
        position = bisect.bisect_left(range(len(order)), name, key=lambda p: documents[order[p]].name)  # type: ignore[union-attr]
        if position < len(order):
            found = int(order[position])
            if documents[found].name == name:  # type: ignore[union-attr]
                return found
        return None

    def updated(
        self,
        removed: Sequence[int],
        removed_terms: Collection[str],
        added: Sequence[ToolEntry],
        batch: Batch,
    ) -> Corpus:
        """Without the documents in slots `removed` (`removed_terms`: every term they hold) and with `added`
        (counted in `batch`, document i = added[i]).

        Raises:
            KeyError: an added name is already held and not removed, or added twice.
        """
        gone = np.asarray(removed, dtype=np.int32)
        dropped = np.zeros(self.capacity, dtype=bool)
        dropped[gone] = True
        held = [self.documents[slot] for slot in gone.tolist()]
        # Free and removed slots are disjoint: no removed slot was free.
        slots, free, capacity = _allocate(np.sort(np.concatenate([self.free, gone])), len(added), self.capacity)
        order = self._order_after(gone, added, slots)
        documents = self.documents + [None] * (capacity - self.capacity)
        for slot in gone.tolist():
            documents[slot] = None
        for slot, entry in zip(slots.tolist(), added, strict=True):
            documents[slot] = entry
        lengths = np.zeros(capacity, dtype=np.float64)
        lengths[: self.capacity] = self.lengths
        lengths[gone] = 0.0
        lengths[slots] = batch.lengths
        postings, df_counts = self._postings_after(dropped, removed_terms, slots, batch)
        rank = np.full(capacity, -1, dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        servers = _servers_after(self.servers, dropped, held, added, slots)
        return Corpus(
            documents=documents,
            lengths=lengths,
            postings=postings,
            order=order,
            rank=rank,
            free=free,
            df_counts=df_counts,
            servers=servers,
        )

    def _postings_after(
        self, dropped: np.ndarray, removed_terms: Collection[str], slots: np.ndarray, batch: Batch
    ) -> tuple[dict[str, _Posting], dict[int, int]]:
        """The postings with the dropped slots' pairs gone and the batch's added (in `slots`), and the new
        document-frequency counts; postings of other terms are shared with this corpus."""
        postings = dict(self.postings)
        df_counts = dict(self.df_counts)
        freqs = _narrow(batch.freqs)
        added = {term: (start, end) for term, start, end in batch.slices()}
        for term in set(removed_terms) | added.keys():
            before = postings.get(term)
            span = added.get(term)
            parts_slots: list[np.ndarray] = []
            parts_freqs: list[np.ndarray] = []
            if before is not None:
                held, held_freqs = before
                keep = ~dropped[held]
                if keep.all():
                    if span is None:
                        continue
                    parts_slots.append(held)
                    parts_freqs.append(held_freqs)
                else:
                    parts_slots.append(held[keep])
                    parts_freqs.append(held_freqs[keep])
            if span is not None:
                parts_slots.append(slots[batch.docs[span[0] : span[1]]])
                parts_freqs.append(freqs[span[0] : span[1]])
            after = (np.concatenate(parts_slots), np.concatenate(parts_freqs)) if parts_slots else None
            old_df = 0 if before is None else len(before[0])
            new_df = 0 if after is None else len(after[0])
            if new_df != old_df:
                _count_df(df_counts, old_df, -1)
                _count_df(df_counts, new_df, +1)
            if new_df:
                postings[term] = after  # type: ignore[assignment]
            else:
                postings.pop(term, None)
        return postings, df_counts

    def _order_after(self, gone: np.ndarray, added: Sequence[ToolEntry], slots: np.ndarray) -> np.ndarray:
        """Slots by name after the change: the kept ones in their order, the added merged in by name."""
        keep = np.ones(len(self.order), dtype=bool)
        keep[self.rank[gone]] = False
        kept = self.order[keep]
        documents = self.documents
        names = [entry.name for entry in added]
        chosen = sorted(range(len(added)), key=names.__getitem__)
        at = [
            bisect.bisect_left(range(len(kept)), names[i], key=lambda p: documents[kept[p]].name)  # type: ignore[union-attr]
            for i in chosen
        ]
        for i, j in itertools.pairwise(chosen):
            if names[i] == names[j]:
                raise KeyError(f"{names[i]}: added twice")
        for i, p in zip(chosen, at, strict=True):
            if p < len(kept) and documents[kept[p]].name == names[i]:
                raise KeyError(f"{names[i]}: already a document of this index")
        return np.insert(kept, np.asarray(at, dtype=np.intp), slots[chosen]).astype(np.int32)


def _allocate(free: np.ndarray, count: int, capacity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Slots for `count` new documents: the lowest free ones, then new ones past `capacity`."""
    taken = free[:count]
    extra = count - len(taken)
    fresh = np.arange(capacity, capacity + extra, dtype=np.int32)
    return np.concatenate([taken, fresh]).astype(np.int32), free[count:], capacity + extra


def server_numbers(entries: Sequence[ToolEntry]) -> tuple[dict[str, int], np.ndarray]:
    """Each server's number, in order of its first entry, and each entry's server number (int64)."""
    numbers: dict[str, int] = {}
    of_entry = np.fromiter(
        (numbers.setdefault(entry.server, len(numbers)) for entry in entries), np.int64, len(entries)
    )
    return numbers, of_entry


def _slots_by_server(entries: Sequence[ToolEntry]) -> dict[str, np.ndarray]:
    """Each server's slots (int32, ascending) when entry i is in slot i, servers in order of first slot."""
    numbers, of_slot = server_numbers(entries)
    slots = np.argsort(of_slot, kind="stable").astype(np.int32)
    counts = np.bincount(of_slot, minlength=len(numbers))
    ends = np.cumsum(counts)
    starts = (ends - counts).tolist()
    return {server: slots[start:end] for server, start, end in zip(numbers, starts, ends.tolist(), strict=True)}


def _servers_after(
    servers: dict[str, np.ndarray],
    dropped: np.ndarray,
    removed: Sequence[ToolEntry],
    added: Sequence[ToolEntry],
    slots: np.ndarray,
) -> dict[str, np.ndarray]:
    """Each server's slots after the change (only the servers of changed documents are rewritten)."""
    after = dict(servers)
    new: dict[str, list[int]] = {}
    for entry, slot in zip(added, slots.tolist(), strict=True):
        new.setdefault(entry.server, []).append(slot)
    for server in {entry.server for entry in removed} | new.keys():
        held = servers.get(server, np.empty(0, dtype=np.int32))
        kept = held[~dropped[held]] if len(held) else held
        joined = np.concatenate([kept, np.asarray(new.get(server, []), dtype=np.int32)]).astype(np.int32)
        if len(joined):
            after[server] = joined
        else:
            after.pop(server, None)
    return after


@dataclass(frozen=True)
class ServerNames:
    """Which servers a query names (`LexicalIndex.named`): each server's name terms, and each server filed
    under one of them."""

    words: dict[str, frozenset[str]]
    """Server -> the index terms of its name (servers whose name has none are left out)."""
    servers: dict[str, frozenset[str]]
    """Index term -> the servers filed under it: each under its name's longest term (`_key`). A query names
    a server only if it has every term of the name, so looking up one of them finds every server it can
    name: at 100,000 tools a request met 2,076 servers through any of their terms, and named 1.3."""

    @classmethod
    def of(cls, servers: Iterable[str], analyze: Callable[[str], list[str]]) -> ServerNames:
        return cls({}, {}).after(servers, (), analyze)

    def after(self, came: Iterable[str], gone: Iterable[str], analyze: Callable[[str], list[str]]) -> ServerNames:
        """These names with servers added and removed (`analyze`: a name's index terms)."""
        words, by_word = dict(self.words), dict(self.servers)
        found: dict[str, set[str]] = {}
        for server in gone:
            terms = words.pop(server, None)
            if terms:
                word = _key(terms)
                left = by_word[word] - {server}
                if left:
                    by_word[word] = left
                else:
                    del by_word[word]
        for server in came:
            terms = frozenset(analyze(server))
            if terms:
                words[server] = terms
                word = _key(terms)
                found.setdefault(word, set(by_word.get(word, ()))).add(server)
        by_word.update((word, frozenset(servers)) for word, servers in found.items())
        return ServerNames(words, by_word)


def _key(terms: frozenset[str]) -> str:
    """The term a server is filed under: its name's longest (the most particular), the first of equals."""
    return min(terms, key=lambda term: (-len(term), term))


def _histogram(values: Iterable[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _count_df(counts: dict[int, int], df: int, step: int) -> None:
    if df == 0:
        return
    left = counts.get(df, 0) + step
    if left:
        counts[df] = left
    else:
        counts.pop(df, None)


def idf(size: int, df: int, eps: float) -> float:
    """BM25Okapi's idf of a term in `df` of `size` documents, floored at `eps` where negative."""
    value = math.log(size - df + 0.5) - math.log(df + 0.5)
    return eps if value < 0 else value


def _average_idf(size: int, df_counts: Mapping[int, int]) -> float:
    """The mean unfloored idf over every term: BM25Okapi's `average_idf`, summed exactly (`math.fsum`) per
    document frequency, so it does not depend on the order terms were first seen."""
    if not df_counts:
        return 0.0
    dfs = np.fromiter(df_counts.keys(), dtype=np.float64, count=len(df_counts))
    counts = np.fromiter(df_counts.values(), dtype=np.float64, count=len(df_counts))
    parts = counts * (np.log(size - dfs + 0.5) - np.log(dfs + 0.5))
    return math.fsum(parts.tolist()) / sum(df_counts.values())


_SCALE = 1 << 20
"""Document lengths are sums of field weights (halves, and the exact-form weight's eighths): times this
they are integers, summed exactly in int64 well past any catalog's total length."""


def _exact_sum(values: np.ndarray) -> float:
    """The exactly rounded sum of `values` (what `math.fsum` gives), in one vectorized pass when they are
    multiples of 1 / _SCALE (always, with the default weights)."""
    scaled = values * _SCALE
    if np.array_equal(scaled, np.floor(scaled)) and float(np.abs(scaled).sum()) < 2.0**62:
        return int(scaled.astype(np.int64).sum()) / _SCALE  # int / int: correctly rounded, as fsum
    return math.fsum(values.tolist())


def _narrow(values: np.ndarray) -> np.ndarray:
    """`values` (float64) as float16 or float32 when that holds every value exactly, else as they are."""
    for dtype in (np.float16, np.float32):
        narrow = values.astype(dtype)
        if np.array_equal(narrow, values):
            return narrow
    return values
