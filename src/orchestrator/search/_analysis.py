"""Text analysis for lexical ranking: words, stopwords, stems and exact forms, and what a tool's
document is made of.

Analysis: split on camelCase, snake_case, kebab-case, dots and any other non-letter; lowercase; drop
English stopwords and request words ("please", "want", "get"...); Snowball-stem (PyStemmer), and keep
each word's exact form as a second term beside its stem ("=issues" next to "issu"), so a tool using the
request's own word ranks above one using another form of it. A tool's document is its server name, tool
name, title, description, and parameter names and descriptions, each field's words counted with the
field's weight (FIELD_WEIGHTS) and exact forms with WORD_FORM_WEIGHT: BM25's term frequencies are these
weighted counts (`tool_document`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
import Stemmer

from ._tuning import WORD_FORM_WEIGHT

if TYPE_CHECKING:
    from ..protocols.mcp._catalog import ToolEntry

__all__ = [
    "FIELD_COUNT",
    "FIELD_WEIGHTS",
    "FORM_PREFIX",
    "SCHEMA_DEPTH",
    "STOPWORDS",
    "Analyzer",
    "FieldWeights",
    "schema_texts",
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
TEXT_CACHE_BYTES = 256 * 1024 * 1024
"""...and at most this much text (about): 200,000 texts of 8,000 emoji are 6 GB. A server re-listing
long texts again and again (found by red-teaming: 5.9 GB after 25 re-lists) empties the cache instead."""


def _runs(text: str) -> list[str]:
    if text.isascii():
        return _RUN.findall(text)
    # Composed first (NFC): "résumé" typed with combining accents (NFD, as macOS file names and some
    # servers send it) split into "r", "sume" and was found by no request typed the usual way.
    return _UNICODE_RUN.findall(unicodedata.normalize("NFC", text))


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
        self._text_bytes = 0
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
        out = np.fromiter(self.term_ids(text), np.int32)
        size = len(text) if text.isascii() else 4 * len(text)  # what the string holds, about
        if len(self._texts) >= TEXT_CACHE_LIMIT or self._text_bytes + size > TEXT_CACHE_BYTES:
            self._texts.clear()
            self._text_bytes = 0
        self._texts[text] = out
        self._text_bytes += size
        return out

    def term_ids(self, text: str) -> Iterator[int]:
        """Term ids of `text`, in order, without keeping the text (a server name: one per server)."""
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
        return chain.from_iterable(found)

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


FIELD_COUNT = 6
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
    names, descriptions = schema_texts(entry.input_schema, depth)
    server, name, title, description, parameter_name, parameter_description = weights.values()
    texts = [(entry.server, server), (entry.tool, name), (entry.title or "", title), (entry.description, description)]
    texts += [(text, parameter_name) for text in names] + [(text, parameter_description) for text in descriptions]
    frequencies: dict[str, float] = {}
    for text, weight in texts:
        for term in analyzer.terms(text):
            frequencies[term] = frequencies.get(term, 0.0) + weight
    return {term: count * form_weight if term.startswith(FORM_PREFIX) else count for term, count in frequencies.items()}


def schema_texts(schema: Any, depth: int) -> tuple[list[str], list[str]]:
    """Parameter names, and parameter descriptions, of a JSON schema, nested objects and array items
    included."""
    names: list[str] = []
    descriptions: list[str] = []
    _collectschema_texts(schema, depth, names, descriptions)
    return names, descriptions


def _collectschema_texts(schema: Any, depth: int, names: list[str], descriptions: list[str]) -> None:
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
                    _collectschema_texts(prop, depth - 1, names, descriptions)
    items = schema.get("items")
    if type(items) is dict:
        _collectschema_texts(items, depth, names, descriptions)
