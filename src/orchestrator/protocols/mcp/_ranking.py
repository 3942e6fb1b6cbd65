"""Lexical ranking: text analysis and a BM25 index (rank-bm25's BM25Okapi) over tool entries.

Analysis: split on camelCase, snake_case, kebab-case, dots and any other non-letter; lowercase; drop
English stopwords and request words ("please", "want", "get"...); Snowball-stem (PyStemmer). A tool's
document is its server name, its tool name twice, its title, description, and parameter names and
descriptions. Scores are BM25Okapi's (its idf, k1, b), computed only for the documents that share a term
with the query through an inverted index: the same numbers `BM25Okapi.get_scores` gives, without a pass
over every document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import Stemmer
from rank_bm25 import BM25Okapi

from ._catalog import ToolEntry

__all__ = [
    "BM25_B",
    "BM25_K1",
    "NAME_WEIGHT",
    "STOPWORDS",
    "Analyzer",
    "LexicalIndex",
    "document_parts",
    "split_words",
    "tool_document",
]

BM25_K1 = 2.0
"""Term-frequency saturation, above rank-bm25's 1.5: a word repeated in a tool's name and prose keeps more
weight. With BM25_B, chosen on the development sets; see docs/tool-search.md."""
BM25_B = 1.0
"""Full length normalisation (rank-bm25: 0.75): tool texts range from five words to pages of prose, and a
long description should not win on incidental matches. With BM25_K1 it raised MRR on both halves of every
retrieval set over the library defaults."""
NAME_WEIGHT = 2
"""The tool name is counted this many times: a word in the name says more than one in long prose."""
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
    the texts that changed. Terms are numbered from 1 in the order first seen.
    """

    def __init__(self, *, stopwords: frozenset[str] = STOPWORDS, stem: bool = True, min_length: int = 2) -> None:
        self._stopwords = stopwords
        self._stemmer = Stemmer.Stemmer("english") if stem else None
        self._min_length = min_length
        self._run_terms: dict[str, tuple[str, ...]] = {}
        self._run_ids: dict[str, tuple[int, ...]] = {}
        self._texts: dict[str, np.ndarray] = {}
        self.vocabulary: dict[str, int] = {}
        """term -> id (from 1)."""
        self.terms_by_id: list[str] = [""]

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
        out = np.fromiter(chain.from_iterable(found), np.int64)
        if len(self._texts) >= TEXT_CACHE_LIMIT:
            self._texts.clear()
        self._texts[text] = out
        return out

    def _split(self, run: str) -> tuple[str, ...]:
        """The terms of one run: split on case and digits, lowercased, stopwords dropped, stemmed."""
        terms = []
        for token in _TOKEN.findall(run):
            word = token.lower()
            if word in self._stopwords or (len(word) < self._min_length and not word.isdigit()):
                continue
            terms.append(self._stemmer.stemWord(word) if self._stemmer is not None else word)
        return tuple(terms)

    def _term_id(self, term: str) -> int:
        number = self.vocabulary.get(term)
        if number is None:
            number = self.vocabulary[term] = len(self.terms_by_id)
            self.terms_by_id.append(term)
        return number


def document_parts(entry: ToolEntry, analyzer: Analyzer) -> list[np.ndarray]:
    """Term ids BM25 indexes for one tool, as the arrays of its texts: server, name (NAME_WEIGHT
    times), title, description, then each parameter name and description."""
    texts = [entry.server, entry.tool, entry.title or "", entry.description]
    texts += _schema_texts(entry.input_schema, SCHEMA_DEPTH)
    cached = analyzer._texts.get  # the hot loop of an index build: most texts are cached
    parts = [cached(text) for text in texts]
    for index, part in enumerate(parts):
        if part is None:
            parts[index] = analyzer.ids(texts[index])
    return [parts[0], *([parts[1]] * NAME_WEIGHT), *parts[2:]]


def tool_document(entry: ToolEntry, analyzer: Analyzer) -> list[str]:
    """The terms of one tool's document: what a plain BM25Okapi would be given for the same ranking."""
    return [analyzer.terms_by_id[term] for part in document_parts(entry, analyzer) for term in part.tolist()]


def _schema_texts(schema: Any, depth: int) -> list[str]:
    """Parameter names and descriptions of a JSON schema, nested objects and array items included."""
    texts: list[str] = []
    _collect_schema_texts(schema, depth, texts)
    return texts


def _collect_schema_texts(schema: Any, depth: int, texts: list[str]) -> None:
    # Runs for every parameter of every tool: exact type checks (JSON objects are dicts) are the fast ones.
    if type(schema) is not dict or depth <= 0:
        return
    properties = schema.get("properties")
    if type(properties) is dict:
        for name, prop in properties.items():
            texts.append(name if type(name) is str else str(name))
            if type(prop) is dict:
                description = prop.get("description")
                if type(description) is str:
                    texts.append(description)
                if depth > 1 and ("properties" in prop or "items" in prop):
                    _collect_schema_texts(prop, depth - 1, texts)
    items = schema.get("items")
    if type(items) is dict:
        _collect_schema_texts(items, depth, texts)


@dataclass(frozen=True)
class _Corpus:
    """Corpus statistics counted with array operations, what BM25Okapi's `_initialize` would count."""

    size: int
    doc_len: list[int]
    doc_freq: dict[str, int]
    """term -> number of documents containing it."""
    pair_docs: np.ndarray
    pair_terms: np.ndarray = field(repr=False)
    pair_freqs: np.ndarray = field(repr=False)
    """(document, term id, frequency) for every distinct term of every document, term-major."""
    terms_by_id: list[str] = field(repr=False)


class _Okapi(BM25Okapi):
    """rank-bm25's BM25Okapi over statistics counted with numpy instead of per-token Python loops.

    The library computes idf (with its epsilon floor) and holds k1, b, avgdl and the document lengths;
    `doc_freqs`, read only by `get_scores` and `get_batch_scores`, is built on first use, so the library's
    own scoring stays available to check the index against.
    """

    def __init__(self, corpus: _Corpus, *, k1: float, b: float) -> None:
        self._corpus = corpus
        self._doc_freqs: list[dict[str, int]] | None = None
        super().__init__(corpus, k1=k1, b=b)  # type: ignore[arg-type]  # corpus reaches _initialize below

    def _initialize(self, corpus: _Corpus) -> dict[str, int]:  # type: ignore[override]
        self.corpus_size = corpus.size
        self.doc_len = corpus.doc_len
        self.avgdl = sum(corpus.doc_len) / corpus.size
        return corpus.doc_freq

    @property  # type: ignore[override]
    def doc_freqs(self) -> list[dict[str, int]]:
        if not self._doc_freqs:
            freqs: list[dict[str, int]] = [{} for _ in range(self._corpus.size)]
            corpus = self._corpus
            names = corpus.terms_by_id
            pairs = zip(corpus.pair_docs.tolist(), corpus.pair_terms.tolist(), corpus.pair_freqs.tolist())
            for doc, term, freq in pairs:
                freqs[doc][names[term]] = int(freq)
            self._doc_freqs = freqs
        return self._doc_freqs

    @doc_freqs.setter
    def doc_freqs(self, value: list[dict[str, int]]) -> None:
        self._doc_freqs = value


class LexicalIndex:
    """BM25 over a fixed list of entries; documents are numbered in the entries' order (the tie-break)."""

    def __init__(
        self,
        entries: Sequence[ToolEntry],
        analyzer: Analyzer | None = None,
        *,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> None:
        self.analyzer = analyzer or Analyzer()
        self.size = len(entries)
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._idf: dict[str, float] = {}
        self.bm25: BM25Okapi | None = None
        """The library's model over the same corpus (its `get_scores` gives the same scores)."""
        documents = [document_parts(entry, self.analyzer) for entry in entries]
        corpus, bounds = _count(documents, self.analyzer.terms_by_id)
        if not bounds:  # nothing to index (BM25Okapi would divide by an empty vocabulary)
            return
        bm25 = _Okapi(corpus, k1=k1, b=b)
        self.bm25 = bm25
        self._idf = bm25.idf
        # The weight is the expression get_scores evaluates, in the same order, so idf * weight is bit
        # for bit the library's contribution of a term to a document.
        norm = bm25.k1 * (1 - bm25.b + bm25.b * np.asarray(corpus.doc_len, dtype=np.float64) / bm25.avgdl)
        freqs = corpus.pair_freqs
        weights = freqs * (bm25.k1 + 1) / (freqs + norm[corpus.pair_docs])
        docs = corpus.pair_docs
        self._postings = {term: (docs[start:end], weights[start:end]) for term, start, end in bounds}

    def query_terms(self, query: str) -> list[str]:
        """The query's distinct index terms, in order. BM25Okapi would count a repeated query word again;
        requests repeat their topic words ("schedule ... the schedule"), and counting them once raised
        hit@5 on every retrieval set."""
        return list(dict.fromkeys(self.analyzer.terms(query)))

    def scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Dense BM25 scores (0 for documents sharing no term) and the sorted ids of documents that share one.

        Equal to `BM25Okapi.get_scores(terms)` on every document, computed from the postings only.
        """
        scores = np.zeros(self.size, dtype=np.float64)
        matched = np.zeros(self.size, dtype=bool)
        for term in terms:
            posting = self._postings.get(term)
            if posting is None:
                continue
            ids, weight = posting
            scores[ids] += self._idf[term] * weight
            matched[ids] = True
        return scores, np.flatnonzero(matched)

    @staticmethod
    def top(scores: np.ndarray, candidates: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The best `k` candidates as `(doc_id, score)`, highest score first, ties by lower doc id."""
        if k <= 0 or candidates.size == 0:
            return []
        values = scores[candidates]
        if candidates.size > k:
            # Keep everything tied with the k-th best, then order exactly: no tie is broken by the partition.
            kth = np.partition(values, candidates.size - k)[candidates.size - k]
            keep = values >= kth
            candidates, values = candidates[keep], values[keep]
        order = np.lexsort((candidates, -values))[:k]
        return [(int(candidates[i]), float(values[i])) for i in order]


def _count(documents: list[list[np.ndarray]], terms_by_id: list[str]) -> tuple[_Corpus, list[tuple[str, int, int]]]:
    """Distinct (term, document) pairs with frequencies, term-major with documents ascending, from one
    sort of the concatenated corpus (keys `term * size + document`); and each term's slice of them."""
    size = len(documents)
    lengths = np.fromiter((sum(part.size for part in parts) for parts in documents), np.int64, size)
    flat = np.concatenate([part for parts in documents for part in parts]) if size else np.empty(0, np.int64)
    # 32-bit keys sort about twice as fast; they fit unless vocabulary x documents reaches 2**31.
    key_type = np.int32 if len(terms_by_id) * max(size, 1) < np.iinfo(np.int32).max else np.int64
    keys = flat.astype(key_type) * key_type(size) + np.repeat(np.arange(size, dtype=key_type), lengths)
    pairs, pair_freqs = np.unique(keys, return_counts=True)
    pair_term_ids = pairs // key_type(max(size, 1))
    starts = np.flatnonzero(np.diff(pair_term_ids, prepend=-1))  # pairs are sorted: a term starts where its id changes
    ends = np.append(starts[1:], pairs.size)
    terms = [terms_by_id[term] for term in pair_term_ids[starts].tolist()]
    bounds = list(zip(terms, starts.tolist(), ends.tolist()))
    corpus = _Corpus(
        size=size,
        doc_len=lengths.tolist(),
        doc_freq=dict(zip(terms, (ends - starts).tolist())),
        pair_docs=(pairs % key_type(max(size, 1))).astype(np.int64),
        pair_terms=pair_term_ids,
        pair_freqs=pair_freqs.astype(np.float64),
        terms_by_id=terms_by_id,
    )
    return corpus, bounds
