"""plan_tools: the full-or-search decision at the threshold, pins, directory levels, stable prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TokenizerError, ToolCatalog, ToolSearchSettings
from orchestrator._directory import DIRECTORY_HEADER
from orchestrator._meta_tools import META_TOOL_DEFINITIONS
from orchestrator._planning import plan_tools
from orchestrator._tokens import count_definition_tokens, count_tokens

from .test_tool_search import TOOLS

ENCODING = "cl100k_base"


@pytest.fixture(scope="module")
def catalog() -> ToolCatalog:
    return ToolCatalog.from_lists(TOOLS)


@pytest.fixture(scope="module")
def full_tokens(catalog: ToolCatalog) -> int:
    return sum(count_definition_tokens(entry.definition(), ENCODING) for entry in catalog)


def settings(**values: object) -> ToolSearchSettings:
    return ToolSearchSettings(**values)  # type: ignore[arg-type]


def test_full_tokens_is_the_sum_of_every_definition(catalog: ToolCatalog, full_tokens: int) -> None:
    assert plan_tools(catalog, settings()).full_tokens == full_tokens


def test_a_catalog_exactly_at_the_threshold_is_sent_in_full(catalog: ToolCatalog, full_tokens: int) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=full_tokens))
    assert (plan.mode, plan.directory_level, plan.prompt) == ("full", "none", "")
    assert plan.prompt_tokens == full_tokens
    assert [tool["name"] for tool in plan.tools] == [entry.name for entry in catalog]
    assert f"<= threshold_tokens {full_tokens:,}" in plan.reason


def test_a_catalog_below_the_threshold_is_sent_in_full(catalog: ToolCatalog, full_tokens: int) -> None:
    assert plan_tools(catalog, settings(threshold_tokens=full_tokens + 1)).mode == "full"


def test_one_token_over_the_threshold_switches_to_search_mode(catalog: ToolCatalog, full_tokens: int) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=full_tokens - 1))
    assert plan.mode == "search"
    assert plan.prompt.startswith(DIRECTORY_HEADER)
    assert [tool["name"] for tool in plan.tools] == ["tool_search", "expand_tools", "call_tool"]
    assert f"> threshold_tokens {full_tokens - 1:,}: search mode" in plan.reason


def test_disabled_tool_search_always_sends_the_full_catalog(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(enabled=False, threshold_tokens=0))
    assert plan.mode == "full"
    assert "enabled: false" in plan.reason


def test_prompt_tokens_count_the_prompt_and_every_definition_sent(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, pinned=["time__*"]))
    expected = count_tokens(plan.prompt, ENCODING) + sum(count_definition_tokens(tool, ENCODING) for tool in plan.tools)
    assert plan.prompt_tokens == expected


def test_pinned_globs_ship_full_schemas_in_search_mode(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, pinned=["time__*", "db__run_query", "nothing__*"]))
    assert plan.pinned == ["db__run_query", "time__convert_time", "time__get_current_time"]
    assert plan.tools[:3] == [dict(definition) for definition in META_TOOL_DEFINITIONS]
    assert plan.tools[3:] == [catalog.get(name).definition() for name in plan.pinned]  # type: ignore[union-attr]
    assert "3 pinned tools sent with full schemas" in plan.reason


def test_pinned_tools_are_reported_in_full_mode_too(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(pinned=["files__read_file"]))
    assert plan.mode == "full"
    assert plan.pinned == ["files__read_file"]
    assert catalog.get("files__read_file").definition() in plan.tools  # type: ignore[union-attr]


def test_a_roomy_budget_lists_every_tool_with_its_summary(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, directory_budget_tokens=10_000))
    assert plan.directory_level == "lines"
    for entry in catalog:
        assert f"\n{entry.name} - {entry.summary}" in plan.prompt


def test_a_tighter_budget_degrades_to_names_grouped_by_server(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, directory_budget_tokens=100))
    assert plan.directory_level == "names"
    assert "\nfiles (3 tools): files__list_directory, files__read_file, files__write_file" in plan.prompt
    assert "\ndb (1 tool): db__run_query" in plan.prompt
    assert "directory level names (lines" in plan.reason


def test_a_small_budget_degrades_to_one_line_per_server_with_topic_words(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, directory_budget_tokens=60))
    assert plan.directory_level == "servers"
    lines = plan.prompt.split("\n\n")[-1].splitlines()[1:]
    assert [line.split(" (")[0] for line in lines] == catalog.servers()
    assert "github (4 tools): " in plan.prompt
    assert "issue" in next(line for line in lines if line.startswith("github"))


def test_no_server_is_left_out_even_over_budget(catalog: ToolCatalog) -> None:
    plan = plan_tools(catalog, settings(threshold_tokens=0, directory_budget_tokens=0))
    assert plan.directory_level == "servers"
    for server in catalog.servers():
        assert f"\n{server} (" in plan.prompt
    assert "over budget, every server kept" in plan.reason


def test_the_same_catalog_and_settings_give_a_byte_identical_plan(catalog: ToolCatalog) -> None:
    chosen = settings(threshold_tokens=0, pinned=["db__*"])
    first = plan_tools(catalog, chosen)
    first.tools.append({"name": "edited by a caller"})
    again = plan_tools(ToolCatalog.from_lists(dict(reversed(list(TOOLS.items())))), chosen)
    assert again.prompt == first.prompt
    assert again.tools == first.tools[:-1]


def test_the_header_is_the_same_text_for_every_catalog(catalog: ToolCatalog) -> None:
    other = ToolCatalog.from_lists({"x": [{"name": "one", "description": "Does one thing"}]})
    for plan in (plan_tools(catalog, settings(threshold_tokens=0)), plan_tools(other, settings(threshold_tokens=0))):
        assert plan.prompt.startswith(DIRECTORY_HEADER + "\n\n### Directory")


def test_an_unloadable_tokenizer_is_an_error(catalog: ToolCatalog) -> None:
    with pytest.raises(TokenizerError, match=r"mcp\.tool_search\.tokenizer"):
        plan_tools(catalog, settings(tokenizer="no-such-encoding"))


def test_search_mode_sends_under_two_percent_of_the_real_catalog(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    plan = plan_tools(catalog, settings())
    assert plan.mode == "search"
    assert plan.prompt_tokens <= 0.02 * plan.full_tokens
