"""Normalization: provider-safe, unique, stable names; duplicates collapsed; one-line summaries."""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.protocols.mcp import _normalization as normalization
from orchestrator.protocols.mcp._normalization import (
    NAME_PATTERN,
    NormalizedTool,
    normalize,
    one_line,
    qualified_name,
    reverse_map,
)

# Names built from a tiny alphabet collide after sanitising all the time (`a-b`/`a_b`, `a.b`/`a b`,
# `é`/`e`); arbitrary unicode (and long text) covers everything else.
TRICKY = st.text(alphabet="ab_-. éＡ", max_size=6)
ANY_TEXT = st.text(max_size=80)
NAMES = st.one_of(TRICKY, ANY_TEXT, st.sampled_from(["x" * 63, "x" * 64, "x" * 70, "-" + "0" * 12]))
DESCRIPTIONS = st.sampled_from([None, "", "Reads a file.", "Reads a file!"])
SCHEMAS = st.sampled_from([None, {"type": "object"}, {"type": "object", "properties": {"path": {"type": "string"}}}])
TOOL = st.builds(
    lambda name, description, schema: {"name": name, "description": description, "inputSchema": schema},
    NAMES,
    DESCRIPTIONS,
    SCHEMAS,
)
CATALOG = st.dictionaries(NAMES, st.lists(TOOL, max_size=6), max_size=6)
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def offered(catalog: dict[str, list[dict[str, Any]]]) -> set[tuple[str, str]]:
    return {(server, tool["name"]) for server, tools in catalog.items() for tool in tools}


def is_valid(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


# --- qualified_name ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("github", "create_issue", "github__create_issue"),
        ("desktop-commander", "read_file", "desktop-commander__read_file"),
        ("a", "__b", "a____b"),
        ("time", "get-current-time", "time__get-current-time"),
    ],
)
def test_safe_names_are_kept_readable_as_server_double_underscore_tool(server: str, tool: str, expected: str) -> None:
    assert qualified_name(server, tool) == expected


@pytest.mark.parametrize(
    ("server", "tool", "readable_prefix"),
    [
        ("my server", "read.file", "my_server__read_file-"),
        ("café", "lire", "cafe__lire-"),
        ("a__b", "c", "a_b__c-"),
        ("a_", "_b", "a___b-"),
        ("", "tool", "__tool-"),
    ],
)
def test_lossy_names_keep_a_readable_prefix_and_end_in_a_hash(server: str, tool: str, readable_prefix: str) -> None:
    name = qualified_name(server, tool)
    assert name.startswith(readable_prefix)
    assert len(name) == len(readable_prefix) + normalization.HASH_LENGTH
    assert is_valid(name)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a-b", "x"), ("a_b", "x")),  # both lossless: the characters differ, so do the names
        (("a.b", "x"), ("a b", "x")),  # both sanitise to a_b: only the hash tells them apart
        (("srv", "a.b"), ("srv", "a_b")),  # lossy vs lossless spelling of the same readable name
        (("a_", "_b"), ("a", "__b")),  # the same concatenation, split differently
        (("a__b", "c"), ("a", "b__c")),  # `__` inside the server part would make the split ambiguous
        (("srv", "t" * 70 + "1"), ("srv", "t" * 70 + "2")),  # differ only past character 64
        (("s" * 70 + "1", "t"), ("s" * 70 + "2", "t")),
        (("café", "x"), ("cafe", "x")),
        (("ｇｉｔｈｕｂ", "x"), ("github", "x")),  # full-width letters fold to the same ASCII
        (("", ""), ("_", "")),
    ],
)
def test_names_that_sanitise_alike_still_differ(first: tuple[str, str], second: tuple[str, str]) -> None:
    assert qualified_name(*first) != qualified_name(*second)


def test_a_safe_name_that_looks_hashed_is_hashed_itself_so_it_cannot_shadow_one() -> None:
    hashed = qualified_name("srv", "x.y")  # srv__x_y-<12 hex>
    lookalike_tool = hashed.removeprefix("srv__")
    assert is_valid(hashed) and NAME_PATTERN.fullmatch(f"srv__{lookalike_tool}")
    assert qualified_name("srv", lookalike_tool) != hashed
    assert qualified_name("srv", lookalike_tool).startswith(hashed + "-")


def test_a_name_is_exactly_64_characters_at_most_and_kept_whole_when_it_fits() -> None:
    assert qualified_name("s", "t" * 61) == "s__" + "t" * 61
    long = qualified_name("s", "t" * 62)
    assert len(long) == 64 and long.startswith("s__ttt")


@PROPERTY
@given(NAMES, NAMES)
def test_every_qualified_name_matches_the_provider_pattern(server: str, tool: str) -> None:
    name = qualified_name(server, tool)
    assert is_valid(name), name
    assert qualified_name(server, tool) == name  # deterministic


@PROPERTY
@given(st.tuples(NAMES, NAMES), st.tuples(NAMES, NAMES))
def test_different_server_tool_pairs_never_share_a_name(first: tuple[str, str], second: tuple[str, str]) -> None:
    if first != second:
        assert qualified_name(*first) != qualified_name(*second)


# --- normalize and reverse_map ------------------------------------------------------------------------


@PROPERTY
@given(CATALOG)
def test_every_tool_gets_a_valid_unique_name_and_every_offer_is_reachable(catalog: dict[str, Any]) -> None:
    tools = normalize(catalog)
    names = [entry.name for entry in tools]
    assert all(is_valid(name) for name in names)
    assert len(set(names)) == len(names)
    assert names == sorted(names)
    routes = reverse_map(tools)
    for entry in tools:
        assert routes[entry.name] == (entry.server, entry.tool)
        assert entry.server == entry.servers[0] and list(entry.servers) == sorted(set(entry.servers))
        assert entry.name == qualified_name(entry.server, entry.tool)  # no residual collision here
    for server, tool in offered(catalog):
        assert routes[qualified_name(server, tool)] == (server, tool)


@PROPERTY
@given(CATALOG, st.randoms(use_true_random=False))
def test_results_do_not_depend_on_registration_order(catalog: dict[str, Any], rnd: random.Random) -> None:
    servers = list(catalog)
    rnd.shuffle(servers)
    assert normalize({server: catalog[server] for server in servers}) == normalize(catalog)


@PROPERTY
@given(CATALOG, NAMES, st.lists(NAMES, max_size=4))
def test_adding_an_unrelated_server_renames_nothing(catalog: dict[str, Any], extra: str, tools: list[str]) -> None:
    catalog.pop(extra, None)
    before = normalize(catalog)
    unrelated = [{"name": tool, "description": "only on the extra server"} for tool in tools]
    after = normalize({**catalog, extra: unrelated})
    assert [entry for entry in after if entry.server != extra] == before
    assert reverse_map(before).items() <= reverse_map(after).items()


def test_exact_duplicates_of_replicas_collapse_to_one_entry_named_after_the_first_server() -> None:
    tool = {"name": "read_file", "description": "Read a file.", "inputSchema": {"type": "object"}}
    replicas = {"zeta": "alpha", "mid": "alpha", "alpha": "alpha"}
    tools = normalize({"zeta": [tool], "alpha": [dict(tool, title="other title")], "mid": [tool]}, replicas)
    assert len(tools) == 1
    (entry,) = tools
    assert (entry.name, entry.server, entry.servers, entry.tool) == (
        "alpha__read_file",
        "alpha",
        ("alpha", "mid", "zeta"),
        "read_file",
    )
    assert entry.definition["title"] == "other title"  # the first server's raw definition, untouched
    routes = reverse_map(tools)
    assert routes["mid__read_file"] == ("mid", "read_file")  # alias: a name learned earlier still routes
    assert reverse_map(tools, aliases=False) == {"alpha__read_file": ("alpha", "read_file")}


def test_same_name_with_a_different_schema_or_description_stays_two_tools() -> None:
    base = {"name": "read_file", "description": "Read a file.", "inputSchema": {"type": "object"}}
    other_schema = dict(base, inputSchema={"type": "object", "properties": {"path": {"type": "string"}}})
    other_text = dict(base, description="Read a file, fast.")
    tools = normalize({"fs": [base], "desktop": [other_schema], "cloud": [other_text]})
    assert [entry.name for entry in tools] == ["cloud__read_file", "desktop__read_file", "fs__read_file"]


def test_schema_key_order_does_not_make_duplicates_different() -> None:
    first = {"name": "t", "inputSchema": {"type": "object", "properties": {}}}
    second = {"name": "t", "inputSchema": {"properties": {}, "type": "object"}}
    assert [entry.servers for entry in normalize({"a": [first], "b": [second]}, {"b": "a"})] == [("a", "b")]


def test_an_identical_tool_on_an_undeclared_server_never_answers_for_another() -> None:
    """A server that copies another's definition (a shadowing attempt) gets its own entry and name."""
    tool = {"name": "get_current_time", "description": "Current time.", "inputSchema": {"type": "object"}}
    tools = normalize({"time": [tool], "aaa": [tool]})
    assert [(entry.name, entry.servers) for entry in tools] == [
        ("aaa__get_current_time", ("aaa",)),
        ("time__get_current_time", ("time",)),
    ]
    assert reverse_map(tools)["time__get_current_time"] == ("time", "get_current_time")


def test_a_tool_listed_twice_by_one_server_keeps_its_first_listing() -> None:
    tools = normalize({"srv": [{"name": "t", "description": "first"}, {"name": "t", "description": "second"}]})
    assert [(entry.name, entry.definition["description"]) for entry in tools] == [("srv__t", "first")]


def test_odd_input_gets_valid_names_instead_of_raising() -> None:
    catalog: dict[str, Any] = {
        "": [{"name": ""}, {}, "not a tool", None, {"name": 42}, {"name": "ok\nnot"}],
        "empty": [],
        "none": None,
    }
    tools = normalize(catalog)
    assert sorted(entry.tool for entry in tools) == ["", "42", "ok\nnot"]  # {} and {"name": ""} are one tool
    assert all(is_valid(entry.name) for entry in tools)
    assert len({entry.name for entry in tools}) == 3


def test_a_residual_hash_collision_is_resolved_deterministically(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force every first-attempt hash to be equal, which real sha256 does with probability ~2^-48.
    monkeypatch.setattr(normalization, "_digest", lambda server, tool, attempt: f"{attempt:012x}")
    catalog = {"srv": [{"name": "a.b"}, {"name": "a b"}, {"name": "a/b"}], "other": [{"name": "x"}]}
    tools = normalize(catalog)
    names = [entry.name for entry in tools]
    assert len(set(names)) == 4 and all(is_valid(name) for name in names)
    assert normalize(dict(reversed(list(catalog.items())))) == tools
    routes = reverse_map(tools)
    assert sorted(routes[entry.name] for entry in tools if entry.server == "srv") == [
        ("srv", "a b"),
        ("srv", "a.b"),
        ("srv", "a/b"),
    ]


def test_normalized_tools_are_hashable_values() -> None:
    (entry,) = normalize({"srv": [{"name": "t", "inputSchema": {"type": "object"}}]})
    assert isinstance(entry, NormalizedTool)
    assert {entry: 1}[entry] == 1


# --- real catalogs ---------------------------------------------------------------------------------------


def load_real_catalogs(shared_data: Path) -> dict[str, list[dict[str, Any]]]:
    """Every catalog plus every variant; a variant is one more server named after its file."""
    catalog: dict[str, list[dict[str, Any]]] = {}
    for folder in ("catalogs", "catalog-variants"):
        for path in sorted((shared_data / folder).glob("*.json")):
            tools = json.loads(path.read_text(encoding="utf-8"))
            catalog[path.stem] = tools["tools"] if isinstance(tools, dict) else tools
    return catalog


def test_every_real_tool_gets_a_valid_unique_name(shared_data: Path) -> None:
    catalog = load_real_catalogs(shared_data)
    assert len(catalog) == 32
    # The same server in two configurations, declared as replicas, collapses; another schema does not.
    tools = normalize(catalog, {"github-default": "github", "playwright-allcaps": "playwright"})
    names = [entry.name for entry in tools]
    assert all(is_valid(name) for name in names)
    assert len(set(names)) == len(names)
    routes = reverse_map(tools)
    assert all(routes[qualified_name(server, tool)] == (server, tool) for server, tool in offered(catalog))
    assert {entry.servers for entry in tools if len(entry.servers) > 1} == {
        ("github", "github-default"),
        ("playwright", "playwright-allcaps"),
    }
    assert [entry.name for entry in tools if entry.tool == "read_file"] == [
        "desktop-commander__read_file",
        "filesystem__read_file",
    ]


def test_removing_any_real_server_leaves_every_other_name_unchanged(shared_data: Path) -> None:
    catalog = load_real_catalogs(shared_data)
    full = normalize(catalog)
    full_routes = reverse_map(full)
    for removed in catalog:
        rest = normalize({server: tools for server, tools in catalog.items() if server != removed})
        rest_by_name = {entry.name: entry for entry in rest}
        for entry in full:
            if removed not in entry.servers:
                assert rest_by_name[entry.name] == entry, (removed, entry.name)
            elif entry.servers != (removed,):  # a collapsed entry now named after its next server
                remaining = tuple(server for server in entry.servers if server != removed)
                assert rest_by_name[qualified_name(remaining[0], entry.tool)].servers == remaining
        # Every name that still resolves resolves to what it did before: nothing was renamed.
        assert reverse_map(rest).items() <= full_routes.items(), removed


# --- one_line ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, ""),
        ("", ""),
        ("  Reads   a file.  ", "Reads a file."),
        ("Line one\nLine two\r\nthree", "Line one Line two three"),
        ("para\u2029graph\u2028line\x85next\x0bvt\x0cff", "para graph line next vt ff"),
        ("zero\u200bwidth\u200d\ufeffjoin", "zerowidthjoin"),
        ("bidi \u202eevil\u202c \u2066x\u2069", "bidi evil x"),
        ("bell\x07 esc\x1b[31m nul\x00", "bell esc[31m nul"),
        ("tab\tand\u00a0nbsp\u3000ideographic", "tab and nbsp ideographic"),
    ],
)
def test_one_line_strips_control_and_format_characters_and_collapses_whitespace(
    text: str | None, expected: str
) -> None:
    assert one_line(text) == expected


def test_one_line_caps_length_at_a_word_boundary_with_an_ellipsis() -> None:
    text = "Search the web for pages about a topic and return the most relevant results, " * 5
    line = one_line(text, limit=60)
    assert len(line) <= 60 and line.endswith("…")
    assert text.startswith(line.removesuffix("…"))
    assert text[len(line) - 1] == " "  # cut before a space, not inside a word
    assert one_line("x" * 200, limit=10) == "x" * 9 + "…"  # one long word is cut, not dropped
    assert one_line("short", limit=0) == ""


@PROPERTY
@given(st.text(max_size=400), st.integers(min_value=1, max_value=200))
def test_one_line_is_always_a_single_safe_line_within_the_limit(text: str, limit: int) -> None:
    line = one_line(text, limit)
    assert len(line) <= limit
    assert len(line.splitlines()) <= 1
    assert line == line.strip() and "  " not in line
    assert not any(unicodedata.category(c).startswith("C") or unicodedata.category(c) in ("Zl", "Zp") for c in line)
    assert not any(c.isspace() and c != " " for c in line)
    if len(line) < limit:  # not cut: applying it again changes nothing
        assert one_line(line, limit) == line


def test_public_surface_is_exactly_the_contract() -> None:
    assert sorted(normalization.__all__) == [
        "DESCRIPTION_LIMIT",
        "NAME_PATTERN",
        "NormalizedTool",
        "normalize",
        "one_line",
        "qualified_name",
        "reverse_map",
        "sanitize_schema",
        "sanitize_text",
    ]
