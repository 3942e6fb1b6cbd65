"""ToolSearchEngine: BM25 ranking, exact names, misses, errors, expand_tools, re-indexing, telemetry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    ExpandError,
    MetaTools,
    SearchHit,
    SearchQueryError,
    Telemetry,
    ToolCatalog,
    ToolNotFoundError,
    ToolSearchEngine,
    ToolSearchSettings,
)
from orchestrator._telemetry import SEARCH_INVOCATIONS
from orchestrator.protocols.mcp._catalog import read_snapshot
from orchestrator.search import _lexical as lexical_module
from orchestrator.search._engine import LONG_QUERY_CHARS, MAX_QUERY_CHARS, MAX_STEPS, STEP_WORDS, request_steps
from orchestrator.search._evaluation import evaluate, load_queries
from orchestrator.search._lexical import (
    Analyzer,
    FieldWeights,
    LexicalIndex,
    split_words,
    tool_document,
)
from orchestrator.search._tuning import BLEND_BM25_K1, BM25_K1


def tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
    }
    return {"name": name, "description": description, "inputSchema": schema}


TOOLS = {
    "github": [
        tool(
            "create_issue", "Create a new issue in a GitHub repository", owner="Repository owner", title="Issue title"
        ),
        tool("list_issues", "List issues in a GitHub repository", owner="Repository owner", state="open or closed"),
        tool("create_pull_request", "Open a pull request", head="Branch with the changes", base="Target branch"),
        tool("getUserProfile", "Show a person's public account page"),
    ],
    "files": [
        tool("read_file", "Read the complete contents of a file from the file system", path="Path of the file"),
        tool("write_file", "Create or overwrite a file", path="Path of the file", content="Text to write"),
        tool("list_directory", "List the entries of a directory", path="Directory path"),
    ],
    "time": [
        tool("get_current_time", "Get current time in a specific timezone", timezone="IANA timezone name"),
        tool("convert_time", "Convert time between timezones", source_timezone="Source IANA timezone"),
    ],
    "db": [tool("run_query", "Run a read-only statement", sql="The SQL query to run against Postgres")],
    "weather": [
        tool("forecast", "Forecast for a city"),
        tool(
            "city_guide",
            "A long guide to a city: sights, food, transport, history, museums, parks, neighbourhoods, "
            "nightlife, shopping, and the weather in every season.",
        ),
    ],
}


@pytest.fixture
def catalog() -> ToolCatalog:
    return ToolCatalog.from_lists(TOOLS)


@pytest.fixture
def engine(catalog: ToolCatalog) -> ToolSearchEngine:
    return ToolSearchEngine(catalog, ToolSearchSettings(search_limit=5, max_expand=3), ranking="lexical")


def names(hits: list[SearchHit]) -> list[str]:
    return [hit.name for hit in hits]


# --------------------------------------------------------------------------- ranking


def test_a_request_in_plain_words_finds_the_tool(engine: ToolSearchEngine) -> None:
    hits = engine.search("please read the contents of a file")
    assert hits[0].name == "files__read_file"
    assert (hits[0].server, hits[0].tool) == ("files", "read_file")
    assert hits[0].summary == "Read the complete contents of a file from the file system"
    assert hits == sorted(hits, key=lambda hit: -hit.score)


def test_names_split_on_case_digits_underscores_dashes_and_dots() -> None:
    assert split_words("getHTTPResponse_v2.json") == ["get", "http", "response", "v", "2", "json"]
    assert split_words("list-pull-requests.v1 Café") == ["list", "pull", "requests", "v", "1", "café"]
    # Each word gives its stem, then its exact form (marked "="): request words and stopwords give nothing.
    assert Analyzer().terms("Please can you get me the running issues") == ["run", "=running", "issu", "=issues"]
    assert Analyzer(word_forms=False).terms("the running issues") == ["run", "issu"]


def test_camel_case_names_are_split_into_words(engine: ToolSearchEngine) -> None:
    assert names(engine.search("user profile"))[0] == "github__getUserProfile"


def test_stemming_matches_other_forms_of_a_word(engine: ToolSearchEngine) -> None:
    assert names(engine.search("converting times"))[0] == "time__convert_time"


def test_parameter_descriptions_are_searched(engine: ToolSearchEngine) -> None:
    assert names(engine.search("postgres sql"))[0] == "db__run_query"


def test_a_word_in_the_name_outweighs_the_same_word_in_long_prose(engine: ToolSearchEngine) -> None:
    assert names(engine.search("weather forecast"))[0] == "weather__forecast"
    assert names(engine.search("forecast"))[0] == "weather__forecast"


def test_k_limits_hits_and_defaults_to_search_limit(engine: ToolSearchEngine) -> None:
    assert len(engine.search("file directory path", k=2)) == 2
    assert len(engine.search("issue repository pull request branch file time")) == 5


def test_ties_are_broken_by_qualified_name() -> None:
    same = tool("lookup", "Look up a record")
    catalog = ToolCatalog.from_lists({"b": [same], "a": [dict(same, description="Look up a record.")]})
    engine = ToolSearchEngine(catalog, ranking="lexical")
    hits = engine.search("record")
    assert hits[0].score == hits[1].score
    assert names(hits) == ["a__lookup", "b__lookup"]


def test_the_same_tool_on_several_servers_is_one_hit_listing_the_others(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    query = "list the files in a directory and move a file"
    plain = ToolSearchEngine(catalog, ToolSearchSettings(group_equivalents=False), ranking="lexical").search(query, 5)
    pair = {"desktop-commander__move_file", "filesystem__move_file"}
    assert pair <= set(names(plain))
    hits = ToolSearchEngine(catalog, ToolSearchSettings(group_equivalents=True), ranking="lexical").search(query, 5)
    tools = [hit.tool for hit in hits]
    assert len(tools) == len(set(tools)) == 5  # one hit per capability, five capabilities
    moving = next(hit for hit in hits if hit.tool == "move_file")
    assert {moving.name, *moving.alternatives} == pair
    assert moving.to_dict()["alternatives"] == list(moving.alternatives)
    assert set(names(plain)) - pair < set(names(hits))  # the freed place holds another capability
    assert "alternatives" not in next(hit for hit in hits if not hit.alternatives).to_dict()


def test_same_named_tools_that_do_different_things_stay_apart(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    found = ToolSearchEngine(catalog, ToolSearchSettings(group_equivalents=True), ranking="lexical").search(
        "create a branch", 8
    )
    assert "supabase__create_branch" in names(found)
    assert all("supabase__create_branch" not in hit.alternatives for hit in found)


def test_scores_equal_rank_bm25_get_scores_on_every_document(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "retrieval" / "api-bank" / "tools.json")
    index = LexicalIndex(catalog.entries)
    assert index.bm25 is not None
    for query in ["add a meeting to my agenda", "what is the weather tomorrow", "delete my account"]:
        terms = index.query_terms(query)
        scores, candidates = index.scores(terms)
        assert np.array_equal(scores, index.bm25.get_scores(terms))
        assert set(candidates.tolist()) == {i for i, doc in enumerate(index.bm25.doc_freqs) if set(terms) & set(doc)}


def test_candidates_within_k_give_the_same_best_k_ties_included(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scores(terms, within=k)` keeps only the documents that can be among the best k: the top k is the
    same as from every candidate, on real requests and on a catalog where every tool has a twin (ties).
    Narrowing is on for every request here (at these sizes it only pays from NARROW_FROM postings)."""
    monkeypatch.setattr(lexical_module, "NARROW_FROM", 0)
    lists = read_snapshot(shared_data / "retrieval" / "stabletoolbench" / "tools.json")
    real = ToolCatalog.from_lists(lists)
    twins = ToolCatalog.from_lists({f"{server}-{copy}": tools for server, tools in lists.items() for copy in range(2)})
    queries = [query.query for query in load_queries(shared_data / "retrieval" / "stabletoolbench" / "queries.jsonl")]
    narrowed = 0
    for catalog in (real, twins):
        index = LexicalIndex(catalog.entries)
        for query in queries[:60]:
            terms = index.query_terms(query)
            scores, every = index.scores(terms)
            for k in (1, 8, 40):
                _, within = index.scores(terms, within=k)
                assert set(within.tolist()) <= set(every.tolist())
                assert index.top(scores, within, k) == index.top(scores, every, k), (query, k)
                narrowed += within.size < every.size
    assert narrowed > 100  # the narrowing is what is checked, not the fallback to every candidate


def test_an_index_with_another_k1_scores_as_one_built_with_it_and_leaves_the_original_alone(
    shared_data: Path,
) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "retrieval" / "api-bank" / "tools.json")
    index = LexicalIndex(catalog.entries)
    blended = index.with_k1(BLEND_BM25_K1)
    built = LexicalIndex(catalog.entries, k1=BLEND_BM25_K1)
    assert index.bm25 is not None and blended.bm25 is not None
    assert (index.bm25.k1, blended.bm25.k1, blended.bm25.b) == (BM25_K1, BLEND_BM25_K1, index.bm25.b)
    for query in ["add a meeting to my agenda", "what is the weather tomorrow", "delete my account"]:
        terms = index.query_terms(query)
        scores, candidates = blended.scores(terms)
        assert np.array_equal(scores, built.scores(terms)[0])
        assert np.array_equal(scores, blended.bm25.get_scores(terms))
        assert np.array_equal(candidates, index.scores(terms)[1])
        assert not np.array_equal(scores, index.scores(terms)[0])
        assert np.array_equal(index.scores(terms)[0], index.bm25.get_scores(terms))


class _Passing:
    """A blend that ranks by the BM25 it is handed, keeping it."""

    def __init__(self) -> None:
        self.lexical: list[np.ndarray] = []

    def prepare(self, catalog: ToolCatalog) -> None:
        pass

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.lexical.append(lexical)
        return lexical, candidates


def test_hybrid_blends_bm25_with_the_blend_k1_and_lexical_ranking_keeps_its_own(catalog: ToolCatalog) -> None:
    blend = _Passing()
    hybrid = ToolSearchEngine(catalog, ranking="hybrid", blend=blend)
    query = "create a pull request on github"
    hybrid.search(query)
    index = LexicalIndex(catalog.entries, k1=BLEND_BM25_K1)
    assert np.array_equal(blend.lexical[0], index.scores(index.query_terms(query))[0])
    lexical = ToolSearchEngine(catalog, ranking="lexical").search(query)
    assert [hit.score for hit in lexical] != [hit.score for hit in hybrid.search(query)]


def test_the_index_scores_like_a_plain_bm25okapi_given_the_weighted_words_as_repeats(catalog: ToolCatalog) -> None:
    """Weighted frequencies are BM25 over repeated words: with every weight times `scale` an integer, a plain
    BM25Okapi over documents repeating each term frequency x scale times, with k1 x scale, ranks the same;
    its scores are the index's times (k1 x scale + 1) / (k1 + 1). idf, which counts documents, is unchanged."""
    from rank_bm25 import BM25Okapi

    index = LexicalIndex(catalog.entries)
    assert index.bm25 is not None
    analyzer = Analyzer()
    scale = 8
    documents = []
    for entry in catalog.entries:
        frequencies = tool_document(entry, analyzer)
        assert frequencies == index.bm25.doc_freqs[catalog.position(entry.name)]  # the vectorised build, exactly
        assert all((count * scale).is_integer() for count in frequencies.values())
        documents.append([term for term, count in frequencies.items() for _ in range(int(count * scale))])
    k1, b = index.bm25.k1, index.bm25.b
    plain = BM25Okapi(documents, k1=k1 * scale, b=b)
    for query in ["create an issue for the file", "converting times", "weather forecast"]:
        terms = index.query_terms(query)
        expected = plain.get_scores(terms)
        assert np.allclose(index.scores(terms)[0] * (k1 * scale + 1) / (k1 + 1), expected, rtol=1e-12, atol=1e-12)


def test_a_tool_using_the_requests_own_word_ranks_above_one_using_another_form_of_it() -> None:
    # Among the other tools: in a catalog of two, Okapi's idf of a word in one tool is log(1.5 / 1.5) = 0.
    two = [tool("first", "Shows tested builds"), tool("second", "Shows tests builds")]
    catalog = ToolCatalog.from_lists({**TOOLS, "ci": two})
    engine = ToolSearchEngine(catalog, ranking="lexical")
    assert names(engine.search("tests")) == ["ci__second", "ci__first"]  # both match the stem "test"
    assert names(engine.search("tested")) == ["ci__first", "ci__second"]


def test_a_word_counts_by_the_weight_of_the_field_it_is_in_and_its_exact_form_by_the_form_weight() -> None:
    entry = ToolCatalog.from_lists(
        {"shop": [tool("refund_order", "Refund an order", order_id="The order to refund")]}
    ).entries[0]
    frequencies = tool_document(entry, Analyzer(), FieldWeights(name=2.0, parameter_description=0.5), form_weight=0.5)
    # name 2 + description 1 + parameter description 0.5 (the server "shop" is elsewhere)
    assert frequencies["refund"] == 3.5 and frequencies["=refund"] == 1.75
    # name 2 + description 1 + parameter name 1 + parameter description 0.5
    assert frequencies["order"] == 4.5 and frequencies["=order"] == 2.25
    assert frequencies["id"] == 1.0 and frequencies["shop"] == 1.0
    flat = tool_document(entry, Analyzer(), FieldWeights(name=1.0, parameter_description=1.0), form_weight=1.0)
    assert flat["=refund"] == 3.0


def test_lexical_ranking_is_at_least_rank_bm25_on_requests_for_the_real_catalog(shared_data: Path) -> None:
    """The anchors of ../shared/baselines (rank-bm25 BM25Okapi, the Bernstein and Grok Build recipes) on the
    requests written for the 590 real tools: the project's lexical ranking matches the best of them."""
    import importlib.util
    import json

    path = shared_data.parent / "baselines" / "anchor_rankers.py"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    spec = importlib.util.spec_from_file_location("anchor_rankers", path)
    assert spec is not None and spec.loader is not None
    anchors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchors)
    folder = shared_data / "retrieval" / "mcp-catalogs"
    tools = json.loads((folder / "tools.json").read_text())
    items = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]
    best = {"hit@1": 0.0, "hit@5": 0.0}
    for rank in anchors.engines(tools).values():
        found = anchors.metrics([rank(item["query"]) for item in items], items)
        best = {key: max(value, found[key]) for key, value in best.items()}
    catalog = ToolCatalog.from_snapshot(folder / "tools.json")
    engine = ToolSearchEngine(catalog, ranking="lexical")
    report = evaluate(engine.search, catalog, load_queries(folder / "queries.jsonl"))
    assert round(report.hit_at_1, 3) >= best["hit@1"]
    assert round(report.hit_at_k, 3) >= best["hit@5"]
    assert set(report.styles) == {"agent", "natural", "task", "ambiguous", "non-english"}


def test_lexical_ranking_meets_its_target_on_api_bank(shared_data: Path) -> None:
    folder = shared_data / "retrieval" / "api-bank"
    catalog = ToolCatalog.from_snapshot(folder / "tools.json")
    report = evaluate(
        ToolSearchEngine(catalog, ranking="lexical").search, catalog, load_queries(folder / "queries.jsonl")
    )
    assert report.hit_at_k >= 0.78


# --------------------------------------------------------------------------- exact names, misses, errors


def test_an_exact_qualified_name_comes_first_without_ranking(engine: ToolSearchEngine) -> None:
    hits = engine.search("time__convert_time")
    assert hits[0].name == "time__convert_time"
    assert hits[0].score > max(hit.score for hit in hits[1:])


def test_an_exact_bare_name_comes_first(engine: ToolSearchEngine) -> None:
    assert names(engine.search("list_directory"))[0] == "files__list_directory"


def test_select_returns_exactly_the_named_tools(engine: ToolSearchEngine) -> None:
    assert names(engine.search("select:files__write_file, read_file")) == ["files__write_file", "files__read_file"]
    assert engine.search("select:nope") == []


def test_a_query_sharing_no_word_with_any_tool_is_a_miss(engine: ToolSearchEngine) -> None:
    assert engine.search("xylophone quantum zebra") == []
    assert engine.search("can you please help me") == []  # request words only


@pytest.mark.parametrize("query", ["", "   ", "x" * (MAX_QUERY_CHARS + 1)])
def test_an_empty_or_overlong_query_is_an_error(engine: ToolSearchEngine, query: str) -> None:
    with pytest.raises(SearchQueryError, match="tool_search query is"):
        engine.search(query)


def test_a_query_of_exactly_the_limit_runs(engine: ToolSearchEngine) -> None:
    assert engine.search(("file " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS])


def test_an_overlong_query_is_refused_in_one_line_naming_the_limit(engine: ToolSearchEngine) -> None:
    with pytest.raises(SearchQueryError) as caught:
        engine.search("read the file " * 1000)
    message = str(caught.value)
    assert "\n" not in message and "14,000 characters" in message and "8,000" in message


FILLER = (
    "Our team has been working on the checkout flow for several quarters and the architecture grew "
    "organically, with services owned by different squads and shared context living in chat threads. "
)
STEPS = {
    "Look up the Sentry issue details for the crash that started at 09:14.": "sentry__",
    "Refund the customer's last Stripe payment intent for order 5531.": "stripe__create_refund",
    "Post a summary of the incident as a new page in Notion under the postmortems database.": "notion__",
    "Check the git log of the payments service for commits from yesterday.": "git__git_log",
    "Convert 14:00 Berlin time to the timezone of the San Francisco office.": "time__convert_time",
}


def pasted_task() -> str:
    """A task an agent pastes whole: five steps, each needing another server's tool, among context."""
    text = "\n".join(FILLER * 2 + f"Step {i}: {step}" for i, step in enumerate(STEPS, 1))
    return (text + " " + FILLER * 10)[:4000]


def test_a_long_pasted_task_finds_the_tool_for_each_step(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    engine = ToolSearchEngine(catalog, ranking="lexical")
    text = pasted_task()
    assert len(text) == 4000 > LONG_QUERY_CHARS
    found = names(engine.search(text))  # search_limit: 8
    missing = [tool for tool in STEPS.values() if not any(name.startswith(tool) for name in found)]
    assert missing == [], found


def test_long_requests_are_split_into_bounded_steps() -> None:
    steps = request_steps("Thanks. Create an issue; then list the commits!\nYes.\n" + "word " * 100)
    assert steps[:2] == ["Create an issue;", "then list the commits!"]  # one-word fragments dropped
    assert [len(step.split()) for step in steps[2:]] == [STEP_WORDS] * 4 + [100 - 4 * STEP_WORDS]
    many = request_steps("read the file. " * 2000)  # 2,000 sentences
    assert len(many) <= MAX_STEPS and sum(len(step.split()) for step in many) == 6000


# --------------------------------------------------------------------------- expand


def test_expand_returns_full_definitions_in_the_order_asked(engine: ToolSearchEngine) -> None:
    definitions = engine.expand_tools(["time__convert_time", "files__read_file"])
    assert [d["name"] for d in definitions] == ["time__convert_time", "files__read_file"]
    assert definitions[1] == {
        "name": "files__read_file",
        "description": "Read the complete contents of a file from the file system",
        "input_schema": TOOLS["files"][0]["inputSchema"],
    }


def test_expand_ignores_repeats_including_the_bare_name_of_the_same_tool(engine: ToolSearchEngine) -> None:
    definitions = engine.expand_tools(["files__read_file", "read_file", "files__read_file"])
    assert [d["name"] for d in definitions] == ["files__read_file"]


def test_expanding_an_unknown_name_lists_the_closest_names(engine: ToolSearchEngine) -> None:
    with pytest.raises(ToolNotFoundError, match=r"unknown tool 'files__read_fle'; closest: files__read_file") as raised:
        engine.expand_tools(["files__read_fle"])
    assert raised.value.suggestions[0] == "files__read_file"
    with pytest.raises(ToolNotFoundError) as by_topic:
        engine.expand_tools(["timezone_converter"])
    assert "time__convert_time" in by_topic.value.suggestions


def test_expanding_more_than_max_expand_is_refused(engine: ToolSearchEngine) -> None:
    four = ["files__read_file", "files__write_file", "time__convert_time", "db__run_query"]
    with pytest.raises(ExpandError, match=r"asked for 4 tools; the limit is 3 per call \(mcp.tool_search.max_expand\)"):
        engine.expand_tools(four)
    assert len(engine.expand_tools(four[:3] + four[:3])) == 3  # repeats do not count
    with pytest.raises(ExpandError, match="at least one tool name"):
        engine.expand_tools([])


# --------------------------------------------------------------------------- re-indexing


def test_the_index_rebuilds_when_the_catalog_version_changes_and_only_then() -> None:
    current = {"catalog": ToolCatalog.from_lists(TOOLS)}
    engine = ToolSearchEngine(lambda: current["catalog"], ranking="lexical")
    assert engine.search("forecast")
    engine.search("issue")
    engine.expand_tools(["read_file"])
    assert engine.index_builds == 1
    current["catalog"] = ToolCatalog.from_lists({**TOOLS})  # a new object with the same content
    engine.search("forecast")
    assert engine.index_builds == 1
    assert engine.search("kubernetes pods") == []
    current["catalog"] = ToolCatalog.from_lists({**TOOLS, "k8s": [tool("list_pods", "List Kubernetes pods")]})
    assert names(engine.search("kubernetes pods")) == ["k8s__list_pods"]
    assert engine.index_builds == 2
    assert engine.catalog is current["catalog"]


# --------------------------------------------------------------------------- ranking modes, telemetry


def test_the_ranking_asked_for_and_the_one_in_effect_are_both_known(catalog: ToolCatalog) -> None:
    engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="hybrid"))
    assert engine.ranking == "hybrid"
    assert engine.ranking_used == "hybrid"  # the models are installed; nothing has failed to load yet
    assert ToolSearchEngine(catalog, ranking="lexical").ranking_used == "lexical"
    with pytest.raises(ValueError, match="ranking must be"):
        ToolSearchEngine(catalog, ranking="magic")


class _PreferLast:
    """A ScoreBlend that ranks the last catalog entry first: shows the seam receives and decides."""

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, catalog: ToolCatalog) -> None:
        self.prepared.append(catalog.version)

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = lexical.copy()
        scores[-1] = scores.max() + 1.0
        return scores, np.union1d(candidates, [len(lexical) - 1])


def test_a_score_blend_wraps_the_lexical_scores(catalog: ToolCatalog) -> None:
    blend = _PreferLast()
    engine = ToolSearchEngine(catalog, ranking="hybrid", blend=blend)
    assert engine.ranking_used == "hybrid"
    assert names(engine.search("read a file"))[0] == catalog.entries[-1].name
    assert blend.prepared == [catalog.version]
    assert names(engine.search("select:read_file")) == ["files__read_file"]  # exact lookups bypass the blend


class _Flat:
    """A ScoreBlend that scores every candidate alike: whatever orders them is the engine's own rule."""

    def prepare(self, catalog: ToolCatalog) -> None:
        pass

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = np.zeros_like(lexical)
        scores[candidates] = 0.5
        return scores, candidates


def test_hybrid_puts_the_tools_of_a_server_the_request_names_first() -> None:
    issue = {"name": "create_issue", "description": "Create an issue", "inputSchema": {"type": "object"}}
    catalog = ToolCatalog.from_lists({"github": [issue], "jira": [issue], "brave-search": [issue]})
    engine = ToolSearchEngine(catalog, ranking="hybrid", blend=_Flat())
    assert names(engine.search("create an issue")) == [
        "brave-search__create_issue",
        "github__create_issue",
        "jira__create_issue",
    ]
    assert names(engine.search("create an issue in Jira"))[0] == "jira__create_issue"
    assert names(engine.search("create an issue, search brave"))[0] == "brave-search__create_issue"
    # one word of a two-word server name is not naming it; lexical ranking has no such preference
    assert names(engine.search("create an issue and search"))[0] == "brave-search__create_issue"  # doc order
    lexical = ToolSearchEngine(catalog, ranking="lexical")
    assert names(lexical.search("create an issue in Jira"))[0] == "jira__create_issue"  # the word itself matches


def test_named_marks_every_tool_of_each_server_whose_whole_name_the_terms_hold() -> None:
    tool = {"name": "t", "description": "d", "inputSchema": {"type": "object"}}
    catalog = ToolCatalog.from_lists({"brave-search": [tool], "jira": [tool, {**tool, "name": "u"}], "git": [tool]})
    index = LexicalIndex(catalog.entries)

    def named(query: str) -> set[str]:
        mask = index.named(index.query_terms(query))
        return {entry.name for entry, flag in zip(catalog.entries, mask, strict=True) if flag}

    assert named("open a Jira ticket") == {"jira__t", "jira__u"}
    assert named("search with Brave") == {"brave-search__t"}
    assert named("search the web") == set()


def test_each_search_and_expand_is_counted_once(
    catalog: ToolCatalog, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical"), telemetry=telemetry)
    meta = MetaTools(engine)
    meta.tool_search("read a file")
    meta.tool_search("read a file")
    meta.tool_search("xylophone")
    meta.expand_tools(["read_file", "write_file"])
    assert meta.tool_search("").is_error  # refused, not a search
    with pytest.raises(SearchQueryError):
        engine.search("")
    counts: dict[str, float] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == SEARCH_INVOCATIONS:
                    for point in metric.data.data_points:
                        outcome = str(dict(point.attributes or {})["outcome"])
                        counts[outcome] = counts.get(outcome, 0) + point.value
    assert counts == {"hit": 2, "miss": 1, "expand": 1}


def test_the_analyzers_text_cache_is_bounded_by_size_not_only_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by red-teaming: the cache was bounded by count alone, and a server re-listing long texts (8,000
    emoji each) grew it to 5.9 GB in 25 re-lists. Past TEXT_CACHE_BYTES it now starts again."""
    from orchestrator.search import _analysis

    monkeypatch.setattr(_analysis, "TEXT_CACHE_BYTES", 100_000)
    analyzer = _analysis.Analyzer()
    for n in range(200):
        text = f"release {n} " + "😀 word " * 1_000
        assert list(analyzer.ids(text)) == list(analyzer.term_ids(text))
        assert analyzer._text_bytes <= 100_000
    assert 0 < len(analyzer._texts) < 200


def test_text_with_combining_accents_is_found_by_a_request_typed_the_usual_way() -> None:
    """Found by red-teaming: a description in decomposed Unicode (NFD: `e` + U+0301) split into `r` and
    `sume`, so "résumé" typed the usual way (NFC) missed it."""
    import unicodedata

    catalog = ToolCatalog.from_lists(
        {"docs": [{"name": "render", "description": unicodedata.normalize("NFD", "Crée un résumé détaillé")}]}
    )
    assert [hit.name for hit in ToolSearchEngine(catalog, ranking="lexical").search("résumé détaillé")] == [
        "docs__render"
    ]


def test_a_long_request_reads_a_bounded_number_of_postings(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by red-teaming: each step of a long request read its words' postings, so 96 different steps of
    the commonest words read them 96 times (57 million entries, 171 ms of a worker at 100,000 tools).
    Steps with the same words are read once, and past LONG_QUERY_READS adjacent steps merge."""
    from orchestrator.search import _engine

    index = LexicalIndex(ToolCatalog.from_snapshot(shared_data / "catalogs").entries)
    common = ["get", "list", "the", "a", "of", "to", "for", "create", "file", "user", "id", "name", "data"]
    steps = [" ".join(common[i % 5 :] + common[: i % 5]) + f" step{i}." for i in range(MAX_STEPS)]
    cost = sum(index.reads(index.query_terms(step)) for step in steps)
    assert [step for step, _ in _engine._within_reads(index, steps)] == steps  # under the budget: each alone
    monkeypatch.setattr(_engine, "LONG_QUERY_READS", cost // 10)
    merged = [step for step, _ in _engine._within_reads(index, steps)]
    assert 1 < len(merged) < len(steps) and " ".join(merged) == " ".join(steps)
    assert sum(index.reads(index.query_terms(step)) for step in merged) <= cost // 10
    scores, candidates, _text = _engine._long_scores(index, "\n".join(steps))
    assert candidates.size and float(scores.max()) > 0
