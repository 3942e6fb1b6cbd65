"""Ranking quality on a query set: hit@1, hit@k, recall@k and MRR, as `orchestrator eval` prints them.

A query file is JSON lines `{id, query, gold: [[server, tool], ...], style}` (the `../shared/data/retrieval`
format; `style` is optional: "agent", "natural", "non-english"...). hit@k counts a query when any gold tool
is in the top k; recall@k is the share of its gold tools there; MRR is the mean of 1/rank of the first gold
tool within the top MRR_DEPTH (0 when none). A query the engine refuses (over the length limit) counts as a
miss, as it would for an agent. When queries carry a style, the report also has the same figures per style.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CatalogError, SearchQueryError
from ..protocols.mcp._catalog import ToolCatalog

__all__ = ["MRR_DEPTH", "EvalQuery", "EvalReport", "evaluate", "evaluate_rankings", "load_queries"]

MRR_DEPTH = 100
"""Ranks looked at for MRR: a gold tool below 100 is as good as not found."""


@dataclass(frozen=True)
class EvalQuery:
    id: str
    query: str
    gold: tuple[tuple[str, str], ...]
    """(server, original tool name) pairs; any of them ranked counts as found."""
    style: str | None = None
    """How the request is phrased (the set's `style` field), for per-style figures; None when not given."""


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
    styles: dict[str, EvalReport] = field(default_factory=dict)
    """The same figures for the queries of each style, in order of first appearance; empty when no query
    has a style. Queries without one are counted only in the totals."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_queries(path: str | Path) -> list[EvalQuery]:
    """Read a JSON-lines query file.

    Raises:
        CatalogError: the file is missing or a line is not `{query, gold: [[server, tool], ...]}` (names the line).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 is valid inside JSON text
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read query file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: query file is not UTF-8 text (byte {exc.start})") from None
    queries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            gold = tuple((str(server), str(tool)) for server, tool in item["gold"])
            style = item.get("style")
            if style is not None and not isinstance(style, str):
                raise TypeError(f"style must be a string, got {type(style).__name__}")
            queries.append(EvalQuery(str(item.get("id", number)), str(item["query"]), gold, style))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError) as exc:
            raise CatalogError(
                f"{path}: line {number}: expected {{query, gold: [[server, tool], ...], style?}} ({type(exc).__name__}: {exc})"
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
    outcomes = [_outcome(query, ranking, index, k) for query, ranking in zip(queries, rankings, strict=True)]
    by_style: dict[str, list[_Outcome]] = {}
    for query, outcome in zip(queries, outcomes, strict=True):
        if query.style is not None:
            by_style.setdefault(query.style, []).append(outcome)
    return _report(outcomes, k, {style: _report(group, k) for style, group in by_style.items()})


@dataclass(frozen=True)
class _Outcome:
    """One query's contribution to every figure."""

    hit1: bool
    hitk: bool
    recall: float
    reciprocal_rank: float
    miss: bool
    refused: bool
    unknown_gold: int


def _outcome(query: EvalQuery, ranking: Sequence[str] | None, index: dict[tuple[str, str], str], k: int) -> _Outcome:
    gold = {index[pair] for pair in query.gold if pair in index}
    refused = ranking is None
    ranked = list(ranking or ())
    top = ranked[:k]
    return _Outcome(
        hit1=bool(ranked) and ranked[0] in gold,
        hitk=any(name in gold for name in top),
        recall=len(gold & set(top)) / len(gold) if gold else 0.0,
        reciprocal_rank=next((1.0 / rank for rank, name in enumerate(ranked[:MRR_DEPTH], 1) if name in gold), 0.0),
        miss=not ranked,
        refused=refused,
        unknown_gold=sum(1 for pair in query.gold if pair not in index),
    )


def _report(outcomes: Sequence[_Outcome], k: int, styles: dict[str, EvalReport] | None = None) -> EvalReport:
    n = max(len(outcomes), 1)
    return EvalReport(
        queries=len(outcomes),
        k=k,
        hit_at_1=sum(o.hit1 for o in outcomes) / n,
        hit_at_k=sum(o.hitk for o in outcomes) / n,
        recall_at_k=sum(o.recall for o in outcomes) / n,
        mrr=sum(o.reciprocal_rank for o in outcomes) / n,
        misses=sum(o.miss for o in outcomes),
        refused=sum(o.refused for o in outcomes),
        unknown_gold=sum(o.unknown_gold for o in outcomes),
        styles=styles or {},
    )


def _pair_index(catalog: ToolCatalog) -> dict[tuple[str, str], str]:
    """(server, tool) -> qualified name, for every server offering each entry."""
    return {(server, entry.tool): entry.name for entry in catalog for server in entry.servers}
