"""Learned evidence: earlier requests that led to a successful call of a tool, a third ranking opinion.

    TraceEvidence(load, settings)   what the engine asks (`current(catalog, index)`): the traces every
                                    replica recorded (`orchestrator._traces`), re-read every `refresh_s`
    LearnedEvidence                 one catalog version's evidence: `lexical(...)` and `hybrid(...)` add
                                    it to the scores of the engine's one ranking place (`_scores`)

A request close to an earlier one that led to a tool is evidence for that tool. Closeness is measured two
ways and each must pass a floor, so only near-repeats count and a tool's own text is never drowned:

    lexical   the cosine of the two requests' binary tf-idf vectors (stems, idf of the catalog's index)
    vectors   (hybrid) the best cosine of the request's sentences with the earlier request's sentences
              that match the tool best (the part of a multi-part task that was about this tool)

A tool's evidence is its best earlier request's `weight * (similarity - floor) / (1 - floor)`, `weight`
halving every `half_life_days`. Guard rails: only successful calls are traces; each spawn gives a tool one
trace (its latest); a tool has evidence only once `min_spawns` distinct spawns called it, so one spawn,
however many traces it makes, changes nothing any other spawn sees; tools that left the catalog have none.
With no evidence for any tool the engine never calls in here and ranks exactly as without traces.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._config import TraceSettings
from .._errors import SemanticUnavailable
from ._lexical import FORM_PREFIX
from ._tuning import (
    EVIDENCE_HYBRID_LEXICAL_WEIGHT,
    EVIDENCE_LEXICAL_FLOOR,
    EVIDENCE_LEXICAL_WEIGHT,
    EVIDENCE_VECTOR_FLOOR,
    EVIDENCE_VECTOR_WEIGHT,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .._traces import Trace
    from ..protocols.mcp._catalog import ToolCatalog
    from ._embedding import EmbeddingRuntime
    from ._embedding.vectors import ToolVectors

__all__ = ["TRACE_VECTORS", "EvidenceSource", "LearnedEvidence", "TraceEvidence", "trace_vectors"]

log = logging.getLogger(__name__)

DAY_S = 86_400.0
TRACE_VECTORS = "traces"
"""Sub-folder of the vector cache holding earlier requests' sentence vectors, apart from the tool vectors
(whose cache keeps the current catalog's first)."""
BUILT_KEPT = 8
"""Evidence builds kept (catalog version x with or without vectors): a gateway serves a handful of profiles."""


class _Words(Protocol):
    def terms(self, text: str) -> list[str]: ...


class _Index(Protocol):
    """What evidence reads of the engine's lexical index (`LexicalIndex`): its analysis, idf and scores."""

    @property
    def analyzer(self) -> _Words: ...

    @property
    def bm25(self) -> Any: ...

    def query_terms(self, query: str) -> list[str]: ...

    def scores(self, terms: Sequence[str]) -> tuple[NDArray[np.float64], NDArray[np.intp]]: ...


class EvidenceSource(Protocol):
    """What the engine asks once per search: the evidence for a catalog version, or None (no tool has any)."""

    def current(self, catalog: ToolCatalog, index: _Index, *, vectors: bool) -> LearnedEvidence | None:
        """`vectors`: the engine ranks hybrid and can use vector evidence (else only lexical evidence is
        built, and no model is loaded for it)."""
        ...


@dataclass(frozen=True)
class _Requests:
    """Earlier requests as unit tf-idf vectors in postings: term -> (request ids, weights)."""

    postings: dict[str, tuple[NDArray[np.intp], NDArray[np.float64]]]
    size: int


class LearnedEvidence:
    """One catalog version's evidence, ready to add to a search's scores. Immutable once built.

    Args:
        size: documents in the catalog.
        idf: term -> idf of the catalog's index (the weight of a word in request similarity).
        requests: per earlier request (distinct text) its (document, weight) pairs.
        texts: the text of each request (same order).
        sentences: optional vector evidence: (unit vectors, per row its (document, weight) pairs).
    """

    def __init__(
        self,
        size: int,
        idf: dict[str, float],
        requests: list[list[tuple[int, float]]],
        terms: list[set[str]],
        sentences: tuple[NDArray[np.float32], list[list[tuple[int, float]]]] | None = None,
    ) -> None:
        self.size = size
        self._idf = idf
        self._top_idf = max(idf.values(), default=1.0)
        self._requests = requests
        self._lexical = self._index(terms)
        self._sentences = sentences

    @property
    def has_vectors(self) -> bool:
        return self._sentences is not None and self._sentences[0].shape[0] > 0

    def _weights(self, terms: set[str]) -> dict[str, float]:
        """A unit tf-idf vector of a term set (binary term frequencies; stems only)."""
        weights = {term: self._idf.get(term, self._top_idf) for term in terms if not term.startswith(FORM_PREFIX)}
        norm = math.sqrt(sum(value * value for value in weights.values()))
        return {term: value / norm for term, value in weights.items()} if norm > 0 else {}

    def _index(self, terms: list[set[str]]) -> _Requests:
        lists: dict[str, tuple[list[int], list[float]]] = {}
        for request, words in enumerate(terms):
            for term, weight in self._weights(words).items():
                ids, values = lists.setdefault(term, ([], []))
                ids.append(request)
                values.append(weight)
        postings = {
            term: (np.asarray(ids, dtype=np.intp), np.asarray(values, dtype=np.float64))
            for term, (ids, values) in lists.items()
        }
        return _Requests(postings, len(terms))

    def lexical_strength(self, terms: Sequence[str]) -> NDArray[np.float64]:
        """Per document, its best earlier request's weight x how far that request's similarity to these
        query terms passes EVIDENCE_LEXICAL_FLOOR (0 for most documents)."""
        strength = np.zeros(self.size, dtype=np.float64)
        query = self._weights(set(terms))
        found = [(self._lexical.postings[t], w) for t, w in query.items() if t in self._lexical.postings]
        if not found:
            return strength
        ids = np.concatenate([posting[0] for posting, _ in found])
        values = np.concatenate([posting[1] * weight for posting, weight in found])
        similarity = np.bincount(ids, weights=values, minlength=self._lexical.size)
        self._spread(similarity, EVIDENCE_LEXICAL_FLOOR, self._requests, strength)
        return strength

    def vector_strength(self, query_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """Per document, its best earlier sentence's weight x how far that sentence's cosine with the
        query's sentences passes EVIDENCE_VECTOR_FLOOR."""
        strength = np.zeros(self.size, dtype=np.float64)
        if self._sentences is None:
            return strength
        matrix, owners = self._sentences
        similarity = (matrix @ np.atleast_2d(query_vectors).T).max(axis=1)
        self._spread(similarity, EVIDENCE_VECTOR_FLOOR, owners, strength)
        return strength

    @staticmethod
    def _spread(
        similarity: NDArray[Any], floor: float, owners: list[list[tuple[int, float]]], strength: NDArray[np.float64]
    ) -> None:
        for row in np.flatnonzero(similarity > floor).tolist():
            gate = (float(similarity[row]) - floor) / (1.0 - floor)
            for doc, weight in owners[row]:
                strength[doc] = max(strength[doc], gate * weight)

    def lexical(
        self, terms: Sequence[str], scores: NDArray[np.float64], candidates: NDArray[np.intp]
    ) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """Lexical ranking's scores with the evidence added (EVIDENCE_LEXICAL_WEIGHT of the query's best
        BM25 score at full strength); tools with evidence become candidates."""
        strength = self.lexical_strength(terms)
        if not strength.any():
            return scores, candidates
        top = float(scores[candidates].max()) if candidates.size else 0.0
        boosted = scores + EVIDENCE_LEXICAL_WEIGHT * max(top, 1.0) * strength
        return boosted, np.union1d(candidates, np.flatnonzero(strength > 0))

    def hybrid(
        self,
        terms: Sequence[str],
        query_vectors: NDArray[np.float32] | None,
        blended: NDArray[Any],
        admitted: NDArray[np.intp],
    ) -> tuple[NDArray[Any], NDArray[np.intp]]:
        """Hybrid scores (which top out near 1) with both kinds of evidence added."""
        strength = EVIDENCE_HYBRID_LEXICAL_WEIGHT * self.lexical_strength(terms)
        if query_vectors is not None and self.has_vectors:
            strength = strength + EVIDENCE_VECTOR_WEIGHT * self.vector_strength(query_vectors)
        if not strength.any():
            return blended, admitted
        return blended + strength, np.union1d(admitted, np.flatnonzero(strength > 0))


class TraceEvidence:
    """The evidence source of a gateway (or `orchestrator eval --traces`): traces from `load`, re-read every
    `settings.refresh_s` seconds, turned into `LearnedEvidence` per catalog version.

    Args:
        load: the live traces (`TraceStore.load`).
        settings: `mcp.tool_search.traces` (min_spawns, half-life, refresh).
        vectors: where the earlier requests' sentence vectors are cached (`EmbeddingRuntime.vectors(folder)`),
            a callable so the model loads only when hybrid ranking needs it; None: lexical evidence only.
        clock: Unix time now.

    A stale source is re-read by the one search that notices (the others keep the evidence they have), so
    a slow store delays one search per `refresh_s`, not every search. Sentences not embedded yet are
    handed to the background embedding and join at a later refresh. Thread-safe.
    """

    def __init__(
        self,
        load: Callable[[], Sequence[Trace]],
        settings: TraceSettings | None = None,
        *,
        vectors: Callable[[], ToolVectors] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or TraceSettings()
        self._load = load
        self._vectors = vectors
        self._clock = clock
        self._traces: Sequence[Trace] | None = None
        self._loaded_at = -math.inf
        self._generation = 0
        self._built: dict[tuple[str, bool], tuple[int, LearnedEvidence | None]] = {}
        self._refreshing = threading.Lock()
        self._lock = threading.Lock()
        self._warned = False
        self.pending_vectors = 0
        """Request sentences waiting to be embedded at the last build (they join at a later refresh)."""

    def refresh(self) -> None:
        """Re-read the traces now."""
        try:
            traces = list(self._load())
        except Exception:  # boundary: a store that fails leaves the evidence read last (or none)
            if not self._warned:
                self._warned = True
                log.warning("reading search traces failed; ranking without new evidence", exc_info=True)
            traces = list(self._traces or ())
        with self._lock:
            self._traces = traces
            self._loaded_at = self._clock()
            self._generation += 1

    def current(self, catalog: ToolCatalog, index: _Index, *, vectors: bool) -> LearnedEvidence | None:
        if self._traces is None or self._clock() - self._loaded_at >= self.settings.refresh_s:
            if self._traces is None:
                with self._refreshing:
                    if self._traces is None:
                        self.refresh()
            elif self._refreshing.acquire(blocking=False):
                try:
                    self.refresh()
                finally:
                    self._refreshing.release()
        with self._lock:
            generation, traces = self._generation, self._traces or ()
            built = self._built.get((catalog.version, vectors))
        if built is not None and built[0] == generation:
            return built[1]
        evidence = self._build(catalog, index, traces, vectors=vectors)
        with self._lock:
            if len(self._built) >= BUILT_KEPT:
                self._built.pop(next(iter(self._built)))
            self._built[(catalog.version, vectors)] = (generation, evidence)
        return evidence

    def _build(
        self, catalog: ToolCatalog, index: _Index, traces: Sequence[Trace], *, vectors: bool
    ) -> LearnedEvidence | None:
        """The evidence of `traces` for `catalog`: per document its traces (one per spawn, the latest),
        documents with fewer than `min_spawns` spawns dropped."""
        docs = {(server, entry.tool): doc for doc, entry in enumerate(catalog.entries) for server in entry.servers}
        per_doc: dict[int, dict[str, Trace]] = {}
        for trace in traces:
            doc = docs.get((trace.server, trace.tool))
            if doc is not None and trace.ok:
                spawns = per_doc.setdefault(doc, {})
                if trace.spawn not in spawns or spawns[trace.spawn].at <= trace.at:
                    spawns[trace.spawn] = trace
        kept = {doc: spawns for doc, spawns in per_doc.items() if len(spawns) >= self.settings.min_spawns}
        if not kept or index.bm25 is None:
            return None
        now = self._clock()
        half_life = self.settings.half_life_days * DAY_S
        texts: dict[str, int] = {}
        requests: list[list[tuple[int, float]]] = []
        for doc, spawns in kept.items():
            for trace in spawns.values():
                weight = 0.5 ** (max(0.0, now - trace.at) / half_life)
                request = texts.setdefault(trace.query, len(texts))
                if request == len(requests):
                    requests.append([])
                requests[request].append((doc, weight))
        ordered = list(texts)
        terms = [set(index.analyzer.terms(text)) for text in ordered]
        sentences = self._sentences(ordered, requests, index) if vectors and self._vectors is not None else None
        return LearnedEvidence(len(catalog), dict(index.bm25.idf), requests, terms, sentences)

    def _sentences(
        self, texts: list[str], requests: list[list[tuple[int, float]]], index: _Index
    ) -> tuple[NDArray[np.float32], list[list[tuple[int, float]]]] | None:
        """Vector evidence: for each (request, document), the request's sentences that match the document
        best lexically, as cached unit vectors; sentences not cached yet are sent to be embedded."""
        from ._embedding.rules import query_sentences  # the embedding stack loads only for hybrid ranking

        assert self._vectors is not None
        try:
            vectors = self._vectors()
        except SemanticUnavailable:
            return None
        rows: dict[str, list[tuple[int, float]]] = {}
        for text, owners in zip(texts, requests, strict=True):
            parts = query_sentences(text)
            per_part = [index.scores(index.query_terms(part))[0] for part in parts] if len(parts) > 1 else None
            for doc, weight in owners:
                if per_part is None:
                    chosen = parts
                else:
                    best = max(float(scores[doc]) for scores in per_part)
                    chosen = [part for part, scores in zip(parts, per_part, strict=True) if float(scores[doc]) >= best]
                for part in chosen:
                    rows.setdefault(part, []).append((doc, weight))
        parts = list(rows)
        keys = vectors.keys(parts)
        found: list[int] = []
        missing: dict[bytes, str] = {}
        for position, key in enumerate(keys):
            if vectors.cached([key])[0] is not None:
                found.append(position)
            else:
                missing[key] = parts[position]
        self.pending_vectors = len(missing)
        if missing:
            vectors.warm(missing)
        if not found:
            return None
        matrix, _ = vectors.cached([keys[position] for position in found])
        assert matrix is not None
        return matrix, [rows[parts[position]] for position in found]


def trace_vectors(runtime: EmbeddingRuntime) -> ToolVectors:
    """The sentence vectors of earlier requests, in the runtime's cache folder's TRACE_VECTORS sub-folder
    (memory only when the runtime keeps no folder). Loads the model on first use.

    Raises:
        SemanticUnavailable: the model cannot load, or the runtime is closed.
    """
    folder = runtime.cache_dir / TRACE_VECTORS if runtime.cache_dir is not None else None
    return runtime.vectors(folder)
