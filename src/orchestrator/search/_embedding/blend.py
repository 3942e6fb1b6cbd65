"""`HybridBlend`: the search engine's ScoreBlend, normalised BM25 blended with model cosines, failing open."""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..._errors import SemanticUnavailable
from .._blend import BlendParts
from .index import VectorIndex
from .rules import admitted, blend, entry_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..._config import ToolSearchSettings
    from ...protocols.mcp._catalog import ToolCatalog, ToolEntry
    from .vectors import ToolVectors

__all__ = ["EMBED_MS_PER_TEXT", "EMBED_MS_PER_TOKEN", "SYNC_EMBED_TEXTS", "HybridBlend"]

SYNC_EMBED_TEXTS = 32
"""At most this many uncached tool texts may be embedded inside a search (then also the token budget
below must hold); more go to the background and searches answer lexically (`warming`) until done."""
EMBED_MS_PER_TOKEN = 0.5
"""CPU per all-MiniLM-L6-v2 token of one model run on one core here (35,754 tokens of the 590 real tools
took ~19 s)."""
EMBED_MS_PER_TEXT = 2.0
"""USE multilingual v3's time per tool text on one core here (1.5-1.8 ms measured). Uncached texts are
embedded inside a search only when tokens x EMBED_MS_PER_TOKEN + texts x this fits `embedding_timeout_ms`."""


class Runtime(Protocol):
    """What a blend needs from its `EmbeddingRuntime`: the vectors over the loaded model, why the model
    failed (None while it has not), and where fallbacks are logged once."""

    error: SemanticUnavailable | None

    def vectors(self) -> ToolVectors: ...

    def note(self, exc: SemanticUnavailable) -> None: ...


class _CatalogVectors:
    """One catalog version's tool texts and, once every one is embedded, their vectors."""

    def __init__(self, entries: Sequence[ToolEntry], texts: list[str], reused: list[int] | None = None) -> None:
        self.entries = entries
        """The catalog's entries (held, so `reused` positions stay meaningful)."""
        self.texts = texts
        self.reused = reused
        """Per entry, its position in the previous version (-1: new), when it was prepared from one."""
        self.keys: list[bytes] | None = None
        self.previous_keys: list[bytes] | None = None
        """The previous version's keys, by its positions, until this version's are made."""
        self.reused_from: list[bytes] | None = None
        """The keys of the version `reused` points into, until this version's index is built: a build over
        that version's index maps kept tools by position instead of looking up their keys."""
        self.index: VectorIndex | None = None
        self.requested = False
        """Uncached texts were handed to the background thread."""
        self.checked = -1
        """Cache generation at the last look: no new vectors since means still warming, at no cost."""
        self.lock = threading.Lock()


class HybridBlend:
    """The engine's ScoreBlend: normalised BM25 blended with the joined sentence vectors' cosines, failing open.

    Build it with `EmbeddingRuntime.create_blend(settings)`. `blend` raises `SemanticUnavailable` (logged
    once per runtime per kind) whenever it cannot rank: the engine answers with the lexical ranking and
    counts the kind. A catalog's tool texts (`entry_text`) are embedded on first use: inside the search
    when at most SYNC_EMBED_TEXTS are uncached and their estimated time fits `embedding_timeout_ms`,
    otherwise in the runtime's background thread while searches answer lexically (kind `warming`). The
    vector cache makes that happen once per tool text.
    """

    def __init__(self, runtime: Runtime, settings: ToolSearchSettings) -> None:
        self.runtime = runtime
        self.weight = settings.hybrid_weight
        self.floor = settings.semantic_floor
        self.timeout_ms = settings.embedding_timeout_ms
        self._catalog: _CatalogVectors | None = None
        self._built: tuple[list[bytes], VectorIndex] | None = None
        """The last index built and its keys: a new catalog version copies the rows of unchanged texts."""

    @property
    def available(self) -> bool:
        """False once the runtime knows the model cannot load (the engine then reports lexical)."""
        return self.runtime.error is None

    def prepare(self, catalog: ToolCatalog) -> None:
        """A new catalog version: its texts now, its vectors on the first search (nothing is loaded here).
        Entries kept from the previous version (a catalog updated per server shares them) keep their text
        and key: a changed server costs its own tools, not a pass over every tool's text."""
        entries = catalog.entries
        last = self._catalog
        if last is None:
            self._catalog = _CatalogVectors(entries, [entry_text(entry) for entry in entries])
            return
        known = dict(zip(map(id, last.entries), range(len(last.entries)), strict=True))
        reused = [known.get(id(entry), -1) for entry in entries]
        old = last.texts
        texts = [old[at] if at >= 0 else entry_text(entry) for at, entry in zip(reused, entries, strict=True)]
        state = _CatalogVectors(entries, texts, reused)
        state.previous_keys = last.keys
        self._catalog = state

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blended scores for every document and the ids that may be returned (`admitted`).

        Raises:
            SemanticUnavailable: the model cannot load, the catalog is still being embedded (`warming`),
                or the query embedding failed or exceeded `embedding_timeout_ms` (`slow_query`).
        """
        return self.reblend(lexical, self.query_parts(query, lexical.shape[0]).cosines(), candidates)

    def query_parts(self, query: str, size: int) -> BlendParts:
        """The query embedded, and the catalog's vectors its cosines come from (for learned evidence, which
        moves some tools' vectors before the blend, `_evidence.py`). Raises as `blend`."""
        try:
            vectors = self.runtime.vectors()
            index = self._index(vectors, size)
            query_vectors = vectors.model.embed_query(query, timeout_ms=self.timeout_ms)
        except SemanticUnavailable as exc:
            self.runtime.note(exc)
            raise
        rows = functools.partial(index.rows, read=vectors.read)
        return BlendParts(
            query_vectors, index.size, rows, functools.partial(index.cosines, query_vectors), index.vectors
        )

    def reblend(
        self, lexical: np.ndarray, cosines: np.ndarray, candidates: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Blended scores and admitted ids from given cosines (the blend's rules, no model run)."""
        scores = blend(lexical, cosines, self.weight).astype(np.float64)
        matched = np.zeros(lexical.shape[0], dtype=bool)
        matched[candidates] = True
        return scores, np.flatnonzero(admitted(matched, cosines, self.floor))

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Embed the prepared catalog's uncached texts now (in the background thread) and wait for them.

        Returns True when searches will rank with hybrid scores; False on timeout or when the model
        cannot load (for benchmarks, `eval`, and warming a gateway before it serves).
        """
        state = self._catalog
        if state is None:
            return True
        try:
            vectors = self.runtime.vectors()
            with state.lock:
                keys = self._keys(vectors, state)
                if state.index is None:
                    missing = self._build(vectors, state)
                    if missing:
                        vectors.warm({keys[i]: state.texts[i] for i in missing})
                        state.requested = True
            if state.index is not None or not vectors.wait(keys, timeout):
                return state.index is not None
            with state.lock:  # built here, not in the first search: reading a large catalog's vectors takes a while
                if state.index is None:
                    self._build(vectors, state)
                return state.index is not None
        except SemanticUnavailable as exc:
            self.runtime.note(exc)
            return False

    @staticmethod
    def _keys(vectors: ToolVectors, state: _CatalogVectors) -> list[bytes]:
        if state.keys is None:
            before = state.previous_keys
            if before is None or state.reused is None:
                state.keys = vectors.keys(state.texts)
            else:
                state.keys = [
                    before[at] if at >= 0 else vectors.keys([text])[0]
                    for at, text in zip(state.reused, state.texts, strict=True)
                ]
                state.reused_from = before
            state.previous_keys = None
        return state.keys

    def _index(self, vectors: ToolVectors, size: int) -> VectorIndex:
        state = self._catalog
        if state is None:
            raise SemanticUnavailable("warming", "no catalog was prepared")
        index = state.index
        if index is None:
            # Another search (or the warm-up) may be reading a large catalog's vectors: answer lexically meanwhile.
            if not state.lock.acquire(blocking=False):
                raise SemanticUnavailable("warming", "the catalog's vectors are being read")
            try:
                if state.index is None:
                    self._fill(vectors, state)
                index = state.index
            finally:
                state.lock.release()
        assert index is not None
        if index.size != size:  # a search still on the previous catalog version while it changed
            raise SemanticUnavailable("warming", "the catalog changed during this search")
        return index

    def _build(self, vectors: ToolVectors, state: _CatalogVectors) -> list[int]:
        """Set `state.index` from the cache when every text has a vector; else the positions missing.
        Hold `state.lock`."""
        keys = self._keys(vectors, state)
        built = self._built
        by_position = None
        if built is not None and state.reused is not None and built[0] is state.reused_from:
            by_position = np.asarray(state.reused, dtype=np.intp)
        index, missing = VectorIndex.build(keys, vectors.read, built, by_position)
        if index is not None:
            state.index, state.reused_from = index, None
            self._built = (keys, index)
        return missing

    def _fill(self, vectors: ToolVectors, state: _CatalogVectors) -> None:
        """Set `state.index`, embedding a few texts right here, or raise `warming`. Hold `state.lock`."""
        keys = self._keys(vectors, state)
        # While the background embeds: nothing new since the last look, or not all there yet (no store read).
        if state.requested and vectors.warming and (state.checked == vectors.generation or not vectors.known(keys)):
            state.checked = vectors.generation
            raise SemanticUnavailable("warming", f"embedding {len(state.texts)} tool texts in the background")
        state.checked = vectors.generation
        # A version that changed a few texts (one server's change): those embedded first, so the index is
        # built once (a build reads every other vector's place: about 0.2 s at 100,000 tools).
        fresh = [i for i, at in enumerate(state.reused) if at < 0] if state.reused is not None else []
        if 0 < len(fresh) <= SYNC_EMBED_TEXTS:
            _, found = vectors.read([keys[i] for i in fresh])
            absent = np.delete(np.asarray(fresh, dtype=np.intp), found).tolist()
            if absent:
                self._embed_here(vectors, {keys[i]: state.texts[i] for i in absent})
        missing = self._build(vectors, state)
        if not missing:
            return
        if state.requested and vectors.warm_error is not None:
            raise vectors.warm_error
        texts = {keys[i]: state.texts[i] for i in missing}
        if self._embed_here(vectors, texts) and not self._build(vectors, state):
            return
        vectors.warm(texts)
        state.requested = True
        raise SemanticUnavailable(
            "warming",
            f"embedding {len(texts)} of {len(keys)} tool texts in the background "
            f"(cached in {vectors.where}); lexical ranking until they are ready",
        )

    def _embed_here(self, vectors: ToolVectors, texts: dict[bytes, str]) -> bool:
        """Embed `texts` inside this search when they are at most SYNC_EMBED_TEXTS and their estimated time
        fits `embedding_timeout_ms`; False (nothing done) otherwise."""
        if len(texts) > SYNC_EMBED_TEXTS:
            return False
        estimate_ms = vectors.model.count_tokens(texts.values()) * EMBED_MS_PER_TOKEN + len(texts) * EMBED_MS_PER_TEXT
        if estimate_ms > self.timeout_ms:
            return False
        vectors.embed_keys(list(texts), list(texts.values()))
        return True
