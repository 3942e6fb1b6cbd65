"""Ranking quality on a query set: hit@1, hit@k, recall@k and MRR, as `orchestrator eval` prints them.

A query file is JSON lines `{id, query, gold: [[server, tool], ...]}` (the `../shared/data/retrieval`
format). hit@k counts a query when any gold tool is in the top k; recall@k is the share of its gold tools
there; MRR is the mean of 1/rank of the first gold tool within the top MRR_DEPTH (0 when none). A query
the engine refuses (over the length limit) counts as a miss, as it would for an agent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..._errors import CatalogError, SearchQueryError
from ._catalog import ToolCatalog

__all__ = ["MRR_DEPTH", "EvalQuery", "EvalReport", "evaluate", "evaluate_rankings", "load_queries"]

MRR_DEPTH = 100
"""Ranks looked at for MRR: a gold tool below 100 is as good as not found."""


@dataclass(frozen=True)
class EvalQuery:
    id: str
    query: str
    gold: tuple[tuple[str, str], ...]
    """(server, original tool name) pairs; any of them ranked counts as found."""


@dataclass(frozen=True)
class EvalReport:
    queries: int
    k: int
    hit_at_1: float
    hit_at_k: float
    recall_at_k: float
    mrr: float
    misses: int
    """Queries that returned no tools at all (or were refused)."""
    refused: int
    """Queries the engine refused (SearchQueryError), counted as misses."""
    unknown_gold: int
    """Gold tools not in the catalog (a data problem: they can never be found)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_queries(path: str | Path) -> list[EvalQuery]:
    """Read a JSON-lines query file.

    Raises:
        CatalogError: the file is missing or a line is not `{query, gold: [[server, tool], ...]}` (names the line).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read query file: {exc.strerror or exc}") from None
    queries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            gold = tuple((str(server), str(tool)) for server, tool in item["gold"])
            queries.append(EvalQuery(str(item.get("id", number)), str(item["query"]), gold))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CatalogError(
                f"{path}: line {number}: expected {{query, gold: [[server, tool], ...]}} ({type(exc).__name__}: {exc})"
            ) from None
    return queries


def evaluate(
    search: Callable[[str, int], Sequence[Any]], catalog: ToolCatalog, queries: Iterable[EvalQuery], k: int = 5
) -> EvalReport:
    """Run every query through `search(query, depth)` (hits with `.name`) and score the rankings."""
    rankings: list[list[str] | None] = []
    query_list = list(queries)
    for query in query_list:
        try:
            rankings.append([hit.name for hit in search(query.query, max(k, MRR_DEPTH))])
        except SearchQueryError:
            rankings.append(None)
    return evaluate_rankings(catalog, query_list, rankings, k)


def evaluate_rankings(
    catalog: ToolCatalog, queries: Sequence[EvalQuery], rankings: Sequence[Sequence[str] | None], k: int = 5
) -> EvalReport:
    """Score ready rankings (qualified names, best first; None for a refused query) against the gold."""
    index = _pair_index(catalog)
    hit1 = hitk = recall = mrr = 0.0
    misses = refused = unknown = 0
    for query, ranking in zip(queries, rankings, strict=True):
        gold = {index[pair] for pair in query.gold if pair in index}
        unknown += sum(1 for pair in query.gold if pair not in index)
        if ranking is None:
            refused += 1
            ranking = []
        if not ranking:
            misses += 1
        top = list(ranking[:k])
        hit1 += bool(ranking) and ranking[0] in gold
        hitk += any(name in gold for name in top)
        recall += len(gold & set(top)) / len(gold) if gold else 0.0
        mrr += next((1.0 / rank for rank, name in enumerate(ranking[:MRR_DEPTH], 1) if name in gold), 0.0)
    n = max(len(queries), 1)
    return EvalReport(
        queries=len(queries),
        k=k,
        hit_at_1=hit1 / n,
        hit_at_k=hitk / n,
        recall_at_k=recall / n,
        mrr=mrr / n,
        misses=misses,
        refused=refused,
        unknown_gold=unknown,
    )


def _pair_index(catalog: ToolCatalog) -> dict[tuple[str, str], str]:
    """(server, tool) -> qualified name, for every server offering each entry."""
    return {(server, entry.tool): entry.name for entry in catalog for server in entry.servers}
