"""Hybrid ranking in the engine: paraphrases, the floor, failing open to lexical, the vector cache, the
runtime's lifecycle and where it writes.

Every test here runs the real model; a missing package fails them (`embedding_models`), it is a broken
install. Each test builds the `EmbeddingRuntime` it needs (its own cache folder, nothing logged yet) and
passes it in; the loaded model is shared between them so the file stays fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    EmbeddingRuntime,
    Gateway,
    MCPManager,
    SemanticScorer,
    Settings,
    Telemetry,
    ToolCatalog,
    ToolSearchEngine,
    ToolSearchSettings,
)
from orchestrator._blobs import PACK_SUFFIX
from orchestrator._telemetry import SEARCH_INVOCATIONS
from orchestrator.search import _embedding as embedding
from orchestrator.search._embedding import blend as blend_module
from orchestrator.search._embedding.model import MODEL_SHA256
from orchestrator.search._embedding.rules import entry_text
from orchestrator.search._embedding.store import CACHE_NAME

from .conftest import TIME_SERVER, agent_search, stdio_server_config

pytestmark = pytest.mark.usefixtures("embedding_models")


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
SUBPROCESS_TIMEOUT_S = 120.0
"""A fresh interpreter imports the SDK stack and loads the model: generous on a loaded 2-core machine."""


@pytest.fixture(scope="module")
def model() -> SemanticScorer:
    """One model load for the whole file (a process loads it once, too)."""
    return SemanticScorer.load()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[EmbeddingRuntime]:
    """A runtime as a process starts with it: nothing loaded or logged, an empty cache folder."""
    with EmbeddingRuntime(tmp_path / "embeddings") as runtime:
        yield runtime


@pytest.fixture
def loaded(tmp_path: Path, model: SemanticScorer) -> Iterator[EmbeddingRuntime]:
    """`fresh`, with the model already loaded (as after the first hybrid search of a process)."""
    with EmbeddingRuntime(tmp_path / "embeddings", model=model) as runtime:
        yield runtime


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
                if metric.name != SEARCH_INVOCATIONS:
                    continue
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if point.value and attributes["outcome"] != "expand":
                        key = (str(attributes["outcome"]), attributes.get("ranking"), attributes.get("fallback"))
                        found[key] = point.value
    return found


def counting(load: Callable[[], SemanticScorer]) -> tuple[Callable[[], SemanticScorer], list[int]]:
    """A model loader that counts its calls."""
    calls: list[int] = []

    def counted() -> SemanticScorer:
        calls.append(1)
        return load()

    return counted, calls


# --------------------------------------------------------------------------- ranking


def test_hybrid_finds_a_tool_that_lexical_misses_on_a_paraphrase(
    loaded: EmbeddingRuntime, catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    assert agent_search(ToolSearchEngine(catalog, ranking="lexical", telemetry=telemetry), PARAPHRASE) == []
    engine = ToolSearchEngine(catalog, PATIENT, embeddings=loaded, telemetry=telemetry)  # auto, the default
    assert engine.ranking_used == "hybrid"
    assert names(agent_search(engine, PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert searches(reader) == {("miss", "lexical", None): 1, ("hit", "hybrid", None): 1}


def test_hybrid_ranks_by_meaning_where_lexical_ranks_by_shared_words(
    loaded: EmbeddingRuntime, catalog: ToolCatalog
) -> None:
    query = "report a bug in the repository"
    assert names(ToolSearchEngine(catalog, ranking="lexical").search(query))[0] == "github__list_commits"
    hybrid = ToolSearchEngine(catalog, PATIENT, ranking="hybrid", embeddings=loaded)
    assert names(hybrid.search(query))[0] == "github__create_issue"


def test_a_request_in_another_language_is_answered_by_hybrid_and_missed_by_lexical(
    loaded: EmbeddingRuntime, catalog: ToolCatalog
) -> None:
    query = "¿Qué hora es ahora en Madrid?"  # shares no word with any tool
    assert ToolSearchEngine(catalog, ranking="lexical").search(query) == []
    hybrid = ToolSearchEngine(catalog, PATIENT, ranking="hybrid", embeddings=loaded)
    assert names(hybrid.search(query))[0] == "time__get_current_time"


def test_an_off_topic_query_stays_a_miss_and_hybrid_pads_nothing(
    loaded: EmbeddingRuntime, catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid", embeddings=loaded, telemetry=telemetry)
    assert agent_search(engine, OFF_TOPIC) == []  # no shared word, every cosine below the floor
    hits = agent_search(engine, "read a file", k=8)
    # One lexical match, and at most the one tool whose cosine reaches the floor (the screenshot tool takes a
    # file name): not topped up to eight with unrelated tools.
    assert names(hits)[0] == "files__read_file"
    assert len(hits) <= 2
    assert searches(reader) == {("miss", "hybrid", None): 1, ("hit", "hybrid", None): 1}
    no_floor = PATIENT.model_copy(update={"semantic_floor": -1.0})
    permissive = ToolSearchEngine(catalog, no_floor, ranking="hybrid", embeddings=loaded)
    assert len(agent_search(permissive, OFF_TOPIC, k=8)) == len(catalog)  # what the floor prevents


class _Recording:
    """The runtime's own blend, keeping the text each search hands it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.queries = inner, []

    def prepare(self, catalog: ToolCatalog) -> None:
        self.inner.prepare(catalog)

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.queries.append(query)
        return self.inner.blend(query, lexical, candidates)


def test_a_long_request_is_answered_by_hybrid_embedding_only_a_few_steps(
    loaded: EmbeddingRuntime, catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    from orchestrator.search._engine import LONG_QUERY_CHARS, MAX_EMBEDDED_STEPS

    filler = "Our squad has been busy this quarter and everybody is tired. " * 12
    text = f"{filler}First, {PARAPHRASE}. {filler}Then take a screenshot of the current page. {filler}"
    assert len(text) > 2 * LONG_QUERY_CHARS
    recording = _Recording(loaded.create_blend(PATIENT))
    engine = ToolSearchEngine(catalog, PATIENT, blend=recording, telemetry=telemetry)
    found = names(agent_search(engine, text))
    assert {"playwright__browser_navigate", "playwright__browser_take_screenshot"} <= set(found[:3])
    assert len(recording.queries[0].splitlines()) <= MAX_EMBEDDED_STEPS
    assert searches(reader) == {("hit", "hybrid", None): 1}


def test_exact_names_still_come_first_under_hybrid(loaded: EmbeddingRuntime, catalog: ToolCatalog) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid", embeddings=loaded)
    hits = engine.search("browser_navigate")
    assert names(hits) == ["playwright__browser_navigate", "playwright__browser_take_screenshot"]
    assert hits[0].score > hits[1].score
    assert names(engine.search("select:read_file,get_current_time")) == ["files__read_file", "time__get_current_time"]


def test_lexical_ranking_never_loads_the_model(tmp_path: Path, model: SemanticScorer, catalog: ToolCatalog) -> None:
    load, calls = counting(lambda: model)
    with EmbeddingRuntime(tmp_path, load_model=load) as runtime:
        assert runtime.create_blend(ToolSearchSettings(ranking="lexical")) is None
        engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical"), embeddings=runtime)
        assert engine.search("read a file") and engine.warm()
        assert runtime.model is None and calls == []


def test_every_engine_of_a_runtime_shares_one_model_load_and_one_vector_cache(
    tmp_path: Path, model: SemanticScorer, catalog: ToolCatalog
) -> None:
    load, calls = counting(lambda: model)
    with EmbeddingRuntime(tmp_path, load_model=load) as runtime:
        first = ToolSearchEngine(catalog, PATIENT, embeddings=runtime)
        second = ToolSearchEngine(catalog.filtered(lambda e: e.server != "time"), PATIENT, embeddings=runtime)
        assert (
            names(first.search(PARAPHRASE))[:1]
            == names(second.search(PARAPHRASE))[:1]
            == ["playwright__browser_navigate"]
        )
        assert calls == [1]
        assert runtime.vectors() is runtime.vectors() and runtime.vectors().model is model
        assert runtime.vectors().texts_embedded == len(catalog)  # the second catalog's tools were all cached


# --------------------------------------------------------------------------- failing open


REFERENCE = {("hit", "lexical", None): 2, ("miss", "lexical", None): 1}
"""What `assert_lexical_answer`'s own lexical engine records."""


def assert_lexical_answer(engine: ToolSearchEngine, catalog: ToolCatalog) -> None:
    """`engine` answers two hits and a miss exactly as lexical ranking does (both searched as an agent would,
    so both are counted)."""
    lexical = ToolSearchEngine(catalog, ranking="lexical", telemetry=engine.telemetry)
    for query in ("report a bug in the repository", PARAPHRASE, "read a file"):
        assert agent_search(engine, query) == agent_search(lexical, query)


def test_a_missing_model_package_answers_lexically_logs_once_and_counts_the_reason(
    fresh: EmbeddingRuntime,
    catalog: ToolCatalog,
    reader: InMemoryMetricReader,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    with caplog.at_level(logging.INFO, logger=embedding.__name__):
        engines = [ToolSearchEngine(catalog, ranking="hybrid", embeddings=fresh, telemetry=telemetry) for _ in range(3)]
    assert all(engine.ranking_used == "lexical" for engine in engines)
    assert_lexical_answer(engines[0], catalog)
    assert searches(reader) == {
        **REFERENCE,
        ("hit", "lexical", "missing_extra"): 2,
        ("miss", "lexical", "missing_extra"): 1,
    }
    [record] = caplog.records  # once per runtime, not once per engine or search
    assert "onnxruntime" in record.getMessage() and "reinstall" in record.getMessage()
    assert record.levelno == logging.WARNING  # the models are part of the base install: a broken one


def test_lexical_ranking_in_settings_never_loads_a_model(
    tmp_path: Path, catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    settings = Settings(mcp={"cache_dir": tmp_path / "cache", "tool_search": {"ranking": "lexical"}})
    with EmbeddingRuntime.from_settings(settings) as runtime:
        engine = ToolSearchEngine(catalog, settings.mcp.tool_search, embeddings=runtime, telemetry=telemetry)
        assert engine.ranking_used == "lexical"
        assert agent_search(engine, PARAPHRASE) == []
        assert runtime.model is None
    assert searches(reader) == {("miss", "lexical", None): 1}  # asked for: no fallback
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("kind", ["hash_mismatch", "load_failed"])
def test_a_corrupt_model_file_answers_lexically_and_counts_the_reason(
    catalog: ToolCatalog,
    reader: InMemoryMetricReader,
    telemetry: Telemetry,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    kind: str,
) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07 not an onnx graph" * 64)
    # A file with the pinned hash that onnxruntime still cannot read gives `load_failed`.
    pinned = hashlib.sha256(broken.read_bytes()).hexdigest() if kind == "load_failed" else MODEL_SHA256
    load, calls = counting(lambda: SemanticScorer.load(model_path=broken, model_sha256=pinned))
    with EmbeddingRuntime(tmp_path / "embeddings", load_model=load) as runtime:
        engine = ToolSearchEngine(catalog, ranking="hybrid", embeddings=runtime, telemetry=telemetry)
        with caplog.at_level(logging.INFO, logger=embedding.__name__):
            assert_lexical_answer(engine, catalog)
        assert engine.ranking_used == "lexical"
        assert searches(reader) == {**REFERENCE, ("hit", "lexical", kind): 2, ("miss", "lexical", kind): 1}
        assert [record.levelno for record in caplog.records] == [logging.WARNING]
        assert str(broken) in caplog.records[0].getMessage()
        later = ToolSearchEngine(catalog, embeddings=runtime)  # the runtime remembers: no second load attempt
        assert later.ranking_used == "lexical"
        assert runtime.error is not None and runtime.error.kind == kind and calls == [1]


def test_a_slow_query_embedding_answers_lexically_and_counts_the_reason(
    loaded: EmbeddingRuntime, catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    settings = ToolSearchSettings(embedding_timeout_ms=0.001)
    engine = ToolSearchEngine(catalog, settings, ranking="hybrid", embeddings=loaded, telemetry=telemetry)
    assert engine.warm(timeout=60)  # the catalog's vectors are ready; only the query is too slow
    assert_lexical_answer(engine, catalog)
    assert searches(reader) == {**REFERENCE, ("hit", "lexical", "slow_query"): 2, ("miss", "lexical", "slow_query"): 1}
    assert engine.ranking_used == "hybrid"  # the next fast query blends again


def big_catalog() -> ToolCatalog:
    """More uncached tools than a search may embed inside itself: they go to the background."""
    count = blend_module.SYNC_EMBED_TEXTS + 8
    return ToolCatalog.from_lists(
        {**TOOLS, "bulk": [tool(f"task_{i}", f"Step {i} of a long batch job") for i in range(count)]}
    )


def test_a_large_uncached_catalog_warms_in_the_background_while_searches_answer_lexically(
    loaded: EmbeddingRuntime, model: SemanticScorer, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    big = big_catalog()
    before = model.texts_embedded
    engine = ToolSearchEngine(big, PATIENT, ranking="hybrid", embeddings=loaded, telemetry=telemetry)
    assert agent_search(engine, PARAPHRASE) == []  # lexical while the tools are embedded
    assert engine.warm(timeout=120)
    assert names(agent_search(engine, PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert searches(reader) == {("miss", "lexical", "warming"): 1, ("hit", "hybrid", None): 1}
    assert loaded.vectors().texts_embedded == len(big)  # every tool once
    assert model.texts_embedded - before == len(big) + 1  # and one query


def test_a_few_uncached_tools_are_embedded_inside_the_first_search(
    loaded: EmbeddingRuntime, catalog: ToolCatalog
) -> None:
    engine = ToolSearchEngine(catalog, PATIENT, ranking="hybrid", embeddings=loaded)
    assert names(engine.search(PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    assert not loaded.vectors().warming


def test_one_servers_new_tool_is_embedded_inside_the_next_search_and_the_index_built_once(
    loaded: EmbeddingRuntime, catalog: ToolCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = [catalog]
    engine = ToolSearchEngine(lambda: current[0], PATIENT, ranking="hybrid", embeddings=loaded)
    assert engine.warm(timeout=60)
    builds: list[int] = []
    build = embedding.index.VectorIndex.build.__func__  # type: ignore[attr-defined]

    def counted(cls: type, keys: Any, *args: Any) -> Any:
        builds.append(len(keys))
        return build(cls, keys, *args)

    monkeypatch.setattr(embedding.index.VectorIndex, "build", classmethod(counted))
    embedded = loaded.vectors().texts_embedded
    changed = {**TOOLS, "mongodb": [tool("count", "Count the documents matching a filter", "database", "collection")]}
    current[0] = catalog.updated(changed, ["mongodb"])
    hits = engine.search("how many documents match")
    assert names(hits)[0] == "mongodb__count" and engine.ranking_used == "hybrid"
    assert loaded.vectors().texts_embedded == embedded + 1
    assert builds == [len(current[0])]  # not a first attempt that found the new text missing, then a second


class _Broken:
    def prepare(self, catalog: ToolCatalog) -> None:
        pass

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise RuntimeError("a bug in a custom blend")


def test_a_blend_that_raises_anything_still_answers_lexically(
    catalog: ToolCatalog, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    engine = ToolSearchEngine(catalog, ranking="hybrid", blend=_Broken(), telemetry=telemetry)
    assert_lexical_answer(engine, catalog)
    assert searches(reader) == {
        **REFERENCE,
        ("hit", "lexical", "blend_failed"): 2,
        ("miss", "lexical", "blend_failed"): 1,
    }


# --------------------------------------------------------------------------- the vector cache and lifecycle


def test_the_cache_reembeds_only_changed_tools(
    loaded: EmbeddingRuntime, model: SemanticScorer, catalog: ToolCatalog, tmp_path: Path
) -> None:
    assert ToolSearchEngine(catalog, embeddings=loaded).warm(timeout=60)
    assert loaded.vectors().texts_embedded == len(catalog)
    assert loaded.vectors().cache_path == tmp_path / "embeddings" / CACHE_NAME
    packs = (tmp_path / "embeddings" / CACHE_NAME).iterdir()
    # Finished packs only (a background write may still have its hidden temporary file open).
    assert [path.suffix for path in packs if not path.name.startswith(".")] == [PACK_SUFFIX]

    changed = {**TOOLS, "mongodb": [tool("count", "Count the documents matching a filter", "database", "collection")]}
    with EmbeddingRuntime(tmp_path / "embeddings", model=model) as restarted:  # a new process, the same folder
        engine = ToolSearchEngine(ToolCatalog.from_lists(changed), PATIENT, embeddings=restarted)
        assert engine.warm(timeout=60)
        assert restarted.vectors().texts_embedded == 1
        assert names(engine.search("how many documents match"))[0] == "mongodb__count"


def test_closing_the_runtime_stops_background_embedding_and_saves_what_it_embedded(
    tmp_path: Path, model: SemanticScorer, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    big = big_catalog()
    folder = tmp_path / "embeddings"
    runtime = EmbeddingRuntime(folder, model=model)
    engine = ToolSearchEngine(big, PATIENT, ranking="hybrid", embeddings=runtime, telemetry=telemetry)
    assert engine.warm(timeout=0) is False  # handed to the background thread, not waited for
    vectors = runtime.vectors()
    shortest = min((entry_text(entry) for entry in big), key=len)  # in the first background step
    assert vectors.wait(vectors.keys([shortest]), timeout=60)
    runtime.close()
    assert not vectors.warming  # the thread ended with its current step
    assert agent_search(engine, PARAPHRASE) == []  # a closed runtime: lexical, counted as disabled
    assert searches(reader) == {("miss", "lexical", "disabled"): 1}

    with EmbeddingRuntime(folder, model=model) as restarted:
        keys = restarted.vectors().keys(entry_text(entry) for entry in big)
        _, missing = restarted.vectors().cached(keys)
    assert len(missing) == len(big) - vectors.texts_embedded  # all it embedded was saved
    assert vectors.texts_embedded > 0


def test_an_engine_without_a_runtime_builds_one_on_the_user_cache_and_closes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, catalog: ToolCatalog
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    engine = ToolSearchEngine(catalog, PATIENT)  # auto ranking, no runtime given: the engine owns one
    assert names(engine.search(PARAPHRASE))[:1] == ["playwright__browser_navigate"]
    engine.close()
    engine.close()
    packs = tmp_path / "xdg" / "orchestrator" / "embeddings" / CACHE_NAME
    assert [path.suffix for path in packs.iterdir()] == [PACK_SUFFIX]  # on disk, not memory only
    assert engine.search(PARAPHRASE) == []  # its closed runtime: lexical from now on


def test_vectors_go_under_the_cache_root_and_nothing_is_written_anywhere_else(tmp_path: Path) -> None:
    """A fresh process (onnxruntime imported for the first time, by the runtime) with `mcp.cache_dir`
    set: a hybrid search leaves one pack in `<cache_dir>/embeddings/vectors/` and nothing else, not in the user
    cache dir (onnxruntime's telemetry included), the home folder, the working folder or the temp dir."""
    places = {name: tmp_path / name for name in ("xdg", "home", "cwd", "tmp")}
    for place in places.values():
        place.mkdir()
    script = textwrap.dedent(
        """
        import json, sys
        from orchestrator import EmbeddingRuntime, Settings, ToolCatalog, ToolSearchEngine

        settings = Settings(mcp={"cache_dir": sys.argv[1], "tool_search": {"embedding_timeout_ms": 10000}})
        catalog = ToolCatalog.from_lists(json.loads(sys.argv[2]))
        with EmbeddingRuntime.from_settings(settings) as embeddings:
            engine = ToolSearchEngine(catalog, settings.mcp.tool_search, embeddings=embeddings)
            hits = engine.search(sys.argv[3])
            print(json.dumps({"ranking": engine.ranking_used, "hits": [hit.name for hit in hits]}))
        """
    )
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(places["xdg"]),
        "HOME": str(places["home"]),
        "TMPDIR": str(places["tmp"]),
    }
    env.pop("ORT_DISABLE_TELEMETRY", None)  # the runtime must switch it off itself
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "cache"), json.dumps(TOOLS), PARAPHRASE],
        cwd=places["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["ranking"] == "hybrid" and answer["hits"][:1] == ["playwright__browser_navigate"]
    written = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if not path.is_dir())
    assert len(written) == 1 and written[0].startswith(f"cache/embeddings/{CACHE_NAME}/"), written
    assert written[0].endswith(PACK_SUFFIX) and "/." not in written[0]


# --------------------------------------------------------------------------- the gateway


"""The published mcp-server-time (2 tools: full mode unless the threshold forces search mode)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_gateway_embeds_its_catalog_when_it_starts_so_the_first_search_is_hybrid(
    loaded: EmbeddingRuntime, model: SemanticScorer, reader: InMemoryMetricReader, telemetry: Telemetry, tmp_path: Path
) -> None:
    """No search yet: starting to serve hands the tools to the background embedding; the first search of
    the first spawn is then ranked by meaning, with nothing left to embed but its query."""
    settings = Settings(
        mcp={
            "servers": {"time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")},
            "cache_dir": tmp_path / "cache",
            "tool_search": {"threshold_tokens": 0, "embedding_timeout_ms": 10_000},
        }
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager, embeddings=loaded, telemetry=telemetry)
        async with gateway.running("127.0.0.1", 0):
            vectors = loaded.vectors()
            keys = vectors.keys(entry_text(entry) for entry in gateway.catalog())
            assert len(keys) == 2
            with anyio.fail_after(30):
                # The gateway starts warming in its own task, and the cache has no async notification.
                while vectors.cached(keys)[0] is None:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert searches(reader) == {}  # embedded before anybody searched
            embedded = model.texts_embedded
            handle = gateway.open_spawn("what time is it", "default")
            assert handle.plan.mode == "search"
            hits = agent_search(gateway._view("default").engine, "what time is it in Tokyo")
            assert names(hits)[0] in {"time__get_current_time", "time__convert_time"}
            assert searches(reader) == {("hit", "hybrid", None): 1}
            assert model.texts_embedded == embedded + 1  # the query only
        gateway.close()


@pytest.mark.anyio
async def test_a_full_mode_gateway_embeds_nothing(
    loaded: EmbeddingRuntime, model: SemanticScorer, tmp_path: Path
) -> None:
    settings = Settings(
        mcp={
            "servers": {"time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")},
            "cache_dir": tmp_path / "cache",
        }
    )  # 2 tools: full
    before = model.texts_embedded
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager, embeddings=loaded)
        assert gateway.warm_search() == 0
        async with gateway.running("127.0.0.1", 0):
            pass
        gateway.close()
    assert model.texts_embedded == before and not loaded.vectors().warming


def test_two_flushes_at_once_write_the_new_vectors_once(tmp_path: Path) -> None:
    from orchestrator._store import FileStore
    from orchestrator.search._embedding.model import DIMENSION
    from orchestrator.search._embedding.store import VectorStore

    class SlowFileStore(FileStore):
        """A real file store whose first write waits (up to 1 s) for a second one to start."""

        def __init__(self, root: Path) -> None:
            super().__init__(root)
            self.writes = 0
            self.second = threading.Event()

        def put_blobs(self, namespace: str, blobs: Any, *, limit: int) -> None:
            self.writes += 1
            if self.writes == 1:
                self.second.wait(1)
            else:
                self.second.set()
            super().put_blobs(namespace, blobs, limit=limit)

    files = SlowFileStore(tmp_path)
    vectors = VectorStore(files, "model", str(tmp_path))
    row = np.zeros(DIMENSION, np.float32)
    row[0] = 1.0
    with vectors.lock:
        vectors.add({vectors.key("a tool text"): row})
    flushes = [threading.Thread(target=vectors.flush) for _ in range(2)]
    for flush in flushes:
        flush.start()
    for flush in flushes:
        flush.join(10)
    assert files.writes == 1
    assert not vectors.dirty
    assert len([path for path in (tmp_path / CACHE_NAME).iterdir() if not path.name.startswith(".")]) == 1
