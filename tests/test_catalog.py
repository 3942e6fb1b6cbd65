"""ToolCatalog: the three snapshot formats, versions, lookups, filtering, and a live manager."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import CatalogError, MCPManager, MCPSettings, ToolCatalog, ToolEntry

from .conftest import stdio_server_config

TIME_TOOLS = [
    {
        "name": "get_current_time",
        "description": "Get current time in a specific timezone",
        "inputSchema": {"type": "object", "properties": {"timezone": {"type": "string"}}},
    },
    {"name": "convert_time", "description": "Convert time between timezones", "inputSchema": {"type": "object"}},
]
FETCH_TOOLS = [{"name": "fetch", "description": "Fetches a URL.\nSecond line.", "title": "Fetch URL"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _names(catalog: ToolCatalog) -> list[str]:
    return [entry.name for entry in catalog]


def test_a_folder_of_server_files_is_a_snapshot(tmp_path: Path) -> None:
    (tmp_path / "time.json").write_text(json.dumps(TIME_TOOLS))
    (tmp_path / "fetch.json").write_text(json.dumps({"tools": FETCH_TOOLS, "nextCursor": None}))
    (tmp_path / "notes.txt").write_text("ignored")
    catalog = ToolCatalog.from_snapshot(tmp_path)
    assert _names(catalog) == ["fetch__fetch", "time__convert_time", "time__get_current_time"]
    assert catalog.servers() == ["fetch", "time"]


def test_a_file_mapping_servers_to_tools_is_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"time": TIME_TOOLS, "fetch": FETCH_TOOLS}))
    assert _names(ToolCatalog.from_snapshot(path)) == ["fetch__fetch", "time__convert_time", "time__get_current_time"]


def test_a_list_of_tools_carrying_their_server_is_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(
        json.dumps([{"server": "time", **tool} for tool in TIME_TOOLS] + [{"server": "fetch", **FETCH_TOOLS[0]}])
    )
    catalog = ToolCatalog.from_snapshot(path)
    assert _names(catalog) == ["fetch__fetch", "time__convert_time", "time__get_current_time"]
    assert "server" not in catalog.get("fetch__fetch").definition()


def test_a_plain_tool_list_file_is_one_server_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "time.json"
    path.write_text(json.dumps(TIME_TOOLS))
    assert ToolCatalog.from_snapshot(path).servers() == ["time"]


def test_the_real_catalogs_load_as_590_tools_on_29_servers(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    assert (len(catalog), len(catalog.servers())) == (590, 29)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"invalid JSON \(line 1"),
        ('{"time": 3}', r"server 'time': expected a list of tools, got int"),
        ('[{"server": "a", "name": "x"}, {"name": "y"}]', r"item 1 has no 'server' string"),
        ('{"time": ["x"]}', r"server 'time': tool 0 is str, not an object"),
        ("3", r"expected a JSON object or list of tools, got int"),
    ],
)
def test_a_malformed_snapshot_is_an_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CatalogError, match=message) as raised:
        ToolCatalog.from_snapshot(path)
    assert str(path) in str(raised.value)


def test_a_missing_snapshot_or_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="snapshot not found"):
        ToolCatalog.from_snapshot(tmp_path / "nope.json")
    with pytest.raises(CatalogError, match=r"holds no <server>\.json files"):
        ToolCatalog.from_snapshot(tmp_path)


def test_entries_carry_name_server_tool_title_summary_and_schema() -> None:
    entry = ToolCatalog.from_lists({"fetch": FETCH_TOOLS}).get("fetch__fetch")
    assert entry is not None
    assert (entry.server, entry.servers, entry.tool, entry.title) == ("fetch", ("fetch",), "fetch", "Fetch URL")
    assert entry.summary == "Fetches a URL. Second line."
    assert entry.input_schema == {"type": "object", "properties": {}}  # no inputSchema: takes no arguments
    assert entry.definition() == {
        "name": "fetch__fetch",
        "description": "Fetches a URL.\nSecond line.",
        "input_schema": {"type": "object", "properties": {}},
    }


def test_the_version_depends_only_on_content() -> None:
    first = ToolCatalog.from_lists({"time": TIME_TOOLS, "fetch": FETCH_TOOLS})
    same = ToolCatalog.from_lists({"fetch": FETCH_TOOLS, "time": list(reversed(TIME_TOOLS))})
    changed = ToolCatalog.from_lists({"time": TIME_TOOLS, "fetch": [{**FETCH_TOOLS[0], "description": "Other."}]})
    assert first.version == same.version
    assert changed.version != first.version


def test_lookup_accepts_qualified_alias_and_bare_names() -> None:
    catalog = ToolCatalog.from_lists({"time": TIME_TOOLS, "time2": TIME_TOOLS}, {"time2": "time"})
    entry = catalog.get("time__convert_time")
    assert entry is not None and entry.servers == ("time", "time2")  # declared replicas collapse
    assert catalog.lookup("time__convert_time") is entry
    assert catalog.lookup("time2__convert_time") is entry
    assert catalog.lookup("convert_time") is entry
    assert catalog.lookup("nope") is None


def test_filtered_keeps_names_and_changes_the_version() -> None:
    catalog = ToolCatalog.from_lists({"time": TIME_TOOLS, "fetch": FETCH_TOOLS})
    only_time = catalog.filtered(lambda entry: entry.server == "time")
    assert _names(only_time) == ["time__convert_time", "time__get_current_time"]
    assert only_time.version != catalog.version


@pytest.mark.anyio
async def test_the_managers_catalog_snapshots_live_tool_lists_and_follows_changes(tmp_path: Path) -> None:
    # on_change accept: a new tool is offered at once (the default holds it until approved).
    changing = stdio_server_config("changing.py", on_change="accept")
    settings = MCPSettings(cache_dir=tmp_path, servers={"changing": changing})
    with anyio.fail_after(60):
        async with MCPManager(settings) as manager:
            before = manager.catalog()
            assert manager.catalog() is before  # unchanged manager: same snapshot
            assert "changing__base" in before
            version = manager.version
            await manager.call_tool("changing", "add_tool", {"name": "brand_new"})
            await manager.wait_for_version(version, timeout=30)
            after = manager.catalog()
    assert "changing__brand_new" in after and after.version != before.version


SNAPSHOT_TEXTS = [
    json.dumps({"time": TIME_TOOLS, "fetch": FETCH_TOOLS}, indent=2),
    json.dumps({"tools": TIME_TOOLS, "nextCursor": None}),
    json.dumps({"tools": TIME_TOOLS, "fetch": FETCH_TOOLS}),
    '{"time": ' + json.dumps(FETCH_TOOLS) + ', "time" : ' + json.dumps(TIME_TOOLS) + "}\n",
    json.dumps([{"server": "time", **tool} for tool in TIME_TOOLS]),
    json.dumps(TIME_TOOLS),
    "{}",
]


@pytest.mark.parametrize("text", SNAPSHOT_TEXTS)
def test_a_snapshot_read_server_by_server_is_the_catalog_of_all_its_lists(tmp_path: Path, text: str) -> None:
    from orchestrator.protocols.mcp._catalog import read_snapshot

    path = tmp_path / "snapshot.json"
    path.write_text(text)
    catalog = ToolCatalog.from_snapshot(path)
    assert catalog.entries == ToolCatalog.from_lists(read_snapshot(path)).entries
    assert catalog.version == ToolCatalog.from_lists(read_snapshot(path)).version


LISTS = [
    TIME_TOOLS,
    FETCH_TOOLS,
    [*FETCH_TOOLS, {**FETCH_TOOLS[0], "description": "Fetches a URL.\nSecond line!"}],  # a repeated name
    [{**TIME_TOOLS[0], "description": "Get current time in a specific timezone."}, TIME_TOOLS[1]],
    [
        {**tool, "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "default": 1.0}}}}
        for tool in TIME_TOOLS
    ],
    [],
]


@settings(max_examples=150, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.sampled_from(["time", "fetch", "a b", "tools", "_meta", "x" * 70, "é"]),
            st.integers(0, len(LISTS) - 1),
            st.sampled_from([None, 1]),
        ),
        max_size=12,
    )
)
def test_a_snapshot_repeating_lists_is_the_catalog_of_all_its_lists(members: list[tuple[str, int, int | None]]) -> None:
    from orchestrator.protocols.mcp._catalog import read_snapshot

    text = (
        "{"
        + ", ".join(f"{json.dumps(server)}: {json.dumps(LISTS[i], indent=indent)}" for server, i, indent in members)
        + "}"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "snapshot.json"
        path.write_text(text, encoding="utf-8")
        catalog = ToolCatalog.from_snapshot(path)
        whole = ToolCatalog.from_lists(read_snapshot(path))
    assert catalog.entries == whole.entries
    assert [entry.digest for entry in catalog] == [entry.digest for entry in whole]
    assert catalog.version == whole.version


def test_the_real_catalogs_repeated_under_other_servers_load_as_read_whole(shared_data: Path, tmp_path: Path) -> None:
    from orchestrator.protocols.mcp._catalog import read_snapshot

    lists = read_snapshot(shared_data / "catalogs")
    path = tmp_path / "snapshot.json"
    path.write_text(
        json.dumps({f"{server}{copy}": tools for copy in ("", "-r1", " copy 2") for server, tools in lists.items()})
    )
    catalog = ToolCatalog.from_snapshot(path)
    whole = ToolCatalog.from_lists(read_snapshot(path))
    assert len(catalog) == 3 * 590
    assert catalog.entries == whole.entries
    assert [entry.digest for entry in catalog] == [entry.digest for entry in whole]


@pytest.mark.parametrize(
    "text",
    [
        '{"time": 3, "fetch": [}',  # a bad list first, then a syntax error: the syntax error is reported
        '{"time": [], "fetch": []} trailing',
        '{"time": [1]}',
        "\ufeff{}",
    ],
)
def test_a_faulty_snapshot_file_is_reported_as_when_read_whole(tmp_path: Path, text: str) -> None:
    from orchestrator.protocols.mcp._catalog import read_snapshot

    path = tmp_path / "snapshot.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError) as whole:
        read_snapshot(path)
    with pytest.raises(CatalogError) as streamed:
        ToolCatalog.from_snapshot(path)
    assert str(streamed.value) == str(whole.value)


def test_entries_a_build_makes_are_tool_entries_as_the_dataclass_makes_them(shared_data: Path) -> None:
    import dataclasses

    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    for entry in catalog:
        fields = [getattr(entry, field.name) for field in dataclasses.fields(entry) if field.init]
        made = ToolEntry(*fields)
        assert type(entry) is ToolEntry
        assert entry == made and hash(entry) == hash(made) and repr(entry) == repr(made)
        assert entry.digest == made.digest
        assert dataclasses.replace(entry, name="x") == dataclasses.replace(made, name="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        catalog.entries[0].name = "other"  # type: ignore[misc]
