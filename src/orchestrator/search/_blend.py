"""The seam between BM25 and a second ranking opinion (the embedding models, or a custom scorer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..protocols.mcp._catalog import ToolCatalog

__all__ = ["BlendParts", "EvidenceBlend", "ScoreBlend"]


class ScoreBlend(Protocol):
    """A second ranking opinion blended with BM25: the seam for the optional embedding scorer.

    The engine calls `prepare` once per catalog version (when the lexical index is rebuilt) and `blend`
    on every ranked query, with BM25 scores for every document (0 where no query term matches) and the
    ids of the documents sharing a term with the query. It returns scores and candidate ids the same way:
    only candidates can be returned, so a query with no candidates is a miss. Document ids are positions
    in `catalog.entries`. Exact-name and `select:` lookups never reach it.

    `blend` fails open: when it raises (`SemanticUnavailable`, whose `kind` is counted, or anything else,
    counted as `blend_failed`), the engine answers that query with the lexical ranking. Optional
    members the engine uses when present: `available` (False: report lexical ranking) and
    `wait_until_ready(timeout)` (see `ToolSearchEngine.warm`).
    """

    def prepare(self, catalog: ToolCatalog) -> None: ...

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class BlendParts(NamedTuple):
    """One hybrid search's query, embedded, and the catalog vectors its cosines come from."""

    query_vectors: NDArray[np.float32]
    """One unit row per sentence of the query."""
    size: int
    """Documents in the catalog's vector index."""
    rows: Callable[[NDArray[np.intp]], NDArray[np.float32] | None]
    """The float32 vectors of some documents (`VectorIndex.rows`), None when the store lacks one."""
    cosines: Callable[[], NDArray[np.float32]]
    """Each tool's best cosine with the query's sentences, computed when called: evidence that moves most
    tools' vectors computes its own instead of reading every vector twice."""
    matrix: NDArray[np.float32] | None
    """Every tool's float32 vector, when the index keeps them so (catalogs up to `COMPACT_ABOVE` tools)."""


@runtime_checkable
class EvidenceBlend(ScoreBlend, Protocol):
    """A blend that learned evidence (`_evidence.py`) can redo: it hands over the embedded query
    (`query_parts`) and blends from cosines the evidence moved (`reblend`). `HybridBlend` is one."""

    def query_parts(self, query: str, size: int) -> BlendParts: ...

    def reblend(
        self, lexical: np.ndarray, cosines: np.ndarray, candidates: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...
