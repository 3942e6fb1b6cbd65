"""Eval metrics on a tiny hand-made query set, where every figure can be worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator._errors import CatalogError
from orchestrator.protocols.mcp._catalog import ToolCatalog
from orchestrator.protocols.mcp._evaluation import EvalQuery, evaluate_rankings, load_queries

CATALOG = ToolCatalog.from_lists({"s": [{"name": name} for name in ("a", "b", "c", "d", "e", "f")]})


def q(*gold: str) -> EvalQuery:
    return EvalQuery(id="q", query="text", gold=tuple(("s", name) for name in gold))


def test_hit_recall_and_mrr_follow_their_definitions() -> None:
    queries = [q("a"), q("c", "f"), q("f"), q("b"), q("a", "zz")]
    rankings = [
        ["s__a", "s__b"],  # gold first: hit@1, hit@5, recall 1, RR 1
        ["s__b", "s__c", "s__d", "s__e", "s__a", "s__f"],  # c at 2, f at 6: hit@5, recall 1/2, RR 1/2
        ["s__a", "s__b", "s__c", "s__d", "s__e", "s__f"],  # f at 6: no hit@5, recall 0, RR 1/6
        [],  # a miss
        None,  # refused; its unknown gold tool is counted
    ]
    report = evaluate_rankings(CATALOG, queries, rankings, k=5)
    assert report.queries == 5
    assert report.hit_at_1 == pytest.approx(1 / 5)
    assert report.hit_at_k == pytest.approx(2 / 5)
    assert report.recall_at_k == pytest.approx((1 + 0.5) / 5)
    assert report.mrr == pytest.approx((1 + 1 / 2 + 1 / 6) / 5)
    assert (report.misses, report.refused, report.unknown_gold) == (2, 1, 1)


def test_query_files_are_read_and_bad_lines_named(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({"id": "1", "query": "add", "gold": [["s", "a"]]}) + "\n\n" + '{"query": "x"}\n')
    with pytest.raises(CatalogError, match=r"queries.jsonl: line 3: expected \{query, gold"):
        load_queries(path)
    path.write_text(json.dumps({"id": "1", "query": "add", "gold": [["s", "a"]]}) + "\n")
    assert load_queries(path) == [EvalQuery("1", "add", (("s", "a"),))]
