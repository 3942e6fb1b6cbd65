"""Learned evidence: earlier requests that led to a successful call of a tool, added to its ranking.

    TraceEvidence(load, settings)   what the engine asks (`current(catalog, index, vectors=...)`): the
                                    traces every replica recorded (`orchestrator._traces`), re-read every
                                    `refresh_s`, built into evidence once per catalog version
    LearnedEvidence                 one catalog version's evidence: `lexical(...)`, `hybrid(...)` and
                                    `hybrid_with_vectors(...)` (which makes the blend itself) add it in the
                                    engine's one ranking place (`ToolSearchEngine._scores`)

What counts, for a tool that `min_spawns` distinct spawns called (each spawn once, its latest request):

    near repeats (lexical and hybrid)  an earlier request whose binary tf-idf cosine with the query passes
                                       EVIDENCE_LEXICAL_FLOOR adds, scaled from the floor up, to the tools
                                       it led to
    the tool as users ask for it       (hybrid) the tool's vector plus EVIDENCE_CENTROID_WEIGHT times the
                                       mean vector of its earlier requests less the mean of all requests,
                                       renormalised, replaces its own vector in the blend's cosine
    neighbours that agree              (hybrid) the EVIDENCE_NEIGHBOURS earlier requests nearest the query
                                       (among the newest VOTE_REQUESTS) vote for their tools, weighted by
                                       cosine; a tool's share of the vote counts past EVIDENCE_VOTE_FLOOR

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
from ._background import Background
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
    from ._blend import BlendParts
    from ._embedding import EmbeddingRuntime
    from ._embedding.vectors import ToolVectors

__all__ = ["TRACE_VECTORS", "EvidenceSource", "LearnedEvidence", "TraceEvidence", "trace_vectors"]

log = logging.getLogger(__name__)

DAY_S = 86_400.0
TRACE_VECTORS = "traces"
"""Sub-folder of the vector cache holding earlier requests' vectors, apart from the tool vectors
(whose cache keeps the current catalog's first)."""
IDF_FLOOR = 0.1
"""Least weight of a word in request similarity (BM25Okapi gives words in most tools of a small catalog 0)."""
VOTE_REQUESTS = 4_096
"""Newest earlier requests the vote looks among: a vote is about recent near repeats, and the comparison
costs a matrix product over them on every hybrid search (4,096 x 896 floats: about 1 ms)."""
DECAY_STEP_S = 3_600.0
"""Evidence is rebuilt at least this often, so decay moves while the traces stay the same."""
BUILT_KEPT = 8
"""Evidence builds kept (catalog version x with or without vectors): a gateway serves a handful of profiles."""

_Owners = list[list[tuple[int, float]]]
"""Per earlier request, the (document, weight) of each tool it led to."""
_Reblend = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""The hybrid blend's rules over given cosines: (lexical, cosines, candidates) -> (scores, admitted)
(`HybridBlend.reblend`)."""


class _Words(Protocol):
    def terms(self, text: str) -> list[str]: ...


class _Index(Protocol):
    """What evidence reads of the engine's lexical index (`LexicalIndex`): its analysis and idf."""

    @property
    def analyzer(self) -> _Words: ...

    def idf(self) -> dict[str, float]: ...


class EvidenceSource(Protocol):
    """What the engine asks once per search: the evidence for a catalog version, or None (no tool has any)."""

    def current(self, catalog: ToolCatalog, index: _Index, *, vectors: bool) -> LearnedEvidence | None:
        """`vectors`: the engine ranks hybrid and can use vector evidence (else only lexical evidence is
        built, and no model is loaded for it)."""
        ...


@dataclass(frozen=True)
class _Vectors:
    """Vector evidence: the newest earlier requests' vectors (for the vote) and each tool's mean request vector."""

    rows: NDArray[np.float32]
    """One unit vector per request (the request embedded whole), the newest VOTE_REQUESTS."""
    owners: _Owners
    """Per row, its tools and weights."""
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
        terms: each request's index terms (as the catalog's analyzer gives them).
        vectors: vector evidence (hybrid), or None.
    """

    def __init__(
        self, size: int, idf: dict[str, float], owners: _Owners, terms: list[list[str]], vectors: _Vectors | None = None
    ) -> None:
        self.size = size
        self._idf = idf
        # BM25Okapi's idf is 0 or its epsilon floor for most words of a tiny catalog: a word no tool has
        # weighs at least 1, and a known word at least IDF_FLOOR, so requests still compare.
        self._unknown_idf = max(max(idf.values(), default=1.0), 1.0)
        self._requests = len(owners)
        counts = [len(owned) for owned in owners]
        # Pairs are grouped by request: request r's pairs are `_pair_starts[r]:_pair_starts[r + 1]`.
        self._pair_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.intp)]).astype(np.intp)
        self._pair_doc = np.fromiter((doc for owned in owners for doc, _ in owned), np.intp, sum(counts))
        self._pair_weight = np.fromiter((weight for owned in owners for _, weight in owned), np.float64, sum(counts))
        self._vocabulary, self._postings = self._index(terms)
        self._vectors = vectors
        self._enriched: tuple[int, NDArray[np.float32], bool] | None = None
        """(index size, moved rows or the whole moved matrix, whether whole), made on the first hybrid search."""

    @property
    def has_vectors(self) -> bool:
        return self._vectors is not None

    def _weight(self, term: str) -> float:
        return max(self._idf.get(term, self._unknown_idf), IDF_FLOOR)

    def _index(
        self, terms: list[list[str]]
    ) -> tuple[dict[str, int], tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]]:
        """Requests as unit tf-idf vectors (binary term frequencies, stems only), in postings: the term ->
        number vocabulary, and per term number a slice of (request ids, weights) (`starts` by number)."""
        vocabulary: dict[str, int] = {}
        pair_term: list[int] = []
        sizes: list[int] = []
        for words in terms:
            numbers = {vocabulary.setdefault(word, len(vocabulary)) for word in words if word[:1] != FORM_PREFIX}
            pair_term.extend(numbers)
            sizes.append(len(numbers))
        idf = np.fromiter((self._weight(word) for word in vocabulary), np.float64, len(vocabulary))
        term = np.asarray(pair_term, dtype=np.intp)
        request = np.repeat(np.arange(len(terms), dtype=np.intp), sizes)
        weight = idf[term] if term.size else np.zeros(0)
        norms = np.sqrt(np.bincount(request, weights=weight * weight, minlength=len(terms)))
        weight = weight / np.where(norms[request] > 0, norms[request], 1.0)
        order = np.argsort(term, kind="stable")
        starts = np.searchsorted(term[order], np.arange(len(vocabulary) + 1))
        return vocabulary, (starts, request[order], weight[order])

    # ------------------------------------------------------------------ the three kinds

    def near_repeats(self, terms: Sequence[str]) -> NDArray[np.float64]:
        """Per document, its best earlier request's weight x how far that request's similarity to these
        query terms passes EVIDENCE_LEXICAL_FLOOR, scaled to 0..1 (0 for most documents)."""
        strength = np.zeros(self.size, dtype=np.float64)
        words = {word: self._weight(word) for word in set(terms) if word[:1] != FORM_PREFIX}
        norm = math.sqrt(sum(value * value for value in words.values()))
        starts, requests, weights = self._postings
        found = [(self._vocabulary[word], value / norm) for word, value in words.items() if word in self._vocabulary]
        if not found:
            return strength
        ids = np.concatenate([requests[starts[number] : starts[number + 1]] for number, _ in found])
        values = np.concatenate([weights[starts[number] : starts[number + 1]] * value for number, value in found])
        similarity = np.bincount(ids, weights=values, minlength=self._requests)
        # Only the few requests past the floor are read further (not every request's pairs).
        close = np.flatnonzero(similarity > EVIDENCE_LEXICAL_FLOOR)
        if not close.size:
            return strength
        gate = np.minimum((similarity[close] - EVIDENCE_LEXICAL_FLOOR) / (1.0 - EVIDENCE_LEXICAL_FLOOR), 1.0)
        first, counts = self._pair_starts[close], self._pair_starts[close + 1] - self._pair_starts[close]
        # The close requests' pairs, in pair order: each request's first pair plus 0, 1, ... count - 1.
        pairs = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        docs = self._pair_doc[pairs]
        values = np.repeat(gate, counts) * self._pair_weight[pairs]
        order = np.argsort(values, kind="stable")
        strength[docs[order]] = values[order]  # the largest value of each document is written last
        return strength

    def enriched_cosines(self, parts: BlendParts) -> NDArray[np.float32]:
        """The blend's cosines with each evidenced tool's vector moved towards its users' requests.

        When most tools have evidence and the index keeps float32 rows, the moved rows are kept in a copy of
        the whole matrix (at most twice the moved rows' memory) and each search reads one matrix, not the
        catalog's and then the moved rows."""
        vectors = self._vectors
        if vectors is None or not vectors.docs.size:
            return parts.cosines()
        cached = self._enriched
        if cached is None or cached[0] != parts.size:
            own = parts.rows(vectors.docs)
            if own is None:  # the store lost a vector: the tools' own cosines
                return parts.cosines()
            moved = own + EVIDENCE_CENTROID_WEIGHT * vectors.means
            moved /= np.maximum(np.linalg.norm(moved, axis=1, keepdims=True), 1e-12)
            whole = parts.matrix is not None and 2 * vectors.docs.size >= parts.size
            if whole:
                assert parts.matrix is not None
                every = parts.matrix.copy()
                every[vectors.docs] = moved
                moved = every
            cached = self._enriched = (parts.size, moved.astype(np.float32, copy=False), whole)
        sentences = np.atleast_2d(parts.query_vectors).T
        if cached[2]:
            whole_cosines: NDArray[np.float32] = (cached[1] @ sentences).max(axis=1)
            return whole_cosines
        enriched = np.array(parts.cosines(), dtype=np.float32, copy=True)
        enriched[vectors.docs] = (cached[1] @ sentences).max(axis=1)
        return enriched

    def votes(self, query_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """Per document, its share of the nearest earlier requests' cosine-weighted votes past
        EVIDENCE_VOTE_FLOOR, scaled to 0..1."""
        strength = np.zeros(self.size, dtype=np.float64)
        vectors = self._vectors
        if vectors is None:
            return strength
        if not vectors.rows.size:
            return strength
        similarity = (vectors.rows @ np.atleast_2d(query_vectors).T).max(axis=1)
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
        self, terms: Sequence[str], scores: NDArray[np.float64], candidates: NDArray[np.intp], slots: NDArray[np.intp]
    ) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """Lexical ranking's scores (by index slot; `slots`: position -> slot) with near repeats added
        (EVIDENCE_LEXICAL_WEIGHT of the query's best BM25 score at full strength); tools with evidence become
        candidates."""
        found = self.near_repeats(terms)
        if not found.any():
            return scores, candidates
        strength = np.zeros(scores.shape[0], dtype=np.float64)
        strength[slots] = found
        top = float(scores[candidates].max()) if candidates.size else 0.0
        boosted = scores + EVIDENCE_LEXICAL_WEIGHT * max(top, 1.0) * strength
        return boosted, _with(candidates, strength)

    def hybrid(
        self, terms: Sequence[str], blended: NDArray[Any], admitted: NDArray[np.intp]
    ) -> tuple[NDArray[Any], NDArray[np.intp]]:
        """Hybrid scores (which top out near 1) with near repeats added: evidence without vectors."""
        return _added(blended, admitted, EVIDENCE_HYBRID_LEXICAL_WEIGHT * self.near_repeats(terms))

    def hybrid_with_vectors(
        self,
        terms: Sequence[str],
        parts: BlendParts,
        reblend: _Reblend,
        lexical: NDArray[np.float64],
        candidates: NDArray[np.intp],
    ) -> tuple[NDArray[Any], NDArray[np.intp]]:
        """Hybrid scores blended (`reblend`) over enriched cosines, then near repeats and votes added."""
        # The vote's matrix product (the newest requests' vectors) runs while the blend is made.
        query_vectors = parts.query_vectors
        votes = Background(lambda: self.votes(query_vectors))
        strength = EVIDENCE_HYBRID_LEXICAL_WEIGHT * self.near_repeats(terms)
        blended, admitted = reblend(lexical, self.enriched_cosines(parts), candidates)
        strength += EVIDENCE_VOTE_WEIGHT * votes.result()
        return _added(blended, admitted, strength)


class TraceEvidence:
    """The evidence source of a gateway (or `orchestrator eval --traces`): traces from `load`, re-read every
    `settings.refresh_s` seconds, turned into `LearnedEvidence` per catalog version.

    Args:
        load: the live traces (`TraceStore.load`).
        settings: `mcp.tool_search.traces` (min_spawns, half-life, refresh).
        vectors: where the earlier requests' vectors are cached (`trace_vectors(runtime)`), a
            callable so the model loads only when hybrid ranking needs it; None: lexical evidence only.
        clock: Unix time now.

    A stale source is re-read by the one search that notices, and changed traces are built into evidence by
    one search while the others keep the evidence they have: a slow store or a large build delays one search
    per change, not every search. Requests not embedded yet are handed to the background embedding and join
    at a later build. Thread-safe.
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
        self._fingerprint: int | None = None
        self._analysed: dict[str, list[str]] = {}
        self._building = threading.Lock()
        self._built: dict[tuple[str, bool], tuple[tuple[int, int, int], LearnedEvidence | None]] = {}
        self._refreshing = threading.Lock()
        self._lock = threading.Lock()
        self._warned = False
        self.pending_vectors = 0
        """Requests waiting to be embedded at the last build (they join a later build)."""

    def refresh(self) -> None:
        """Re-read the traces now."""
        try:
            traces = list(self._load())
        except Exception:  # boundary: a store that fails leaves the evidence read last (or none)
            if not self._warned:
                self._warned = True
                log.warning("reading search traces failed; ranking without new evidence", exc_info=True)
            traces = list(self._traces or ())
        fingerprint = hash(tuple((t.server, t.tool, t.spawn, t.at, t.ok, t.query) for t in traces))
        with self._lock:
            self._traces = traces
            self._loaded_at = self._clock()
            if fingerprint != self._fingerprint:  # unchanged traces keep the evidence built from them
                self._fingerprint = fingerprint
                self._generation += 1

    def warm(self, timeout: float | None = None) -> bool:
        """Read the traces and embed now every request a build can use, waiting up to `timeout` seconds
        (None: as long as it takes); True when every one is embedded (benchmarks, `eval --traces`).

        That is each successful call's request for a tool name that `min_spawns` distinct spawns called,
        on any server: a build counts the servers of one entry together, so this is all it may ask for,
        and one spawn's flood of requests is never embedded."""
        self.refresh()
        if self._vectors is None:
            return True
        try:
            vectors = self._vectors()
            called = [trace for trace in self._traces or () if trace.ok]
            spawns: dict[str, set[str]] = {}
            for trace in called:
                spawns.setdefault(trace.tool, set()).add(trace.spawn)
            least = self.settings.min_spawns
            texts = list(dict.fromkeys(trace.query for trace in called if len(spawns[trace.tool]) >= least))
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
        key = (catalog.version, vectors)
        version = (self._generation, self._embedded_generation(vectors), int(self._clock() // DECAY_STEP_S))
        with self._lock:
            built = self._built.get(key)
        if built is not None and built[0] == version:
            return built[1]
        # One search builds; the others keep the evidence built before (or wait, when there is none yet).
        if not self._building.acquire(blocking=built is None):
            assert built is not None
            return built[1]
        try:
            with self._lock:
                traces = self._traces or ()
                again = self._built.get(key)
            if again is not None and again[0] == version:
                return again[1]
            evidence = self._build(catalog, index, traces, vectors=vectors)
            with self._lock:
                if len(self._built) >= BUILT_KEPT and key not in self._built:
                    self._built.pop(next(iter(self._built)))
                self._built[key] = (version, evidence)
            return evidence
        finally:
            self._building.release()

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
        if not kept:
            return None
        now = self._clock()
        half_life = self.settings.half_life_days * DAY_S
        texts: dict[str, int] = {}
        owners: _Owners = []
        newest: list[float] = []
        for doc, spawns in kept.items():
            for trace in spawns.values():
                request = texts.setdefault(trace.query, len(texts))
                if request == len(owners):
                    owners.append([])
                    newest.append(trace.at)
                owners[request].append((doc, 0.5 ** (max(0.0, now - trace.at) / half_life)))
                newest[request] = max(newest[request], trace.at)
        ordered = list(texts)
        # A rebuild analyses only the requests that are new since the last one.
        known = self._analysed
        terms = [known[text] if text in known else index.analyzer.terms(text) for text in ordered]
        self._analysed = dict(zip(ordered, terms, strict=True))
        found = self._request_vectors(ordered, owners, newest) if vectors and self._vectors is not None else None
        return LearnedEvidence(len(catalog), index.idf(), owners, terms, found)

    def _request_vectors(self, texts: list[str], owners: _Owners, newest: list[float]) -> _Vectors | None:
        """Vector evidence of the requests already embedded (each embedded whole, as one text); the others
        are sent to the background embedding (`pending_vectors` counts them)."""
        assert self._vectors is not None
        try:
            store = self._vectors()
        except SemanticUnavailable:
            return None
        keys = store.keys(texts)
        found: list[int] = []
        missing: dict[bytes, str] = {}
        for position, key in enumerate(keys):
            if store.cached([key])[0] is not None:
                found.append(position)
            else:
                missing[key] = texts[position]
        self.pending_vectors = len(missing)
        if missing:
            store.warm(missing)
        if not found:
            return None
        matrix, _ = store.cached([keys[position] for position in found])
        assert matrix is not None
        totals: dict[int, tuple[NDArray[np.float32], float]] = {}
        for row, position in enumerate(found):
            for doc, weight in owners[position]:
                acc, total = totals.get(doc, (np.zeros(matrix.shape[1], np.float32), 0.0))
                totals[doc] = (acc + weight * matrix[row], total + weight)
        docs = np.asarray(sorted(totals), dtype=np.intp)
        overall = matrix.mean(axis=0)
        means = np.stack([totals[doc][0] / totals[doc][1] - overall for doc in docs.tolist()]).astype(np.float32)
        recent = sorted(range(len(found)), key=lambda row: -newest[found[row]])[:VOTE_REQUESTS]
        return _Vectors(matrix[recent], [owners[found[row]] for row in recent], docs, means)


def _added(
    scores: NDArray[Any], admitted: NDArray[np.intp], strength: NDArray[np.float64]
) -> tuple[NDArray[Any], NDArray[np.intp]]:
    """`scores` plus `strength`, and the documents with some strength admitted too."""
    if not strength.any():
        return scores, admitted
    return scores + strength, _with(admitted, strength)


def _with(ids: NDArray[np.intp], strength: NDArray[np.float64]) -> NDArray[np.intp]:
    """`ids` and the documents with evidence, sorted (a mask: `np.union1d` sorts and hashes, far slower)."""
    mask = strength > 0
    mask[ids] = True
    return np.flatnonzero(mask)


def trace_vectors(runtime: EmbeddingRuntime) -> ToolVectors:
    """The vectors of earlier requests, in the runtime's cache folder's TRACE_VECTORS sub-folder
    (memory only when the runtime keeps no folder). Loads the model on first use.

    Raises:
        SemanticUnavailable: the model cannot load, or the runtime is closed.
    """
    folder = runtime.cache_dir / TRACE_VECTORS if runtime.cache_dir is not None else None
    return runtime.vectors(folder)
