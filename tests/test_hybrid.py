"""Hybrid ranking in the engine: paraphrases, the floor, failing open to lexical, the vector cache.

Every test here runs the real model and skips when the `semantic` extra is not installed. Each test gets
a fresh process-wide state (`semantic._shared`) and its own cache folder; the loaded model is reused so
the file stays fast.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import _telemetry as telemetry
from orchestrator._config import ServerConfig, Settings, ToolSearchSettings
from orchestrator._gateway import Gateway
from orchestrator.protocols.mcp import _semantic as semantic
from orchestrator.protocols.mcp._catalog import ToolCatalog
from orchestrator.protocols.mcp._manager import MCPManager
from orchestrator.protocols.mcp._semantic import CACHE_ENV, SEMANTIC_ENV, SemanticScorer, create_blend, shared_scorer
from orchestrator.protocols.mcp._tool_search import ToolSearchEngine

for _module in semantic.EXTRA_MODULES:
    pytest.importorskip(_module, reason="the semantic extra is not installed: pip install 'orchestrator[semantic]'")


def tool(name: str, description: str, *parameters: str) -> dict[str, Any]:
    properties = {parameter: {"type": "string"} for parameter in parameters}
    return {"name": name, "description": description, "inputSchema": {"type": "object", "properties": properties}}


TOOLS = {
    "github": [
        tool("create_issue", "Create a new issue in a GitHub repository.", "owner", "repo", "title", "body"),
        tool("list_commits", "Get list of commits of a branch in a GitHub repository", "owner", "repo", "sha"),
    ],
    "mongodb": [tool("count", "Gets the number of documents in a MongoDB collection", "database", "collection")],
    "playwright": [
        tool("browser_navigate", "Navigate to a URL", "url"),
        tool("browser_take_screenshot", "Take a screenshot of the current page", "filename"),
    ],
    "time": [tool("get_current_time", "Get current time in a specific timezones", "timezone")],
    "files": [tool("read_file", "Read the complete contents of a file", "path")],
}
PARAPHRASE = "open the website example.com"
"""Shares no word with any tool: lexical ranking misses it; the model finds browser_navigate."""
OFF_TOPIC = "tell me a joke about cats"
PATIENT = ToolSearchSettings(embedding_timeout_ms=10_000)
"""Default settings but a generous query-embedding limit: a busy test machine must not turn an assertion
about hybrid ranking into a `slow_query` fallback."""


@pytest.fixture(scope="module")
def model() -> SemanticScorer:
    """One model load for the whole file (a process loads it once, too)."""
    return SemanticScorer.load(None)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[semantic._Shared]:
    """A process as far as hybrid ranking knows: nothing logged, no model failure, an empty cache folder."""
    state = semantic._Shared()
    monkeypatch.setattr(semantic, "_shared", state)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "embeddings"))
    monkeypatch.delenv(SEMANTIC_ENV, raising=False)
    yield state


@pytest.fixture
def loaded(fresh: semantic._Shared, model: SemanticScorer) -> semantic._Shared:
    """`fresh`, with the model already loaded (as after the first hybrid search of a process)."""
    fresh.model = model
    return fresh


@pytest.fixture
def catalog() -> ToolCatalog:
    return ToolCatalog.from_lists(TOOLS)


def names(hits: list[Any]) -> list[str]:
    return [hit.name for hit in hits]


def searches(metric_reader: InMemoryMetricReader) -> dict[tuple[str, str | None, str | None], float]:
    """Search invocations by (outcome, ranking, fallback), leaving out the zero-initialised series."""
    found: dict[tuple[str, str | None, str | None], float] = {}
    data = metric_reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != telemetry.SEARCH_INVOCATIONS:
                    continue
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if point.value and attributes["outcome"] != "expand":
                        key = (str(attributes["outcome"]), attributes.get("ranking"), attributes.get("fallback"))
                        found[key] = point.value
    return found


# --------------------------------------------------------------------------- ranking


def test_hybrid_finds_a_tool_that_lexical_misses_on_a_paraphrase(
    loaded: semantic._Shared, catalog: ToolCatalog, reader: InMemoryMetricReader
) -> None:
    assert ToolSearchEngine(catalog, ranking="lexical").search(PARAPHRASE) == []
    engine = ToolSearchEngine(catalog, PATIENT)  # ranking auto (the default): hybrid with the extra installed
    assert engine.ranking_used == "hybrid"
    assert names(engine.search(PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert searches(reader) == {("miss", "lexical", None): 1, ("hit", "hybrid", None): 1}


def test_hybrid_ranks_by_meaning_where_lexical_ranks_by_shared_words(loaded: semantic._Shared, catalog: ToolCatalog) -> None:
    query = "report a bug in the repository"
    assert names(ToolSearchEngine(catalog, ranking="lexical").search(query))[0] == "github__list_commits"
    assert names(ToolSearchEngine(catalog, PATIENT, ranking="hybrid").search(query))[0] == "github__create_issue"


def test_an_off_topic_query_stays_a_miss_and_hybrid_pads_nothing(
    loaded: semantic._Shared, catalog: ToolCatalog, reader: InMemoryMetricReader
) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid")
    assert engine.search(OFF_TOPIC) == []  # no shared word, every cosine below the floor
    hits = engine.search("read a file", k=8)
    assert names(hits) == ["files__read_file"]  # one lexical match: not topped up with seven unrelated tools
    assert searches(reader) == {("miss", "hybrid", None): 1, ("hit", "hybrid", None): 1}
    permissive = ToolSearchEngine(catalog, PATIENT.model_copy(update={"semantic_floor": -1.0}), ranking="hybrid")
    assert len(permissive.search(OFF_TOPIC, k=8)) == len(catalog)  # what the floor prevents


def test_exact_names_still_come_first_under_hybrid(loaded: semantic._Shared, catalog: ToolCatalog) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid")
    hits = engine.search("browser_navigate")
    assert names(hits) == ["playwright__browser_navigate", "playwright__browser_take_screenshot"]
    assert hits[0].score > hits[1].score
    assert names(engine.search("select:read_file,get_current_time")) == ["files__read_file", "time__get_current_time"]


def test_lexical_ranking_never_loads_the_model(fresh: semantic._Shared, catalog: ToolCatalog) -> None:
    assert create_blend(ToolSearchSettings(ranking="lexical")) is None
    engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical"))
    assert engine.search("read a file") and engine.warm()
    assert fresh.model is None


def test_every_engine_shares_one_loaded_model(loaded: semantic._Shared, catalog: ToolCatalog) -> None:
    first, second = ToolSearchEngine(catalog), ToolSearchEngine(catalog.filtered(lambda e: e.server != "time"))
    first.search(PARAPHRASE)
    second.search(PARAPHRASE)
    assert list(loaded.scorers.values()) == [shared_scorer()]
    assert shared_scorer()._session is loaded.model._session  # type: ignore[union-attr]


# --------------------------------------------------------------------------- failing open


REFERENCE = {("hit", "lexical", None): 2, ("miss", "lexical", None): 1}
"""What `assert_lexical_answer`'s own lexical engine records."""


def assert_lexical_answer(engine: ToolSearchEngine, catalog: ToolCatalog) -> None:
    """`engine` answers two hits and a miss exactly as lexical ranking does."""
    lexical = ToolSearchEngine(catalog, ranking="lexical")
    for query in ("report a bug in the repository", PARAPHRASE, "read a file"):
        assert engine.search(query) == lexical.search(query)


@pytest.mark.parametrize("ranking", ["auto", "hybrid"])
def test_a_missing_extra_answers_lexically_logs_once_and_counts_the_reason(
    fresh: semantic._Shared,
    catalog: ToolCatalog,
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    ranking: str,
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    with caplog.at_level(logging.INFO, logger=semantic.__name__):
        engines = [ToolSearchEngine(catalog, ranking=ranking) for _ in range(3)]
    assert all(engine.ranking_used == "lexical" for engine in engines)
    assert_lexical_answer(engines[0], catalog)
    assert searches(reader) == {**REFERENCE, ("hit", "lexical", "missing_extra"): 2, ("miss", "lexical", "missing_extra"): 1}
    [record] = caplog.records  # once per process, not once per engine or search
    assert "orchestrator[semantic]" in record.getMessage()
    assert record.levelno == (logging.WARNING if ranking == "hybrid" else logging.INFO)


def test_the_environment_switch_turns_hybrid_off(
    loaded: semantic._Shared, catalog: ToolCatalog, reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SEMANTIC_ENV, "off")
    engine = ToolSearchEngine(catalog, ranking="hybrid")
    assert engine.ranking_used == "lexical"
    assert engine.search(PARAPHRASE) == []
    assert searches(reader) == {("miss", "lexical", "disabled"): 1}


@pytest.mark.parametrize("kind", ["hash_mismatch", "load_failed"])
def test_a_corrupt_model_file_answers_lexically_and_counts_the_reason(
    fresh: semantic._Shared,
    catalog: ToolCatalog,
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    kind: str,
) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07 not an onnx graph" * 64)
    monkeypatch.setattr(semantic, "_installed_model_path", lambda: broken)
    if kind == "load_failed":  # a file with the pinned hash that onnxruntime still cannot read
        monkeypatch.setattr(semantic, "MODEL_SHA256", hashlib.sha256(broken.read_bytes()).hexdigest())
    engine = ToolSearchEngine(catalog, ranking="hybrid")
    with caplog.at_level(logging.INFO, logger=semantic.__name__):
        assert_lexical_answer(engine, catalog)
    assert engine.ranking_used == "lexical"
    assert searches(reader) == {**REFERENCE, ("hit", "lexical", kind): 2, ("miss", "lexical", kind): 1}
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert str(broken) in caplog.records[0].getMessage()
    later = ToolSearchEngine(catalog)  # the process remembers: no second load attempt
    assert later.ranking_used == "lexical"


def test_a_slow_query_embedding_answers_lexically_and_counts_the_reason(
    loaded: semantic._Shared, catalog: ToolCatalog, reader: InMemoryMetricReader
) -> None:
    engine = ToolSearchEngine(catalog, ToolSearchSettings(embedding_timeout_ms=0.001), ranking="hybrid")
    assert engine.warm(timeout=60)  # the catalog's vectors are ready; only the query is too slow
    assert_lexical_answer(engine, catalog)
    assert searches(reader) == {**REFERENCE, ("hit", "lexical", "slow_query"): 2, ("miss", "lexical", "slow_query"): 1}
    assert engine.ranking_used == "hybrid"  # the next fast query blends again


def test_a_large_uncached_catalog_warms_in_the_background_while_searches_answer_lexically(
    loaded: semantic._Shared, reader: InMemoryMetricReader
) -> None:
    count = semantic.SYNC_EMBED_TEXTS + 8
    big = ToolCatalog.from_lists(
        {**TOOLS, "bulk": [tool(f"task_{i}", f"Step {i} of a long batch job") for i in range(count)]}
    )
    engine = ToolSearchEngine(big, PATIENT, ranking="hybrid")  # over SYNC_EMBED_TEXTS: background either way
    assert engine.search(PARAPHRASE) == []  # lexical while the tools are embedded
    assert engine.warm(timeout=120)
    assert names(engine.search(PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert searches(reader) == {("miss", "lexical", "warming"): 1, ("hit", "hybrid", None): 1}
    assert shared_scorer().texts_embedded == len(big) + 1  # every tool once, and one query


def test_a_few_uncached_tools_are_embedded_inside_the_first_search(loaded: semantic._Shared, catalog: ToolCatalog) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid")
    assert names(engine.search(PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert not shared_scorer().warming


class _Broken:
    def prepare(self, catalog: ToolCatalog) -> None:
        pass

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise RuntimeError("a bug in a custom blend")


def test_a_blend_that_raises_anything_still_answers_lexically(catalog: ToolCatalog, reader: InMemoryMetricReader) -> None:
    engine = ToolSearchEngine(catalog, ranking="hybrid", blend=_Broken())
    assert_lexical_answer(engine, catalog)
    assert searches(reader) == {**REFERENCE, ("hit", "lexical", "blend_failed"): 2, ("miss", "lexical", "blend_failed"): 1}


# --------------------------------------------------------------------------- the vector cache


def test_the_cache_reembeds_only_changed_tools(
    loaded: semantic._Shared, model: SemanticScorer, catalog: ToolCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ToolSearchEngine(catalog).warm(timeout=60)
    assert shared_scorer().texts_embedded == len(catalog)
    assert shared_scorer().cache_path is not None and shared_scorer().cache_path.is_file()  # type: ignore[union-attr]

    restarted = semantic._Shared()  # a new process: nothing in memory, the same cache folder
    restarted.model = model
    monkeypatch.setattr(semantic, "_shared", restarted)
    changed = {**TOOLS, "mongodb": [tool("count", "Count the documents matching a filter", "database", "collection")]}
    engine = ToolSearchEngine(ToolCatalog.from_lists(changed), PATIENT)
    assert engine.warm(timeout=60)
    assert shared_scorer().texts_embedded == 1
    assert names(engine.search("how many documents match"))[0] == "mongodb__count"


# --------------------------------------------------------------------------- the gateway


TIME_SERVER = ServerConfig(command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"])
"""The published mcp-server-time (2 tools: full mode unless the threshold forces search mode)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_gateway_embeds_its_catalog_when_it_starts_so_the_first_search_is_hybrid(
    loaded: semantic._Shared, reader: InMemoryMetricReader, tmp_path: Path
) -> None:
    """No search yet: starting to serve hands the tools to the background embedding; the first search of
    the first spawn is then ranked by meaning, with nothing left to embed but its query."""
    settings = Settings(
        mcp={
            "servers": {"time": TIME_SERVER},
            "cache_dir": tmp_path / "cache",
            "tool_search": {"threshold_tokens": 0, "embedding_timeout_ms": 10_000},
        }
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0):
            scorer = shared_scorer()
            keys = scorer.keys(semantic.entry_text(entry) for entry in gateway.catalog())
            assert len(keys) == 2
            with anyio.fail_after(30):
                while scorer.cached(keys)[0] is None:
                    await anyio.sleep(0.05)
            assert searches(reader) == {}  # embedded before anybody searched
            embedded = scorer.texts_embedded
            handle = gateway.open_spawn("what time is it", "default")
            assert handle.plan.mode == "search"
            hits = gateway._view("default").engine.search("what time is it in Tokyo")
            assert names(hits)[0] in {"time__get_current_time", "time__convert_time"}
            assert searches(reader) == {("hit", "hybrid", None): 1}
            assert scorer.texts_embedded == embedded + 1  # the query only
        gateway.close()


@pytest.mark.anyio
async def test_a_full_mode_gateway_embeds_nothing(loaded: semantic._Shared, tmp_path: Path) -> None:
    settings = Settings(mcp={"servers": {"time": TIME_SERVER}, "cache_dir": tmp_path / "cache"})  # 2 tools: full
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        assert gateway.warm_search() == 0
        async with gateway.running("127.0.0.1", 0):
            pass
        gateway.close()
    assert shared_scorer().texts_embedded == 0 and not shared_scorer().warming
