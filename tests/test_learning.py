"""Learned evidence in the engine: earlier requests that led to a tool rank it for similar requests, with the
guard rails (no traces: the same scores; one spawn, however many traces, changes nothing; only successful
calls; min_spawns; decay; forgetting a tool that left the catalog), lexical and hybrid.

The hybrid tests run the real model (loaded once for the file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import (
    EmbeddingRuntime,
    SemanticScorer,
    ToolCatalog,
    ToolSearchEngine,
    ToolSearchSettings,
    Trace,
    TraceEvidence,
    TraceSettings,
)
from orchestrator.search._evidence import trace_vectors

NOW = 1_800_000_000.0
DAY = 86_400.0

TOOLS = {
    "weather": [
        {
            "name": "forecast",
            "description": "Weather forecast for a city: temperature, rain and wind.",
            "inputSchema": {},
        },
        {"name": "alerts", "description": "Severe weather alerts issued for a region.", "inputSchema": {}},
    ],
    "ledger": [
        {"name": "post_entry", "description": "Post a journal entry to the general ledger.", "inputSchema": {}},
        {"name": "trial_balance", "description": "Trial balance of every account at a date.", "inputSchema": {}},
    ],
    "files": [
        {"name": "read_file", "description": "Read a text file from disk.", "inputSchema": {}},
        {"name": "list_dir", "description": "List the entries of a directory.", "inputSchema": {}},
    ],
}
REQUEST = "should I bring an umbrella tomorrow in Lisbon"
"""Shares no word with any tool: lexical ranking misses it until earlier requests teach it."""


@pytest.fixture
def catalog() -> ToolCatalog:
    return ToolCatalog.from_lists(TOOLS)


def evidence(traces: list[Trace], vectors: Any = None, **settings: Any) -> TraceEvidence:
    return TraceEvidence(lambda: traces, TraceSettings(**settings), vectors=vectors, clock=lambda: NOW)


def umbrella(spawn: str, *, at: float = NOW, ok: bool = True, tool: str = "forecast") -> Trace:
    return Trace(f"do I need an umbrella tomorrow in {spawn}", "weather", tool, spawn, at, ok)


def scores(engine: ToolSearchEngine, query: str) -> tuple[np.ndarray, np.ndarray]:
    state = engine._current()
    found, candidates, _ranking, _fallback = engine._scores(state, query)
    return found, candidates


QUERIES = [REQUEST, "weather forecast", "post a ledger entry", "read the file", "zzqx", "list directory entries"]


def test_without_traces_every_score_is_exactly_as_without_learning(catalog: ToolCatalog) -> None:
    plain = ToolSearchEngine(catalog, ranking="lexical")
    learning = ToolSearchEngine(catalog, ranking="lexical", evidence=evidence([]))
    for query in QUERIES:
        (a, ca), (b, cb) = scores(plain, query), scores(learning, query)
        assert np.array_equal(a, b) and np.array_equal(ca, cb), query


def test_requests_of_two_spawns_teach_the_ranking(catalog: ToolCatalog) -> None:
    assert ToolSearchEngine(catalog, ranking="lexical").search(REQUEST) == []
    engine = ToolSearchEngine(catalog, ranking="lexical", evidence=evidence([umbrella("Porto"), umbrella("Faro")]))
    assert [hit.name for hit in engine.search(REQUEST)][:1] == ["weather__forecast"]
    # A request unlike the earlier ones is ranked by the tools' own text, as before.
    plain = ToolSearchEngine(catalog, ranking="lexical")
    assert [h.name for h in engine.search("trial balance of accounts")] == [
        h.name for h in plain.search("trial balance of accounts")
    ]


def test_one_spawn_cannot_steer_others_however_many_traces_it_makes(catalog: ToolCatalog) -> None:
    flood = [
        Trace(f"{query} umbrella {i}", "ledger", "post_entry", "the-one-spawn", NOW - i)
        for i in range(1000)
        for query in (REQUEST,)
    ]
    plain = ToolSearchEngine(catalog, ranking="lexical")
    steered = ToolSearchEngine(catalog, ranking="lexical", evidence=evidence(flood))
    for query in QUERIES:
        (a, ca), (b, cb) = scores(plain, query), scores(steered, query)
        assert np.array_equal(a, b) and np.array_equal(ca, cb), query


def test_a_spawn_counts_once_per_tool_and_min_spawns_is_a_setting(catalog: ToolCatalog) -> None:
    twice = [umbrella("Porto"), umbrella("Porto", at=NOW - 5)]
    assert ToolSearchEngine(catalog, ranking="lexical", evidence=evidence(twice)).search(REQUEST) == []
    one = ToolSearchEngine(catalog, ranking="lexical", evidence=evidence([umbrella("Porto")], min_spawns=1))
    assert [hit.name for hit in one.search(REQUEST)][:1] == ["weather__forecast"]


def test_only_successful_calls_count(catalog: ToolCatalog) -> None:
    failed = [umbrella("Porto", ok=False), umbrella("Faro", ok=False)]
    assert ToolSearchEngine(catalog, ranking="lexical", evidence=evidence(failed)).search(REQUEST) == []


def test_evidence_decays_with_its_half_life(catalog: ToolCatalog) -> None:
    def boost(age_days: float) -> float:
        traces = [umbrella("Porto", at=NOW - age_days * DAY), umbrella("Faro", at=NOW - age_days * DAY)]
        engine = ToolSearchEngine(catalog, ranking="lexical", evidence=evidence(traces, half_life_days=10))
        hits = engine.search(REQUEST)
        return hits[0].score if hits else 0.0

    fresh, one_half_life, three = boost(0), boost(10), boost(30)
    assert fresh > 0 and one_half_life == pytest.approx(fresh / 2) and three == pytest.approx(fresh / 8)


def test_a_tool_that_left_the_catalog_has_no_evidence(catalog: ToolCatalog) -> None:
    traces = [umbrella("Porto"), umbrella("Faro")]
    without = ToolCatalog.from_lists({server: tools for server, tools in TOOLS.items() if server != "weather"})
    engine = ToolSearchEngine(without, ranking="lexical", evidence=evidence(traces))
    assert engine.search(REQUEST) == []


def test_traces_follow_a_tool_by_its_server_and_own_name(catalog: ToolCatalog) -> None:
    renamed = ToolCatalog.from_lists({"weather": TOOLS["weather"], "ledger": TOOLS["ledger"]})
    engine = ToolSearchEngine(renamed, ranking="lexical", evidence=evidence([umbrella("Porto"), umbrella("Faro")]))
    assert [hit.name for hit in engine.search(REQUEST)][:1] == ["weather__forecast"]


def test_a_failing_source_ranks_by_the_tools_own_text(catalog: ToolCatalog) -> None:
    def broken() -> list[Trace]:
        raise OSError("store unreachable")

    engine = ToolSearchEngine(catalog, ranking="lexical", evidence=TraceEvidence(broken))
    plain = ToolSearchEngine(catalog, ranking="lexical")
    assert engine.search("weather forecast") == plain.search("weather forecast")


# --------------------------------------------------------------------------- hybrid


@pytest.fixture(scope="module")
def model() -> SemanticScorer:
    return SemanticScorer.load()


@pytest.fixture
def runtime(tmp_path: Path, model: SemanticScorer) -> Iterator[EmbeddingRuntime]:
    with EmbeddingRuntime(tmp_path / "embeddings", model=model) as loaded:
        yield loaded


def hybrid(catalog: ToolCatalog, runtime: EmbeddingRuntime, source: TraceEvidence | None) -> ToolSearchEngine:
    engine = ToolSearchEngine(
        catalog, ToolSearchSettings(embedding_timeout_ms=30_000), embeddings=runtime, evidence=source
    )
    assert engine.warm() and engine.ranking_used == "hybrid"
    if source is not None:
        assert source.warm()
    return engine


def test_hybrid_without_traces_or_with_one_spawns_flood_scores_exactly_as_without_learning(
    catalog: ToolCatalog, runtime: EmbeddingRuntime
) -> None:
    plain = hybrid(catalog, runtime, None)
    vectors = lambda: trace_vectors(runtime)  # noqa: E731
    empty = hybrid(catalog, runtime, evidence([], vectors))
    flood = [Trace(f"{REQUEST} {i}", "ledger", "post_entry", "one", NOW - i) for i in range(1000)]
    flooded = hybrid(catalog, runtime, evidence(flood, vectors))
    for query in QUERIES:
        a, ca = scores(plain, query)
        for other in (empty, flooded):
            b, cb = scores(other, query)
            assert np.array_equal(a, b) and np.array_equal(ca, cb), query


def test_warming_embeds_only_requests_a_build_can_use(runtime: EmbeddingRuntime) -> None:
    """Successful calls of a tool name that min_spawns spawns called, on any server (a build counts an
    entry's servers together); one spawn's flood and failed calls are never embedded."""
    flood = [Trace(f"{REQUEST} {i}", "ledger", "post_entry", "one", NOW - i) for i in range(5)]
    taught = [
        Trace("closing the books for this month", "ledger", "trial_balance", "a", NOW),
        Trace("we close the books at quarter end", "ledger-replica", "trial_balance", "b", NOW),
    ]
    failed = [Trace("a trial balance that failed", "ledger", "trial_balance", "c", NOW, ok=False)]
    source = evidence(flood + taught + failed, lambda: trace_vectors(runtime))
    assert source.warm()
    requests = trace_vectors(runtime)
    assert requests.cached(requests.keys([trace.query for trace in taught]))[0] is not None
    for trace in [*flood, *failed]:
        assert requests.cached(requests.keys([trace.query]))[0] is None, trace.query


def test_hybrid_learns_a_paraphrase_from_two_spawns(catalog: ToolCatalog, runtime: EmbeddingRuntime) -> None:
    request = "I am closing the books for the quarter"
    taught = [
        Trace("closing the books for this month", "ledger", "trial_balance", "a", NOW),
        Trace("we close the books at quarter end", "ledger", "trial_balance", "b", NOW),
    ]
    plain = hybrid(catalog, runtime, None).search(request)
    learned = hybrid(catalog, runtime, evidence(taught, lambda: trace_vectors(runtime))).search(request)
    assert learned[0].name == "ledger__trial_balance"
    assert [hit.name for hit in plain].index("ledger__trial_balance") > 0 or plain[0].score < learned[0].score


def _moved_catalog() -> tuple[ToolCatalog, ToolCatalog]:
    """A catalog and the same tools after one server left and another came: the incremental index reuses the
    leaving server's slots, so document slots no longer follow catalog positions."""
    archive = [
        {"name": f"restore_{i}", "description": f"Restore archive number {i}.", "inputSchema": {}} for i in range(3)
    ]
    zeta = [{"name": "umbrella_stock", "description": "Umbrellas in stock at a shop.", "inputSchema": {}}]
    # Enough tools that the change is an update, not a rebuild.
    bulk = [{"name": f"noop_{i}", "description": f"Placeholder operation {i}.", "inputSchema": {}} for i in range(20)]
    first = ToolCatalog.from_lists({**TOOLS, "archive": archive, "bulk": bulk})
    lists = {**TOOLS, "bulk": bulk, "zeta": zeta}
    return first, first.updated(lists, {"archive", "zeta"})


TAUGHT = [
    umbrella("Porto"),
    umbrella("Faro"),
    Trace("close the books at month end", "ledger", "trial_balance", "a", NOW),
]
TAUGHT.append(Trace("closing the books this month", "ledger", "trial_balance", "b", NOW))


def _same_ranking(updated: ToolSearchEngine, fresh: ToolSearchEngine) -> None:
    for query in [*QUERIES, "closing the books", "umbrella"]:
        a, b = updated.search(query), fresh.search(query)
        assert [hit.name for hit in a] == [hit.name for hit in b], query
        assert [hit.score for hit in a] == pytest.approx([hit.score for hit in b], abs=1e-9), query


def test_evidence_follows_tools_to_their_slots_after_an_incremental_update() -> None:
    first, moved = _moved_catalog()
    current = [first]
    updated = ToolSearchEngine(lambda: current[0], ranking="lexical", evidence=evidence(TAUGHT))
    assert [hit.name for hit in updated.search(REQUEST)][:1] == ["weather__forecast"]
    current[0] = moved
    fresh = ToolSearchEngine(moved, ranking="lexical", evidence=evidence(TAUGHT))
    assert updated._current().index.slots().tolist() != list(range(len(moved)))  # slots moved
    _same_ranking(updated, fresh)


def test_hybrid_evidence_follows_tools_to_their_slots_after_an_incremental_update(runtime: EmbeddingRuntime) -> None:
    first, moved = _moved_catalog()
    current = [first]
    settings = ToolSearchSettings(embedding_timeout_ms=30_000)
    source = evidence(TAUGHT, lambda: trace_vectors(runtime))
    updated = ToolSearchEngine(lambda: current[0], settings, embeddings=runtime, evidence=source)
    assert updated.warm() and source.warm()
    updated.search(REQUEST)
    current[0] = moved
    assert updated.warm() and updated.ranking_used == "hybrid"
    assert updated._current().index.slots().tolist() != list(range(len(moved)))  # slots moved
    fresh = hybrid(moved, runtime, evidence(TAUGHT, lambda: trace_vectors(runtime)))
    _same_ranking(updated, fresh)
    assert updated.rank("closing the books").ranking == "hybrid"


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("evidenced", [3, 40])
def test_moved_cosines_are_the_same_whether_the_whole_matrix_is_kept_or_only_the_moved_rows(evidenced: int) -> None:
    """Most tools with evidence: one copy of the whole matrix, moved rows in place, read once per search
    (the tools' own cosines never computed); few: the own cosines with the moved rows' written over."""
    from orchestrator import BlendParts
    from orchestrator.search._evidence import LearnedEvidence, _Vectors

    rng = np.random.default_rng(3)
    size, width = 60, 16
    matrix = _unit(rng.standard_normal((size, width)))
    docs = np.arange(0, 2 * evidenced, 2)[:evidenced].astype(np.intp) % size
    docs = np.unique(docs)
    owners = [[(int(doc), 1.0)] for doc in docs]
    vectors = _Vectors(
        _unit(rng.standard_normal((len(docs), width))),
        owners,
        docs,
        rng.standard_normal((len(docs), width)).astype(np.float32),
    )
    query = _unit(rng.standard_normal((2, width)))
    asked: list[int] = []

    def parts(kept: np.ndarray | None) -> BlendParts:
        def cosines() -> np.ndarray:
            asked.append(1)
            return (matrix @ query.T).max(axis=1)

        return BlendParts(query, size, lambda at: matrix[at], cosines, kept)

    def learned() -> LearnedEvidence:
        return LearnedEvidence(size, {}, owners, [[] for _ in owners], vectors)

    whole, rows_only = learned(), learned()
    kept = whole.enriched_cosines(parts(matrix))
    whole_reads = len(asked)
    separate = rows_only.enriched_cosines(parts(None))
    np.testing.assert_allclose(kept, separate, atol=1e-6)
    own = (matrix @ query.T).max(axis=1)
    others = np.setdiff1d(np.arange(size), docs)
    np.testing.assert_array_equal(separate[others], own[others])
    assert not np.allclose(separate[docs], own[docs])  # the evidence moved them
    assert whole_reads == (0 if 2 * len(docs) >= size else 1)
    np.testing.assert_array_equal(whole.enriched_cosines(parts(matrix)), kept)  # kept from the first search
