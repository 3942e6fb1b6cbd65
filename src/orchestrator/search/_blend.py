"""The seam between BM25 and a second ranking opinion (the embedding models, or a custom scorer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..protocols.mcp._catalog import ToolCatalog

__all__ = ["ScoreBlend"]


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
