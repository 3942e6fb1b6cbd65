"""Lexical ranking: text analysis and a BM25 index (rank-bm25's BM25Okapi) over tool entries.

Analysis: split on camelCase, snake_case, kebab-case, dots and any other non-letter; lowercase; drop
English stopwords and request words ("please", "want", "get"...); Snowball-stem (PyStemmer), and keep
each word's exact form as a second term beside its stem ("=issues" next to "issu"), so a tool using the
request's own word ranks above one using another form of it. A tool's document is its server name, tool
name, title, description, and parameter names and descriptions, each field's words counted with the
field's weight (FIELD_WEIGHTS) and exact forms with WORD_FORM_WEIGHT: BM25's term frequencies are these
weighted counts. Scores are BM25Okapi's (its idf, k1, b) over those frequencies, computed only for the
documents that share a term with the query through an inverted index: the same numbers
`BM25Okapi.get_scores` gives, without a pass over every document.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import Stemmer
from rank_bm25 import BM25Okapi

from ..protocols.mcp._catalog import ToolEntry
from ._postings import EPSILON, Batch, Corpus, idf
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


@dataclass(frozen=True)
class FieldWeights:
    """What one occurrence of a word counts for in BM25's term frequency, by where in the tool it is."""

    server: float = 1.0
    name: float = 2.0
    """A word in the tool's name says more than one in long prose."""
    title: float = 1.0
    description: float = 1.0
    parameter_name: float = 1.0
    parameter_description: float = 1.0
    """Parameter prose is mostly about values and formats; half weight was no better on the four sets
    taken together (kept as an option for catalogs with long schemas)."""

    def values(self) -> tuple[float, float, float, float, float, float]:
        """The weights in document order: server, name, title, description, parameter name, description."""
        return (self.server, self.name, self.title, self.description, self.parameter_name, self.parameter_description)


FIELD_WEIGHTS = FieldWeights()
FORM_PREFIX = "="
"""Marks an exact-form term ("=issues"); analysis never produces it inside a word."""
SCHEMA_DEPTH = 2
"""Nested parameter levels read (object properties, array items): deeper ones are rarely searched for."""

_ENGLISH = """
a about above after again against all am an and any are aren't as at be because been before being below
between both but by could couldn't did didn't do does doesn't doing don't down during each few for from
further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
mustn't my myself no nor not of off on once only or other ought our ours ourselves out over own same
shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs them
themselves then there there's these they they'd they'll they're they've this those through to too under
until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where where's
which while who who's whom why why's with won't would wouldn't you you'd you'll you're you've your yours
yourself yourselves
"""
_REQUEST = """
please want wants wanted need needs would could can may might also like help tell give know let get
gets getting got use using used hi hello thanks thank kindly just
"""
STOPWORDS = frozenset(
    word for text in (_ENGLISH, _REQUEST) for raw in text.split() for word in re.split(r"'", raw) if word
)
"""English function words (the NLTK list's core) plus words every request carries and no tool is about.
Contractions are split the way the tokenizer splits them ("don't" -> "don", "t")."""

_RUN = re.compile(r"[A-Za-z0-9]+")
_UNICODE_RUN = re.compile(r"[^\W_]+")
"""Runs of letters and digits: one cheap pass over the text; each distinct run is split further once."""
_TOKEN = re.compile(r"[A-Z]{2,}(?=[A-Z][a-z])|[A-Z]?[^\W\d_A-Z]+|[A-Z]+|\d+")
"""Words within a run: `getHTTPResponse_v2.json` -> get, HTTP, Response, v, 2, json."""

TEXT_CACHE_LIMIT = 200_000
"""Analysed texts (and runs) kept per analyzer. Re-indexing a changed catalog only analyses the texts
that changed; the bound keeps a long-lived gateway's memory flat."""


def _runs(text: str) -> list[str]:
    return (_RUN if text.isascii() else _UNICODE_RUN).findall(text)


def split_words(text: str) -> list[str]:
    """Lowercased words of `text`, split as the analyzer splits them, before stopwords and stemming."""
    return [token.lower() for run in _runs(text) for token in _TOKEN.findall(run)]


class Analyzer:
    """Text -> index terms, caching each run of letters and digits and each tool text.

    One analyzer serves every index an engine builds, so re-indexing a changed catalog analyses only
    the texts that changed. Terms are numbered from 1 in the order first seen. With stemming and
    `word_forms`, every word gives its stem and then its exact form (FORM_PREFIX + word): "issues" ->
    "issu", "=issues".
    """

    def __init__(
        self,
        *,
        stopwords: frozenset[str] = STOPWORDS,
        stem: bool = True,
        min_length: int = 2,
        word_forms: bool = True,
    ) -> None:
        self._stopwords = stopwords
        self._stemmer = Stemmer.Stemmer("english") if stem else None
        self._min_length = min_length
        self._word_forms = word_forms and stem
        self._run_terms: dict[str, tuple[str, ...]] = {}
        self._run_ids: dict[str, tuple[int, ...]] = {}
        self._texts: dict[str, np.ndarray] = {}
        self.vocabulary: dict[str, int] = {}
        """term -> id (from 1)."""
        self.terms_by_id: list[str] = [""]
        self._forms = bytearray(1)
        """1 where the term with that id is an exact form, 0 for a stem (and for the unused id 0)."""

    def form_flags(self) -> np.ndarray:
        """For every term id so far, 1 when it is an exact form (FORM_PREFIX), else 0."""
        return np.frombuffer(bytes(self._forms), dtype=np.uint8)

    def terms(self, text: str) -> list[str]:
        """Index terms of `text`, in order, repeats kept."""
        runs = _runs(text)
        cache = self._run_terms
        try:  # usually every run was seen before
            found = list(map(cache.__getitem__, runs))
        except KeyError:
            if len(cache) >= TEXT_CACHE_LIMIT:  # queries bring new runs forever (numbers, names)
                cache.clear()
            for run in runs:
                if run not in cache:
                    cache[run] = self._split(run)
            found = list(map(cache.__getitem__, runs))
        return list(chain.from_iterable(found))

    def ids(self, text: str) -> np.ndarray:
        """Term ids of a tool text, cached by the text. The returned array must not be modified."""
        cached = self._texts.get(text)
        if cached is not None:
            return cached
        runs = _runs(text)
        cache = self._run_ids
        try:
            found = list(map(cache.__getitem__, runs))
        except KeyError:
            if len(cache) >= TEXT_CACHE_LIMIT:
                cache.clear()
            for run in runs:
                if run not in cache:
                    cache[run] = tuple(map(self._term_id, self._split(run)))
            found = list(map(cache.__getitem__, runs))
        out = np.fromiter(chain.from_iterable(found), np.int32)
        if len(self._texts) >= TEXT_CACHE_LIMIT:
            self._texts.clear()
        self._texts[text] = out
        return out

    def _split(self, run: str) -> tuple[str, ...]:
        """The terms of one run: split on case and digits, lowercased, stopwords dropped, stemmed (each
        stem followed by the word's exact form, with `word_forms`)."""
        terms = []
        stemmer, forms = self._stemmer, self._word_forms
        for token in _TOKEN.findall(run):
            word = token.lower()
            if word in self._stopwords or (len(word) < self._min_length and not word.isdigit()):
                continue
            terms.append(stemmer.stemWord(word) if stemmer is not None else word)
            if forms:
                terms.append(FORM_PREFIX + word)
        return tuple(terms)

    def _term_id(self, term: str) -> int:
        number = self.vocabulary.get(term)
        if number is None:
            number = self.vocabulary[term] = len(self.terms_by_id)
            self.terms_by_id.append(term)
            self._forms.append(term.startswith(FORM_PREFIX))
        return number


CONTRIBUTION_CACHE = 2_000_000
"""Postings pairs whose BM25 contributions an index keeps (16 MB): a term's contributions depend on the
whole collection, so they are computed on the term's first search after each change, and the terms
requests use again are scored by one addition."""

_FIELD_COUNT = 6
"""Fields of a tool document, in FieldWeights.values() order."""


def tool_document(
    entry: ToolEntry,
    analyzer: Analyzer,
    weights: FieldWeights = FIELD_WEIGHTS,
    form_weight: float = WORD_FORM_WEIGHT,
    depth: int = SCHEMA_DEPTH,
) -> dict[str, float]:
    """One tool's BM25 term frequencies, term -> weighted count: what the index holds for the tool (and
    what `BM25Okapi.doc_freqs` gives for it). Kept simple as the reference for the vectorised build."""
    names, descriptions = _schema_texts(entry.input_schema, depth)
    server, name, title, description, parameter_name, parameter_description = weights.values()
    texts = [(entry.server, server), (entry.tool, name), (entry.title or "", title), (entry.description, description)]
    texts += [(text, parameter_name) for text in names] + [(text, parameter_description) for text in descriptions]
    frequencies: dict[str, float] = {}
    for text, weight in texts:
        for term in analyzer.terms(text):
            frequencies[term] = frequencies.get(term, 0.0) + weight
    return {term: count * form_weight if term.startswith(FORM_PREFIX) else count for term, count in frequencies.items()}


def _schema_texts(schema: Any, depth: int) -> tuple[list[str], list[str]]:
    """Parameter names, and parameter descriptions, of a JSON schema, nested objects and array items
    included."""
    names: list[str] = []
    descriptions: list[str] = []
    _collect_schema_texts(schema, depth, names, descriptions)
    return names, descriptions


def _collect_schema_texts(schema: Any, depth: int, names: list[str], descriptions: list[str]) -> None:
    # Runs for every parameter of every tool: exact type checks (JSON objects are dicts) are the fast ones.
    if type(schema) is not dict or depth <= 0:
        return
    properties = schema.get("properties")
    if type(properties) is dict:
        for name, prop in properties.items():
            names.append(name if type(name) is str else str(name))
            if type(prop) is dict:
                description = prop.get("description")
                if type(description) is str:
                    descriptions.append(description)
                if depth > 1 and ("properties" in prop or "items" in prop):
                    _collect_schema_texts(prop, depth - 1, names, descriptions)
    items = schema.get("items")
    if type(items) is dict:
        _collect_schema_texts(items, depth, names, descriptions)


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
        self.idf = {term: idf(corpus.size, len(slots), corpus.eps) for term, (slots, _) in corpus.postings.items()}
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
        self._use(Corpus.build(entries, self._count(entries), self._server_words(entries)))

    def _use(self, corpus: Corpus) -> None:
        self._corpus = corpus
        self._bm25: _Okapi | None = None
        self._contributions: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        """Term -> (slots, BM25 contribution to each), computed on a term's first search in this state."""
        self._contributed = 0
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

    def updated(self, removed: Iterable[ToolEntry], added: Sequence[ToolEntry]) -> LexicalIndex:
        """This index without the entries named like `removed` and with `added`: only the changed entries'
        postings, lengths and names are replaced, and the scores are those of an index built fresh.

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
        parts = _gather(held, self.analyzer, self._analysis[2])[0]
        names = self.analyzer.terms_by_id
        removed_terms = [names[term] for term in set(np.concatenate(parts).tolist())] if parts else []
        added = list(added)
        updated = corpus.updated(gone, removed_terms, added, self._count(added), self._server_words(added))
        other = copy.copy(self)
        other._use(updated)
        return other

    def _count(self, entries: Sequence[ToolEntry]) -> Batch:
        weights, form_weight, depth = self._analysis
        return _count(*_gather(entries, self.analyzer, depth), self.analyzer, weights, form_weight)

    def _server_words(self, entries: Iterable[ToolEntry]) -> dict[str, frozenset[str]]:
        return {server: frozenset(self.analyzer.terms(server)) for server in {entry.server for entry in entries}}

    def query_terms(self, query: str) -> list[str]:
        """The query's distinct index terms, in order. BM25Okapi would count a repeated query word again;
        requests repeat their topic words ("schedule ... the schedule"), and counting them once raised
        hit@5 on every retrieval set."""
        return list(dict.fromkeys(self.analyzer.terms(query)))

    def named(self, terms: Iterable[str]) -> np.ndarray:
        """Which documents belong to a server the query names: every index term of the server's name is
        among `terms` ("create a Jira ticket" names `jira`; "brave-search" needs both words)."""
        corpus = self._corpus
        mask = np.zeros(corpus.capacity, dtype=bool)
        wanted = set(terms)
        for server in {server for term in wanted for server in corpus.word_servers.get(term, ())}:
            if corpus.server_words[server] <= wanted:
                mask[corpus.servers[server]] = True
        return mask

    def scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Dense BM25 scores by slot (0 for documents sharing no term) and the sorted slots of the
        documents that share one.

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
        matched = np.zeros(capacity, dtype=bool)
        matched[slots] = True
        return scores, np.flatnonzero(matched)

    def _contribution(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The slots holding `term` and its BM25 contribution to each, kept for later searches (up to
        CONTRIBUTION_CACHE pairs per state: then the least recently computed go first)."""
        corpus = self._corpus
        posting = corpus.postings.get(term)
        if posting is None:
            return None
        slots, narrow = posting
        freqs = narrow.astype(np.float64)
        k1 = self.k1
        # get_scores' expression, in its order: idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))).
        found = slots, idf(corpus.size, len(slots), corpus.eps) * (freqs * (k1 + 1) / (freqs + self._norm[slots]))
        cache = self._contributions
        while cache and self._contributed + len(slots) > CONTRIBUTION_CACHE:
            self._contributed -= len(cache.pop(next(iter(cache)))[0])
        cache[term] = found
        self._contributed += len(slots)
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


def _gather(
    entries: Sequence[ToolEntry], analyzer: Analyzer, depth: int
) -> tuple[list[np.ndarray], list[int], np.ndarray]:
    """Every tool's texts as term-id arrays, in document and field order (server, name, title,
    description, parameter names, parameter descriptions), their sizes, and how many texts each field has
    per tool."""
    parts: list[np.ndarray] = []
    sizes: list[int] = []
    counts: list[tuple[int, int]] = []
    known = analyzer._texts.get  # the hot loop of an index build: most texts are cached
    for entry in entries:
        names, descriptions = _schema_texts(entry.input_schema, depth)
        texts = [entry.server, entry.tool, entry.title or "", entry.description, *names, *descriptions]
        found: list[Any] = list(map(known, texts))
        try:
            lengths = list(map(len, found))
        except TypeError:  # len(None): a text not analysed yet (often only the tool's name)
            found = [part if part is not None else analyzer.ids(text) for part, text in zip(found, texts, strict=True)]
            lengths = list(map(len, found))
        parts += found
        sizes += lengths
        counts.append((len(names), len(descriptions)))
    texts_per_field = np.ones((len(entries), _FIELD_COUNT), np.int64)
    if counts:
        texts_per_field[:, 4:] = counts
    return parts, sizes, texts_per_field


def _count(
    parts: list[np.ndarray],
    part_sizes: list[int],
    texts_per_field: np.ndarray,
    analyzer: Analyzer,
    weights: FieldWeights,
    form_weight: float,
) -> Batch:
    """Distinct (term, document) pairs with weighted frequencies, term-major with documents ascending, and
    each document's weighted length.

    Words come in document order, so a stable sort by term id alone orders them by (term, document) and
    puts each pair's words next to each other; their field weights are summed per pair, and exact forms
    scaled by `form_weight`. Weights are sums of halves, so the frequencies are exact in any order.
    """
    size = len(texts_per_field)
    terms_by_id = analyzer.terms_by_id
    sizes = np.array(part_sizes, dtype=np.int64)
    flat = np.concatenate(parts) if parts else np.empty(0, np.int32)
    # float32 holds every sum of eighths below 2**21 exactly, and moves half the bytes of float64.
    part_weights = np.repeat(np.tile(np.array(weights.values(), np.float32), size), texts_per_field.ravel())
    part_docs = np.repeat(np.arange(size, dtype=np.int32), texts_per_field.sum(axis=1))
    order = _stable_order(flat, len(terms_by_id))
    terms = flat[order]
    docs = np.repeat(part_docs, sizes)[order]
    frequencies = np.repeat(part_weights, sizes)[order]
    firsts = np.ones(terms.size, dtype=bool)
    firsts[1:] = (terms[1:] != terms[:-1]) | (docs[1:] != docs[:-1])
    firsts = np.flatnonzero(firsts)
    if firsts.size:
        frequencies = np.add.reduceat(frequencies, firsts)
    frequencies = frequencies.astype(np.float64)
    pair_terms, pair_docs = terms[firsts], docs[firsts]
    frequencies[analyzer.form_flags()[pair_terms].astype(bool)] *= form_weight
    starts = np.flatnonzero(np.diff(pair_terms, prepend=-1))  # a term starts where its id changes
    return Batch(
        terms=[terms_by_id[term] for term in pair_terms[starts].tolist()],
        starts=starts,
        docs=pair_docs.astype(np.int32),
        freqs=frequencies,
        lengths=np.bincount(pair_docs, weights=frequencies, minlength=size),
    )


_RADIX_LIMIT = 1 << 16
"""numpy's stable argsort is a radix sort for 16-bit integers (linear time), a merge sort above."""


def _stable_order(term_ids: np.ndarray, vocabulary: int) -> np.ndarray:
    """The permutation sorting `term_ids` stably: by 16-bit digits, low then high (LSD radix), when the
    vocabulary needs more than one."""
    if vocabulary <= _RADIX_LIMIT:
        return np.argsort(term_ids.astype(np.uint16), kind="stable")
    order = np.argsort((term_ids & 0xFFFF).astype(np.uint16), kind="stable")
    high = (term_ids[order] >> 16).astype(np.uint16 if vocabulary <= _RADIX_LIMIT**2 else np.int64)
    return order[np.argsort(high, kind="stable")]
