"""The directory counted line by line and kept per server gives exactly the directory of the whole catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import ToolCatalog
from orchestrator._directory import Listings, _levels, build_directory
from orchestrator._tokens import count_tokens
from orchestrator.protocols.mcp._catalog import read_snapshot

ENCODING = "cl100k_base"
BUDGETS = (0, 60, 400, 3_000, 40_000, 10**7)
"""From nothing fits (every server line shipped over budget) to every tool's line fitting."""


def _each_level_counts_as_its_whole_text(catalog: ToolCatalog) -> None:
    for level, tokens, text in _levels(catalog, Listings(ENCODING)):
        assert tokens == count_tokens(text(), ENCODING), level


def test_each_listing_costs_the_tokens_of_its_whole_text_on_the_real_catalogs(shared_data: Path) -> None:
    _each_level_counts_as_its_whole_text(ToolCatalog.from_snapshot(shared_data / "catalogs"))
    stabletoolbench = ToolCatalog.from_snapshot(shared_data / "retrieval" / "stabletoolbench" / "tools.json")
    _each_level_counts_as_its_whole_text(stabletoolbench)
    lists = read_snapshot(shared_data / "catalogs")
    replicas = {"github-legacy": "github"} if "github-legacy" in lists else {"filesystem": "desktop-commander"}
    _each_level_counts_as_its_whole_text(ToolCatalog.from_lists(lists, replicas))


def _tool(name: str, words: list[str]) -> dict[str, Any]:
    return {"name": name, "description": " ".join(words), "inputSchema": {"type": "object"}}


WORDS = ["list", "issues", "repository", "weather", "forecast", "city", "read", "files", "commit", "branch"]
tool_lists = st.lists(
    st.builds(
        _tool,
        st.sampled_from(["list_issues", "get_weather", "read_file", "commit", "branch_list"]),
        st.lists(st.sampled_from(WORDS), max_size=6),
    ),
    max_size=4,
    unique_by=lambda tool: tool["name"],
)
SERVERS = ["github", "gitlab", "weather", "files", "alpha-beta"]


@settings(max_examples=60, deadline=None)
@given(
    start=st.dictionaries(st.sampled_from(SERVERS), tool_lists, max_size=5),
    changes=st.lists(st.tuples(st.sampled_from(SERVERS), st.one_of(st.none(), tool_lists)), min_size=1, max_size=5),
    grouped=st.booleans(),
)
def test_a_directory_kept_per_server_equals_one_made_from_the_whole_catalog(
    start: dict[str, list[dict[str, Any]]], changes: list[tuple[str, list[dict[str, Any]] | None]], grouped: bool
) -> None:
    replicas = {"github": "git", "gitlab": "git"} if grouped else None
    lists = dict(start)
    catalog = ToolCatalog.from_lists(lists, replicas)
    listings = Listings(ENCODING)
    for budget in BUDGETS:
        assert build_directory(catalog, budget, ENCODING, listings) == build_directory(catalog, budget, ENCODING)
    for server, tools in changes:
        if tools is None:
            lists.pop(server, None)
        else:
            lists[server] = tools
        catalog = catalog.updated(lists, [server], replicas)
        for budget in BUDGETS:
            assert build_directory(catalog, budget, ENCODING, listings) == build_directory(catalog, budget, ENCODING)
        _each_level_counts_as_its_whole_text(catalog)


def test_listings_for_another_encoding_are_not_used() -> None:
    catalog = ToolCatalog.from_lists({"files": [_tool("read_file", ["read", "files"])]})
    other = Listings("another")
    assert build_directory(catalog, 10**6, ENCODING, other) == build_directory(catalog, 10**6, ENCODING)
    with pytest.raises(KeyError):
        other._lines["files__read_file - read files"]
