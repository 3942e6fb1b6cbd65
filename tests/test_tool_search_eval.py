"""Eval metrics on a tiny hand-made query set, where every figure can be worked out by hand."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from orchestrator import CatalogError, ToolCatalog
from orchestrator.search._evaluation import EvalQuery, evaluate_rankings, load_queries

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
    # A line break of another kind inside a query is text, not the end of the line (JSON keeps U+2028 raw).
    path.write_text(json.dumps({"id": "1", "query": "add\u2028it", "gold": [["s", "a"]]}, ensure_ascii=False) + "\r\n")
    assert load_queries(path) == [EvalQuery("1", "add\u2028it", (("s", "a"),))]


def test_each_style_gets_the_same_figures_over_its_own_queries() -> None:
    queries = [
        EvalQuery("1", "text", (("s", "a"),), "agent"),
        EvalQuery("2", "text", (("s", "b"),), "natural"),
        EvalQuery("3", "text", (("s", "c"),), "agent"),
        EvalQuery("4", "text", (("s", "d"),)),  # no style: only in the totals
    ]
    rankings = [["s__a"], ["s__a", "s__b"], [], ["s__d"]]
    report = evaluate_rankings(CATALOG, queries, rankings, k=5)
    assert report.queries == 4 and report.hit_at_1 == pytest.approx(2 / 4)
    assert list(report.styles) == ["agent", "natural"]  # in order of first appearance
    agent, natural = report.styles["agent"], report.styles["natural"]
    assert (agent.queries, agent.hit_at_1, agent.hit_at_k, agent.mrr, agent.misses) == (2, 0.5, 0.5, 0.5, 1)
    assert (natural.queries, natural.hit_at_1, natural.hit_at_k, natural.mrr) == (1, 0.0, 1.0, 0.5)
    assert natural.styles == {} and report.to_dict()["styles"]["natural"]["hit_at_k"] == 1.0
    assert evaluate_rankings(CATALOG, [q("a")], [["s__a"]]).styles == {}


def test_a_query_file_may_give_each_query_a_style(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({"id": "1", "query": "add", "gold": [["s", "a"]], "style": "agent"}) + "\n")
    assert load_queries(path) == [EvalQuery("1", "add", (("s", "a"),), "agent")]
    path.write_text(json.dumps({"id": "1", "query": "add", "gold": [["s", "a"]], "style": 3}) + "\n")
    with pytest.raises(CatalogError, match=r"line 1: .*style must be a string, got int"):
        load_queries(path)


def test_the_ablation_grids_default_options_rank_as_the_engine_does(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """benchmarks/retrieval.py --ablations and --cv change one option at a time against its own lexical
    ranking: with the default options that ranking must be the engine's, or every row is measured from
    the wrong baseline."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    retrieval = importlib.import_module("retrieval")
    dev = retrieval.load("mcp-catalogs")
    ablation = retrieval.options_rankings(retrieval.Options(), dev, {})
    assert ablation == retrieval.lexical_rankings(dev.catalog, dev.queries)
    assert sum(ranking is not None and len(ranking) > 0 for ranking in ablation) > len(dev.queries) // 2
