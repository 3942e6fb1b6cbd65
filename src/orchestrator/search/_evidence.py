"""Learned evidence: earlier requests that led to a successful call of a tool, added to its ranking.

    TraceEvidence(load, settings)   what the engine asks (`current(catalog, index, vectors=...)`): the
                                    traces every replica recorded (`orchestrator._traces`), re-read every
                                    `refresh_s`, built into evidence once per catalog version
    LearnedEvidence                 one catalog version's evidence: `lexical(...)` and `hybrid(...)` add it
                                    in the engine's one ranking place (`ToolSearchEngine._scores`)

What counts, for a tool that `min_spawns` distinct spawns called (each spawn once, its latest request):

    near repeats (lexical and hybrid)  an earlier request whose binary tf-idf cosine with the query passes
                                       EVIDENCE_LEXICAL_FLOOR adds, scaled from the floor up, to the tools
                                       it led to
    the tool as users ask for it       (hybrid) the tool's vector plus EVIDENCE_CENTROID_WEIGHT times the
                                       mean vector of its earlier requests less the mean of all requests,
                                       renormalised, replaces its own vector in the blend's cosine
    neighbours that agree              (hybrid) the EVIDENCE_NEIGHBOURS earlier requests nearest the query
                                       vote for their tools, weighted by cosine; a tool's share of the vote
                                       counts past EVIDENCE_VOTE_FLOOR

Each earlier request weighs `0.5 ** (age / half_life_days)`. The floors keep a tool's own text in charge:
only close requests count, a multi-part task that scatters its votes over several tools moves little, and
a tool nobody asked for loses nothing. With no evidence for any tool the engine never calls in here and
ranks exactly as without traces.
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
    EVIDENCE_CENTROID_WEIGHT,
    EVIDENCE_HYBRID_LEXICAL_WEIGHT,
    EVIDENCE_LEXICAL_FLOOR,
    EVIDENCE_LEXICAL_WEIGHT,
    EVIDENCE_NEIGHBOURS,
    EVIDENCE_VOTE_FLOOR,
    EVIDENCE_VOTE_WEIGHT,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .._traces import Trace
    from ..protocols.mcp._catalog import ToolCatalog
    from ._embedding import EmbeddingRuntime
    from ._embedding.blend import BlendParts
    from ._embedding.vectors import ToolVectors

__all__ = ["TRACE_VECTORS", "EvidenceSource", "LearnedEvidence", "TraceEvidence", "trace_vectors"]

log = logging.getLogger(__name__)

DAY_S = 86_400.0
TRACE_VECTORS = "traces"
"""Sub-folder of the vector cache holding earlier requests' sentence vectors, apart from the tool vectors
(whose cache keeps the current catalog's first)."""
IDF_FLOOR = 0.1
"""Least weight of a word in request similarity (BM25Okapi gives words in most tools of a small catalog 0)."""
BUILT_KEPT = 8
"""Evidence builds kept (catalog version x with or without vectors): a gateway serves a handful of profiles."""

_Owners = list[list[tuple[int, float]]]
_Reblend = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""The hybrid blend's rules over given cosines: (lexical, cosines, candidates) -> (scores, admitted)
(`HybridBlend.reblend`)."""
"""Per earlier request, the (document, weight) of each tool it led to."""


class _Words(Protocol):
    def terms(self, text: str) -> list[str]: ...


class _Index(Protocol):
    """What evidence reads of the engine's lexical index (`LexicalIndex`): its analysis and idf."""

    @property
    def analyzer(self) -> _Words: ...

    @property
    def bm25(self) -> Any: ...


class EvidenceSource(Protocol):
    """What the engine asks once per search: the evidence for a catalog version, or None (no tool has any)."""

    def current(self, catalog: ToolCatalog, index: _Index, *, vectors: bool) -> LearnedEvidence | None:
        """`vectors`: the engine ranks hybrid and can use vector evidence (else only lexical evidence is
        built, and no model is loaded for it)."""
        ...


@dataclass(frozen=True)
class _Vectors:
    """Vector evidence: earlier requests' sentence rows and each tool's mean request vector."""

    rows: NDArray[np.float32]
    starts: NDArray[np.intp]
    """First row of each request (requests' rows are contiguous)."""
    owners: _Owners
    """Per request (in `starts` order), its tools and weights."""
    docs: NDArray[np.intp]
    """Documents with a mean request vector."""
    means: NDArray[np.float32]
    """Weighted mean request vector of each of `docs`, less the mean of every request: what sets the requests
    that led to this tool apart (requests share phrasing, "can you help me...", that says nothing of a tool)."""


class LearnedEvidence:
    """One catalog version's evidence, ready to add to a search's scores. Immutable once built.

    Args:
        size: documents in the catalog.
        idf: term -> idf of the catalog's index (a word's weight in request similarity).
        owners: per earlier request (distinct text), the tools it led to and their weights.
        terms: each request's index terms.
        vectors: vector evidence (hybrid), or None.
    """

    def __init__(
        self, size: int, idf: dict[str, float], owners: _Owners, terms: list[set[str]], vectors: _Vectors | None = None
    ) -> None:
        self.size = size
        self._idf = idf
        # BM25Okapi's idf is 0 or its epsilon floor for most words of a tiny catalog: a word no tool has
        # weighs at least 1, and a known word at least IDF_FLOOR, so requests still compare.
        self._unknown_idf = max(max(idf.values(), default=1.0), 1.0)
        self._owners = owners
        self._postings = self._index(terms)
        self._vectors = vectors
        self._enriched: tuple[int, NDArray[np.float32]] | None = None

    @property
    def has_vectors(self) -> bool:
        return self._vectors is not None

    def _weights(self, terms: set[str]) -> dict[str, float]:
        """A unit tf-idf vector of a term set (binary term frequencies; stems only)."""
        weights = {
            term: max(self._idf.get(term, self._unknown_idf), IDF_FLOOR)
            for term in terms
            if not term.startswith(FORM_PREFIX)
        }
        norm = math.sqrt(sum(value * value for value in weights.values()))
        return {term: value / norm for term, value in weights.items()} if norm > 0 else {}

    def _index(self, terms: list[set[str]]) -> dict[str, tuple[NDArray[np.intp], NDArray[np.float64]]]:
        lists: dict[str, tuple[list[int], list[float]]] = {}
        for request, words in enumerate(terms):
            for term, weight in self._weights(words).items():
                ids, values = lists.setdefault(term, ([], []))
                ids.append(request)
                values.append(weight)
        return {
            term: (np.asarray(ids, np.intp), np.asarray(values, np.float64)) for term, (ids, values) in lists.items()
        }

    # ------------------------------------------------------------------ the three kinds

    def near_repeats(self, terms: Sequence[str]) -> NDArray[np.float64]:
        """Per document, its best earlier request's weight x how far that request's similarity to these
        query terms passes EVIDENCE_LEXICAL_FLOOR, scaled to 0..1 (0 for most documents)."""
        strength = np.zeros(self.size, dtype=np.float64)
        query = self._weights(set(terms))
        found = [(self._postings[term], weight) for term, weight in query.items() if term in self._postings]
        if not found:
            return strength
        ids = np.concatenate([posting[0] for posting, _ in found])
        values = np.concatenate([posting[1] * weight for posting, weight in found])
        similarity = np.bincount(ids, weights=values, minlength=len(self._owners))
        for request in np.flatnonzero(similarity > EVIDENCE_LEXICAL_FLOOR).tolist():
            gate = (float(similarity[request]) - EVIDENCE_LEXICAL_FLOOR) / (1.0 - EVIDENCE_LEXICAL_FLOOR)
            for doc, weight in self._owners[request]:
                strength[doc] = max(strength[doc], min(gate, 1.0) * weight)
        return strength

    def enriched_cosines(self, parts: BlendParts) -> NDArray[np.float32]:
        """The blend's cosines with each evidenced tool's vector moved towards its users' requests."""
        vectors = self._vectors
        cosines = parts.cosines
        if vectors is None or not vectors.docs.size:
            return cosines
        cached = self._enriched
        if cached is None or cached[0] != parts.matrix.shape[0]:
            moved = parts.matrix[vectors.docs] + EVIDENCE_CENTROID_WEIGHT * vectors.means
            moved /= np.maximum(np.linalg.norm(moved, axis=1, keepdims=True), 1e-12)
            cached = self._enriched = (parts.matrix.shape[0], moved.astype(np.float32))
        enriched = np.array(cosines, dtype=np.float32, copy=True)
        enriched[vectors.docs] = (cached[1] @ np.atleast_2d(parts.query_vectors).T).max(axis=1)
        return enriched

    def votes(self, query_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """Per document, its share of the nearest earlier requests' cosine-weighted votes past
        EVIDENCE_VOTE_FLOOR, scaled to 0..1."""
        strength = np.zeros(self.size, dtype=np.float64)
        vectors = self._vectors
        if vectors is None:
            return strength
        rows = (vectors.rows @ np.atleast_2d(query_vectors).T).max(axis=1)
        similarity = np.maximum.reduceat(rows, vectors.starts)
        count = min(EVIDENCE_NEIGHBOURS, similarity.size)
        nearest = np.argpartition(-similarity, count - 1)[:count]
        weights = np.clip(similarity[nearest], 0.0, 1.0)
        total = float(weights.sum())
        if total <= 0:
            return strength
        for request, weight in zip(nearest.tolist(), weights.tolist(), strict=True):
            for doc, decay in vectors.owners[request]:
                strength[doc] += weight * decay / total
        return np.clip((strength - EVIDENCE_VOTE_FLOOR) / (1.0 - EVIDENCE_VOTE_FLOOR), 0.0, 1.0)

    # ------------------------------------------------------------------ what the engine calls

    def lexical(
        self, terms: Sequence[str], scores: NDArray[np.float64], candidates: NDArray[np.intp]
    ) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """Lexical ranking's scores with near repeats added (EVIDENCE_LEXICAL_WEIGHT of the query's best
        BM25 score at full strength); tools with evidence become candidates."""
        strength = self.near_repeats(terms)
        if not strength.any():
            return scores, candidates
        top = float(scores[candidates].max()) if candidates.size else 0.0
        boosted = scores + EVIDENCE_LEXICAL_WEIGHT * max(top, 1.0) * strength
        return boosted, np.union1d(candidates, np.flatnonzero(strength > 0))

    def hybrid(
        self,
        terms: Sequence[str],
        parts: BlendParts | None,
        reblend: _Reblend | None,
        lexical: NDArray[np.float64],
        candidates: NDArray[np.intp],
        blended: NDArray[Any],
        admitted: NDArray[np.intp],
    ) -> tuple[NDArray[Any], NDArray[np.intp]]:
        """Hybrid scores (which top out near 1) with evidence: the blend redone over enriched cosines when
        there are vectors (`parts` and `reblend` given), then near repeats and votes added."""
        strength = EVIDENCE_HYBRID_LEXICAL_WEIGHT * self.near_repeats(terms)
        if parts is not None and reblend is not None and self._vectors is not None:
            blended, admitted = reblend(lexical, self.enriched_cosines(parts), candidates)
            strength += EVIDENCE_VOTE_WEIGHT * self.votes(parts.query_vectors)
        if not strength.any():
            return blended, admitted
        return blended + strength, np.union1d(admitted, np.flatnonzero(strength > 0))


class TraceEvidence:
    """The evidence source of a gateway (or `orchestrator eval --traces`): traces from `load`, re-read every
    `settings.refresh_s` seconds, turned into `LearnedEvidence` per catalog version.

    Args:
        load: the live traces (`TraceStore.load`).
        settings: `mcp.tool_search.traces` (min_spawns, half-life, refresh).
        vectors: where the earlier requests' sentence vectors are cached (`trace_vectors(runtime)`), a
            callable so the model loads only when hybrid ranking needs it; None: lexical evidence only.
        clock: Unix time now.

    A stale source is re-read by the one search that notices (the others keep the evidence they have), so
    a slow store delays one search per `refresh_s`, not every search. Request sentences not embedded yet
    are handed to the background embedding and join at a later build. Thread-safe.
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
        self._built: dict[tuple[str, bool], tuple[tuple[int, int], LearnedEvidence | None]] = {}
        self._refreshing = threading.Lock()
        self._lock = threading.Lock()
        self._warned = False
        self.pending_vectors = 0
        """Request sentences waiting to be embedded at the last build (they join a later build)."""

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

    def warm(self, timeout: float | None = None) -> bool:
        """Read the traces and embed every request's sentences now, waiting up to `timeout` seconds (None:
        as long as it takes); True when every one is embedded (benchmarks, `eval --traces`, a warm-up)."""
        self.refresh()
        if self._vectors is None:
            return True
        from ._embedding.rules import query_sentences  # the embedding stack loads only for hybrid ranking

        try:
            vectors = self._vectors()
            texts = list(dict.fromkeys(part for trace in self._traces or () for part in query_sentences(trace.query)))
            keys = vectors.keys(texts)
            missing = {key: text for key, text in zip(keys, texts, strict=True) if vectors.cached([key])[0] is None}
            if missing:
                vectors.warm(missing)
            return vectors.wait(keys, timeout)
        except SemanticUnavailable:
            return False

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
            traces = self._traces or ()
            version = (self._generation, self._embedded_generation(vectors))
            built = self._built.get((catalog.version, vectors))
        if built is not None and built[0] == version:
            return built[1]
        evidence = self._build(catalog, index, traces, vectors=vectors)
        with self._lock:
            if len(self._built) >= BUILT_KEPT:
                self._built.pop(next(iter(self._built)))
            self._built[(catalog.version, vectors)] = (version, evidence)
        return evidence

    def _embedded_generation(self, vectors: bool) -> int:
        """Changes when request vectors were added (a build missing some is redone once they are there)."""
        if not vectors or self._vectors is None or not self.pending_vectors:
            return 0
        try:
            return self._vectors().generation
        except SemanticUnavailable:
            return 0

    def _build(
        self, catalog: ToolCatalog, index: _Index, traces: Sequence[Trace], *, vectors: bool
    ) -> LearnedEvidence | None:
        """The evidence of `traces` for `catalog`: per document its traces (one per spawn, the latest);
        documents with fewer than `min_spawns` spawns get none."""
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
        owners: _Owners = []
        for doc, spawns in kept.items():
            for trace in spawns.values():
                request = texts.setdefault(trace.query, len(texts))
                if request == len(owners):
                    owners.append([])
                owners[request].append((doc, 0.5 ** (max(0.0, now - trace.at) / half_life)))
        ordered = list(texts)
        terms = [set(index.analyzer.terms(text)) for text in ordered]
        found = self._request_vectors(ordered, owners) if vectors and self._vectors is not None else None
        return LearnedEvidence(len(catalog), dict(index.bm25.idf), owners, terms, found)

    def _request_vectors(self, texts: list[str], owners: _Owners) -> _Vectors | None:
        """Vector evidence of the requests whose sentences are all embedded; the others' sentences are sent
        to the background embedding (`pending_vectors` counts them)."""
        from ._embedding.rules import query_sentences  # the embedding stack loads only for hybrid ranking

        assert self._vectors is not None
        try:
            store = self._vectors()
        except SemanticUnavailable:
            return None
        rows: list[NDArray[np.float32]] = []
        kept: _Owners = []
        missing: dict[bytes, str] = {}
        for text, owned in zip(texts, owners, strict=True):
            parts = query_sentences(text)
            keys = store.keys(parts)
            matrix, absent = store.cached(keys)
            if matrix is None:
                missing.update((keys[i], parts[i]) for i in absent)
                continue
            rows.append(matrix)
            kept.append(owned)
        self.pending_vectors = len(missing)
        if missing:
            store.warm(missing)
        if not rows:
            return None
        starts = np.cumsum([0] + [len(block) for block in rows[:-1]]).astype(np.intp)
        means = [block.mean(axis=0) for block in rows]
        totals: dict[int, tuple[NDArray[np.float32], float]] = {}
        for mean, owned in zip(means, kept, strict=True):
            unit = mean / max(float(np.linalg.norm(mean)), 1e-12)
            for doc, weight in owned:
                acc, total = totals.get(doc, (np.zeros_like(unit), 0.0))
                totals[doc] = (acc + weight * unit, total + weight)
        docs = np.asarray(sorted(totals), dtype=np.intp)
        overall = np.mean([mean / max(float(np.linalg.norm(mean)), 1e-12) for mean in means], axis=0)
        centroid = np.stack([totals[doc][0] / totals[doc][1] - overall for doc in docs.tolist()]).astype(np.float32)
        return _Vectors(np.concatenate(rows).astype(np.float32), starts, kept, docs, centroid)


def trace_vectors(runtime: EmbeddingRuntime) -> ToolVectors:
    """The sentence vectors of earlier requests, in the runtime's cache folder's TRACE_VECTORS sub-folder
    (memory only when the runtime keeps no folder). Loads the model on first use.

    Raises:
        SemanticUnavailable: the model cannot load, or the runtime is closed.
    """
    folder = runtime.cache_dir / TRACE_VECTORS if runtime.cache_dir is not None else None
    return runtime.vectors(folder)
