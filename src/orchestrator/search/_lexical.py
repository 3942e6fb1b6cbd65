"""Lexical ranking: a BM25 index (rank-bm25's BM25Okapi) over tool entries, updated per change.

Scores are BM25Okapi's (its idf, k1, b) over the weighted term frequencies of `_analysis` (a tool's
fields, each word counted with its field's weight), computed only for the documents that share a term with
the query through an inverted index (`_postings`): the same numbers `BM25Okapi.get_scores` gives, without
a pass over every document.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import numpy as np
from rank_bm25 import BM25Okapi

from .._bulk import collector_paused
from ..protocols.mcp._catalog import ToolEntry
from ._analysis import (
    FIELD_WEIGHTS,
    FORM_PREFIX,
    SCHEMA_DEPTH,
    STOPWORDS,
    Analyzer,
    FieldWeights,
    split_words,
    tool_document,
)
from ._documents import count, gather
from ._postings import EPSILON, Batch, Corpus, ServerNames, idf
from ._tuning import BM25_B, BM25_K1, WORD_FORM_WEIGHT

__all__ = [
    "FIELD_WEIGHTS",
    "FORM_PREFIX",
    "SCHEMA_DEPTH",
    "STOPWORDS",
    "Analyzer",
    "FieldWeights",
    "LexicalIndex",
    "split_words",
    "tool_document",
]

UPDATE_TERMS_SHARE = 0.25
"""Share of the vocabulary an update may touch (terms of the removed and added entries) before a fresh build
is cheaper: terms merge one by one, a build counts every word at once."""
UPDATE_TERMS_MIN = 2_000
"""Terms an update may always touch (a small catalog's vocabulary is small)."""


NARROW_FROM = 20_000
"""Fewest postings a request reads for `scores(..., within=k)` to narrow its candidates: measured, it
takes the search p50 from 0.87 to 0.66 ms at 100,000 tools (about 88,000 postings a request) and changes
nothing measurable at 10,000 (about 9,000), where its own cost matches what it saves."""


class _Okapi(BM25Okapi):  # type: ignore[misc]  # rank_bm25 ships no types: BM25Okapi is Any to mypy
    """rank-bm25's BM25Okapi over an index's statistics, for checking the index against the library's own
    `get_scores`: one document per slot (a free slot is an empty document), the index's idf (floor
    included) for every term, its average length, k1 and b. `doc_freqs` is built on first use."""

    def __init__(self, index: LexicalIndex) -> None:
        corpus = index._corpus
        self._index = index
        self._doc_freqs: list[dict[str, float]] | None = None
        self.k1, self.b, self.epsilon = index.k1, index.b, EPSILON
        self.corpus_size = corpus.capacity
        self.avgdl = corpus.avgdl
        self.doc_len = corpus.lengths.tolist()
        self.idf = index.idf()
        self.average_idf = corpus.eps / EPSILON

    @property
    def doc_freqs(self) -> list[dict[str, float]]:
        if self._doc_freqs is None:
            corpus = self._index._corpus
            freqs: list[dict[str, float]] = [{} for _ in range(corpus.capacity)]
            for term, (slots, values) in corpus.postings.items():
                for slot, value in zip(slots.tolist(), values.tolist(), strict=True):
                    freqs[slot][term] = value
            self._doc_freqs = freqs
        return self._doc_freqs


class LexicalIndex:
    """BM25 over tool entries, updated in place of a rebuild when some change (`updated`).

    Documents are numbered by slot: entry i of a fresh index is document i; an update reuses the slots of
    removed entries. Dense score arrays have `capacity` entries (0 in free slots), and ties rank by
    qualified name, a catalog's order. Scores are BM25Okapi's (rank-bm25: its idf with the epsilon floor,
    k1, b) over weighted term frequencies, computed from the postings of the query's terms only: the same
    numbers `bm25.get_scores` gives, and the same for an updated index as for one built fresh.

    Args:
        entries: the tools (a catalog's entries: sorted by qualified name).
        analyzer: shared across builds so unchanged texts are not analysed again (default: a new one).
        k1, b: BM25Okapi's parameters.
        weights: what a word counts for in each field (FieldWeights).
        form_weight: what a word's exact form counts for next to its stem.
        schema_depth: nested parameter levels read.
    """

    def __init__(
        self,
        entries: Sequence[ToolEntry],
        analyzer: Analyzer | None = None,
        *,
        k1: float = BM25_K1,
        b: float = BM25_B,
        weights: FieldWeights = FIELD_WEIGHTS,
        form_weight: float = WORD_FORM_WEIGHT,
        schema_depth: int = SCHEMA_DEPTH,
    ) -> None:
        self.analyzer = analyzer or Analyzer()
        self.k1, self.b = k1, b
        self._analysis = (weights, form_weight, schema_depth)
        entries = list(entries)
        self._names: ServerNames | None = None
        with collector_paused():
            self._use(Corpus.build(entries, self._count(entries)))

    def _use(self, corpus: Corpus) -> None:
        self._corpus = corpus
        self._bm25: _Okapi | None = None
        self._contributions: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}
        """Term -> (slots, BM25 contribution to each: 8 bytes a posting, whether its idf is positive),
        computed on the term's first search in this state: contributions depend on the whole collection, so a
        change would otherwise recompute every term's, and the terms requests use again cost one addition."""
        # BM25Okapi's length normalisation, evaluated as get_scores evaluates it, once per state.
        avgdl = corpus.avgdl or 1.0
        self._norm = self.k1 * (1 - self.b + self.b * corpus.lengths / avgdl)

    @property
    def size(self) -> int:
        """Documents indexed."""
        return self._corpus.size

    @property
    def capacity(self) -> int:
        """Slots, free ones included: the length of `scores`' and `named`'s arrays."""
        return self._corpus.capacity

    @property
    def bm25(self) -> BM25Okapi | None:
        """The library's model over the same statistics (its `get_scores` gives the same scores); None
        when nothing is indexed. Built on first use: for checks, not for ranking."""
        if not self._corpus.postings:
            return None
        if self._bm25 is None:
            self._bm25 = _Okapi(self)
        return self._bm25

    def idf(self) -> dict[str, float]:
        """Term -> its BM25Okapi idf (epsilon floor included), for every indexed term."""
        corpus = self._corpus
        return {term: idf(corpus.size, len(slots), corpus.eps) for term, (slots, _) in corpus.postings.items()}

    def entry(self, slot: int) -> ToolEntry:
        """The entry in `slot`."""
        found = self._corpus.documents[slot]
        if found is None:
            raise KeyError(f"slot {slot} is free")
        return found

    def slot(self, name: str) -> int | None:
        """The slot of the entry with this qualified name."""
        return self._corpus.slot(name)

    def slots(self) -> np.ndarray:
        """Every slot in use, by qualified name: position -> slot (a catalog's order). Do not modify."""
        return self._corpus.order

    def positions(self) -> np.ndarray:
        """Slot -> position in `slots()` (-1 for a free slot). Do not modify."""
        return self._corpus.rank

    def with_k1(self, k1: float) -> LexicalIndex:
        """This index scoring with another k1: same documents, analysis, servers and b, no text analysed
        again (what hybrid ranking blends, BLEND_BM25_K1, next to the lexical ranking's BM25_K1)."""
        other = copy.copy(self)
        other.k1 = k1
        other._use(self._corpus)
        return other

    def updated(self, removed: Iterable[ToolEntry], added: Sequence[ToolEntry]) -> LexicalIndex | None:
        """This index without the entries named like `removed` and with `added`: only the changed entries'
        postings, lengths and names are replaced, and the scores are those of an index built fresh. None
        when the change touches more than UPDATE_TERMS_SHARE of the vocabulary: terms are merged one by one
        (about 25 us each), and text of words no other tool uses made an update of 100 tools take 8 s where
        a fresh build of the whole catalog took 2.6 s; the caller builds fresh then.

        Raises:
            KeyError: a removed name is not indexed, or an added one already is (and is not removed).
        """
        corpus = self._corpus
        gone: list[int] = []
        for entry in removed:
            slot = corpus.slot(entry.name)
            if slot is None:
                raise KeyError(f"{entry.name}: not in this index")
            gone.append(slot)
        held = [self.entry(slot) for slot in gone]
        parts = gather(held, self.analyzer, self._analysis[2])[0]
        names = self.analyzer.terms_by_id
        removed_terms = [names[term] for term in set(np.concatenate(parts).tolist())] if parts else []
        added = list(added)
        batch = self._count(added)
        if len(removed_terms) + len(batch.terms) > max(UPDATE_TERMS_MIN, UPDATE_TERMS_SHARE * self.terms()):
            return None
        updated = corpus.updated(gone, removed_terms, added, batch)
        other = copy.copy(self)
        other._use(updated)
        if self._names is not None:  # follow the servers that came or went
            touched = {entry.server for entry in [*held, *added]}
            came = [server for server in touched if server in updated.servers and server not in corpus.servers]
            gone_servers = [server for server in touched if server in corpus.servers and server not in updated.servers]
            other._names = self._names.after(came, gone_servers, self.analyzer.terms)
        return other

    def terms(self) -> int:
        """How many distinct terms the index holds."""
        return len(self._corpus.postings)

    def _count(self, entries: Sequence[ToolEntry]) -> Batch:
        weights, form_weight, depth = self._analysis
        return count(entries, self.analyzer, weights, form_weight, depth)

    def server_names(self) -> ServerNames:
        """The servers' name terms (`named`), found on first use: only hybrid ranking needs them."""
        if self._names is None:
            self._names = ServerNames.of(self._corpus.servers, self.analyzer.terms)
        return self._names

    def query_terms(self, query: str) -> list[str]:
        """The query's distinct index terms, in order. BM25Okapi would count a repeated query word again;
        requests repeat their topic words ("schedule ... the schedule"), which says nothing more about the
        tool they want."""
        return list(dict.fromkeys(self.analyzer.terms(query)))

    def named(self, terms: Iterable[str]) -> np.ndarray:
        """Which documents belong to a server the query names: every index term of the server's name is
        among `terms` ("create a Jira ticket" names `jira`; "brave-search" needs both words)."""
        corpus, names = self._corpus, self.server_names()
        mask = np.zeros(corpus.capacity, dtype=bool)
        wanted = set(terms)
        for server in {server for term in wanted for server in names.servers.get(term, ())}:
            if names.words[server] <= wanted:
                mask[corpus.servers[server]] = True
        return mask

    def reads(self, terms: Iterable[str]) -> int:
        """How many postings entries scoring `terms` reads (what `scores` costs)."""
        postings = self._corpus.postings
        return sum(len(posting[0]) for term in terms if (posting := postings.get(term)) is not None)

    def scores(self, terms: Sequence[str], within: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Dense BM25 scores by slot (0 for documents sharing no term) and the sorted slots of the
        documents that share one; with `within`, of those only the ones that can be among the best
        `within` (`top(scores, candidates, within)` is the same either way, ties included).

        Equal to `bm25.get_scores(terms)` on every document, computed from the postings only.
        """
        capacity = self._corpus.capacity
        known = self._contributions.get
        found = [pair for term in terms if (pair := known(term) or self._contribution(term)) is not None]
        if not found:
            return np.zeros(capacity, dtype=np.float64), np.empty(0, dtype=np.intp)
        slots = np.concatenate([pair[0] for pair in found])
        # bincount adds each slot's contributions in the order given, from 0.0: term by term, as get_scores.
        scores = np.bincount(slots, weights=np.concatenate([pair[1] for pair in found]), minlength=capacity)
        if all(pair[2] for pair in found):  # every contribution positive: the documents scored are those above 0
            if within is not None and slots.size >= NARROW_FROM:
                # The within-th best score among one term's documents is at most the within-th best of all,
                # and above 0: the documents reaching it hold every one `top` can return. The term with
                # the fewest documents (but enough) is read, where a request's rare word usually points.
                enough = [pair[0] for pair in found if len(pair[0]) >= within]
                if enough:
                    chosen = scores[min(enough, key=len)]
                    bound = np.partition(chosen, chosen.size - within)[chosen.size - within]
                    return scores, np.flatnonzero(scores >= bound)
            # Compared first: numpy's nonzero over a bool array is several times faster than over floats.
            return scores, np.flatnonzero(scores > 0)
        matched = np.zeros(capacity, dtype=bool)
        matched[slots] = True
        return scores, np.flatnonzero(matched)

    def _contribution(self, term: str) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """The slots holding `term`, its BM25 contribution to each and whether its idf is positive (then so
        is every contribution), kept for later searches."""
        corpus = self._corpus
        posting = corpus.postings.get(term)
        if posting is None:
            return None
        slots, narrow = posting
        freqs = narrow.astype(np.float64)
        k1 = self.k1
        weight = idf(corpus.size, len(slots), corpus.eps)
        # get_scores' expression, in its order: idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))).
        found = slots, weight * (freqs * (k1 + 1) / (freqs + self._norm[slots])), weight > 0
        self._contributions[term] = found
        return found

    def top(self, scores: np.ndarray, candidates: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The best `k` candidates as `(slot, score)`, highest score first, ties by qualified name."""
        if k <= 0 or candidates.size == 0:
            return []
        values = scores[candidates]
        if candidates.size > k:
            # Keep everything tied with the k-th best, then order exactly: no tie is broken by the partition.
            kth = np.partition(values, candidates.size - k)[candidates.size - k]
            keep = values >= kth
            candidates, values = candidates[keep], values[keep]
        order = np.lexsort((self._corpus.rank[candidates], -values))[:k]
        return [(int(candidates[i]), float(values[i])) for i in order]
