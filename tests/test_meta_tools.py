"""The meta-tools behind search mode: result shapes, argument checks and repair, profile refusals, routing.

Real servers: two copies of tests/servers/basic.py over stdio ("alpha" and "beta", identical tools, so
the catalog collapses them into one entry offered by both), behind one MCPManager for the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import mcp.types as types
import pytest

from orchestrator import (
    Caller,
    MCPManager,
    MetaTools,
    ProfileFilter,
    SchemaLimits,
    ServerConfig,
    Settings,
    ToolCatalog,
    ToolSearchEngine,
    ToolSearchSettings,
    meta_tool_definitions,
)
from orchestrator._call_arguments import ArgumentChecker, ArgumentProblem
from orchestrator._meta_tools import CALL_TOOL, EXPAND_TOOLS, TOOL_SEARCH, error_kind, without_upstream_stamps

from .conftest import stdio_server_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _basic(tag: str) -> ServerConfig:
    return stdio_server_config("basic.py", env={"BASIC_SERVER_TAG": tag})


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPManager]:
    beta = _basic("beta").model_copy(update={"replica_of": "alpha"})  # a declared replica: calls may go to either
    settings = Settings(mcp={"servers": {"alpha": _basic("alpha"), "beta": beta}, "warm_start": False})
    async with MCPManager(settings) as live:
        assert live.is_ready("alpha") and live.is_ready("beta")
        yield live


def _meta(manager: Any, rules: ProfileFilter | None = None, **kwargs: Any) -> MetaTools:
    full = manager.catalog()
    visible = rules.apply(full) if rules else full
    engine = ToolSearchEngine(visible, ToolSearchSettings(ranking="lexical"))
    return MetaTools(engine, manager, full_catalog=full, visibility=rules, caller=Caller(agent="tester"), **kwargs)


def _text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_tool_search_returns_names_summaries_and_scores_without_schemas(manager: MCPManager) -> None:
    meta = _meta(manager)
    result = meta.tool_search("add two integers", 3)
    payload = result.structured_content
    assert not result.is_error and payload is not None
    assert payload["query"] == "add two integers" and payload["outcome"] == "hit"
    first = payload["hits"][0]
    assert set(first) == {"name", "summary", "score"}  # short: it stays in the agent's context
    assert first["name"] == "alpha__add" and first["score"] == round(first["score"], 3)
    assert "input_schema" not in _text(result)
    assert json.loads(_text(result)) == payload and ", " not in _text(result).replace(first["summary"], "")
    assert meta.tool_search("zebra quantum chromodynamics").structured_content == {
        "query": "zebra quantum chromodynamics",
        "outcome": "miss",
        "hits": [],
    }
    assert meta.stats.searches == 2


async def test_an_empty_query_is_a_corrective_error(manager: MCPManager) -> None:
    result = _meta(manager).tool_search("   ")
    assert result.is_error and error_kind(result) == "invalid_query"
    assert "keywords" in _text(result)


async def test_odd_arguments_get_one_line_corrective_errors(manager: MCPManager) -> None:
    """Found by red-teaming: a limit of other digits ('²' passes str.isdigit, int() refuses it), a JSON
    string nested past the decoder's depth and huge values ended in internal errors or were echoed whole."""
    meta = _meta(manager)
    for limit in ("²", "٣", "9" * 5000, "x" * 100_000):
        result = meta.tool_search("add two integers", limit)
        assert result.is_error and error_kind(result) == "invalid_arguments" and len(_text(result)) < 300
    deep = "[" * 5000 + "]" * 5000
    assert meta.expand_tools(deep).is_error
    called = await meta.call_tool("alpha__echo", deep)
    assert called.is_error and error_kind(called) == "invalid_arguments"


def test_an_error_over_many_extra_keys_is_described_in_linear_time() -> None:
    """Found by red-teaming: describing an `additionalProperties` error replaced each extra key across the
    whole message (keys x message length): 40,000 keys held a worker thread for tens of seconds."""
    entry = ToolCatalog.from_lists(
        {"s": [{"name": "t", "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}}]}
    ).entries[0]
    arguments = {f"key_{n:05d}_{'x' * 8}": n for n in range(40_000)}
    started = time.perf_counter()
    with pytest.raises(ArgumentProblem) as problem:
        ArgumentChecker().check(entry, arguments)
    took = time.perf_counter() - started
    assert "Additional properties are not allowed" in str(problem.value) and len(str(problem.value)) < 1_000
    assert took < 5.0, f"took {took:.1f} s"  # a bound on complexity: linear is well under a second here


async def test_expand_tools_gives_full_schemas_and_names_close_matches_for_typos(manager: MCPManager) -> None:
    meta = _meta(manager)
    expanded = meta.expand_tools(["alpha__add"]).structured_content
    assert expanded is not None
    (tool,) = expanded["tools"]
    assert tool["name"] == "alpha__add" and set(tool["input_schema"]["properties"]) == {"a", "b"}
    typo = meta.expand_tools(["alpha__ad"])
    assert typo.is_error and "alpha__add" in _text(typo)
    assert meta.expand_tools('["alpha__echo"]').structured_content["tools"][0]["name"] == "alpha__echo"


async def test_call_tool_validates_then_routes_through_the_manager(manager: MCPManager) -> None:
    meta = _meta(manager)
    result = await meta.call_tool("alpha__add", {"a": 2, "b": 3})
    assert not result.is_error and result.structured_content == {"result": 5}
    assert meta.stats.calls == 1 and meta.stats.called == ["alpha__add"]


async def test_arguments_sent_as_a_json_string_are_repaired(manager: MCPManager) -> None:
    meta = _meta(manager)
    result = await meta.call_tool("alpha__add", '{"a": 20, "b": 22}')
    assert not result.is_error and result.structured_content == {"result": 42}
    via_meta = await meta.dispatch(CALL_TOOL, {"name": "alpha__echo", "arguments": '{"text": "hi"}'})
    assert not via_meta.is_error and _text(via_meta) == "hi"


async def test_wrong_arguments_come_back_saying_what_to_fix(manager: MCPManager) -> None:
    meta = _meta(manager)
    result = await meta.call_tool("alpha__add", {"a": "two"})
    message = _text(result)
    assert result.is_error and error_kind(result) == "invalid_arguments"
    assert '"b" is a required property' in message
    assert 'at \'a\': "two" is not of type "integer"' in message
    assert "Expected: {a: integer (required), b: integer (required)}" in message
    assert meta.stats.calls == 0  # nothing reached the server
    not_an_object = await meta.call_tool("alpha__add", [1, 2])
    assert not_an_object.is_error and "must be a JSON object, got a list" in _text(not_an_object)


async def test_a_tool_the_profile_hides_is_refused_everywhere(manager: MCPManager) -> None:
    meta = _meta(manager, ProfileFilter(deny=("*__whoami",)))
    called = await meta.call_tool("alpha__whoami", {})
    assert called.is_error and error_kind(called) == "hidden_tool"
    assert "not available to agent 'tester'" in _text(called) and "agents.tester" in _text(called)
    expanded = meta.expand_tools(["alpha__whoami"])
    assert expanded.is_error and error_kind(expanded) == "hidden_tool"
    hits = meta.tool_search("BASIC_SERVER_TAG environment variable").structured_content["hits"]
    assert all(not hit["name"].endswith("__whoami") for hit in hits)


async def test_an_unknown_tool_gets_the_closest_names_and_a_hint(manager: MCPManager) -> None:
    result = await _meta(manager).call_tool("alpha__ech", {"text": "x"})
    assert result.is_error and error_kind(result) == "unknown_tool"
    assert "Closest names: alpha__echo" in _text(result) and "tool_search" in _text(result)
    meta_name = await _meta(manager).call_tool(TOOL_SEARCH, {"query": "x"})
    assert meta_name.is_error and "call it directly" in _text(meta_name)


async def test_a_tool_error_from_the_server_is_passed_through(manager: MCPManager) -> None:
    meta = _meta(manager)
    result = await meta.call_tool("alpha__fail", {"message": "disk full"})
    assert result.is_error and "disk full" in _text(result)
    assert meta.stats.calls == 1 and meta.stats.called == []


async def test_a_duplicate_tool_goes_to_the_first_ready_server_the_profile_allows(manager: MCPManager) -> None:
    default = await _meta(manager).call_tool("alpha__whoami", {})
    only_beta = await _meta(manager, ProfileFilter(servers=("beta",))).call_tool("alpha__whoami", {})
    assert (_text(default), _text(only_beta)) == ("alpha", "beta")


async def test_routing_skips_a_server_that_is_not_ready(manager: MCPManager) -> None:
    class AlphaDown:
        """The manager, except that alpha reports not ready (a seam, not a protocol mock)."""

        def is_ready(self, server: str) -> bool:
            return server != "alpha" and manager.is_ready(server)

        async def call_tool(
            self, server: str, tool: str, arguments: dict[str, Any] | None, **options: Any
        ) -> types.CallToolResult:
            return await manager.call_tool(server, tool, arguments, **options)

    full = manager.catalog()
    meta = MetaTools(ToolSearchEngine(full, ToolSearchSettings(ranking="lexical")), AlphaDown(), full_catalog=full)
    assert _text(await meta.call_tool("alpha__whoami", {})) == "beta"


async def test_an_api_loop_dispatches_meta_tools_and_expanded_tools_by_name(manager: MCPManager) -> None:
    meta = _meta(manager)
    assert [d["name"] for d in meta_tool_definitions()] == [TOOL_SEARCH, EXPAND_TOOLS, CALL_TOOL]
    found = await meta.dispatch(TOOL_SEARCH, {"query": "echo text", "limit": 1})
    assert found.structured_content["hits"][0]["name"] == "alpha__echo"
    direct = await meta.dispatch("alpha__echo", {"text": "direct"})
    assert _text(direct) == "direct"
    assert meta.stats.as_dict()["calls"] == 1


async def test_a_recursive_ref_or_absurdly_deep_arguments_are_answered_not_crashed(manager: MCPManager) -> None:
    """A `$ref` cycle in a server's schema, or 1,000-level arguments, never reach jsonschema's recursion."""
    from orchestrator import ToolCatalog as Catalog

    looping = {"type": "object", "$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
    catalog = Catalog.from_lists({"alpha": [{"name": "echo", "description": "Echo.", "inputSchema": looping}]})
    meta = MetaTools(ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical")), manager, full_catalog=catalog)
    result = await meta.call_tool("alpha__echo", {"text": "fine"})  # no validator: the server checks
    assert _text(result) == "fine"
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(1000):
        node["a"] = {}
        node = node["a"]
    refused = await meta.call_tool("alpha__echo", {"text": "x", "extra": deep})
    assert refused.is_error and "nested more than" in _text(refused)


async def test_call_arguments_are_held_to_the_configured_depth(manager: MCPManager) -> None:
    """`mcp.schema_max_depth` bounds call arguments too, as the manager hands it on (not a built-in 64)."""
    from orchestrator import ToolCatalog as Catalog

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    catalog = Catalog.from_lists({"alpha": [{"name": "echo", "description": "Echo.", "inputSchema": schema}]})
    engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical"))
    nested: dict[str, Any] = {"a": {"b": {"c": {"d": {}}}}}  # 5 levels
    default = MetaTools(engine, manager, full_catalog=catalog)
    assert _text(await default.call_tool("alpha__echo", {"text": "ok", "extra": nested})) == "ok"
    tight = MetaTools(engine, manager, full_catalog=catalog, schema_limits=SchemaLimits(max_depth=4))
    refused = await tight.call_tool("alpha__echo", {"text": "ok", "extra": nested})
    assert refused.is_error and "nested more than 4 levels deep" in _text(refused)
    assert manager.schema_limits == SchemaLimits()  # the defaults of mcp.schema_max_depth / _bytes


def test_each_schema_is_checked_once_per_process_not_once_per_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every spawn has its own meta-tools; checking a schema against the metaschema costs more than most
    calls, so a tool's validator is built once and shared, and old ones are dropped past a bound."""
    import jsonschema

    from orchestrator import ToolCatalog as Catalog
    from orchestrator import _call_arguments

    def catalog(name: str) -> Catalog:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return Catalog.from_lists({"alpha": [{"name": name, "description": "Count.", "inputSchema": schema}]})

    [entry] = catalog("count_once")
    first = _call_arguments.ArgumentChecker()
    assert first.check(entry, {"n": 1}) == {"n": 1}
    built: list[object] = []
    monkeypatch.setattr(jsonschema.validators, "validator_for", lambda *args, **kwargs: built.append(args))
    another_spawn = _call_arguments.ArgumentChecker()
    with pytest.raises(_call_arguments.ArgumentProblem, match='"n" is a required property'):
        another_spawn.check(entry, {})
    assert built == []  # the first checker's validator, not a new one
    monkeypatch.undo()
    monkeypatch.setattr(_call_arguments, "VALIDATORS_KEPT", 3)
    for index in range(5):
        [other] = catalog(f"count_{index}")
        another_spawn.check(other, {"n": index})
    assert len(_call_arguments.ArgumentChecker._validators) <= 3


async def test_errors_carry_no_structured_content_that_an_output_schema_would_reject(manager: MCPManager) -> None:
    """TypeScript SDK v1 and MCP Inspector validate structuredContent against the tool's outputSchema even
    on an error (`add` declares one: {"result": integer}); the kind travels in _meta instead."""
    result = await _meta(manager).call_tool("alpha__add", {"a": "two"})
    wire = result.model_dump(by_alias=True, exclude_none=True)
    assert wire["isError"] is True and "structuredContent" not in wire
    assert wire["_meta"] == {"orchestrator/error": "invalid_arguments"}


async def test_values_in_error_messages_are_json_not_python(manager: MCPManager) -> None:
    meta = _meta(manager)
    message = _text(await meta.call_tool("alpha__add", {"a": None, "b": True}))
    assert "null is not of type" in message and "true is not of type" in message
    assert "None" not in message and "True" not in message
    assert "got false" in _text(meta.tool_search("echo", False))


async def test_in_full_mode_hints_never_point_at_tool_search(manager: MCPManager) -> None:
    full_mode = _meta(manager, search_offered=False)
    unknown = _text(await full_mode.call_tool("alpha__ech", {"text": "x"}))
    assert "Closest names: alpha__echo" in unknown and "tool_search" not in unknown and "tools/list" in unknown
    hidden = _text(
        await _meta(manager, ProfileFilter(deny=("*__whoami",)), search_offered=False).call_tool("alpha__whoami")
    )
    assert "not available" in hidden and "tool_search" not in hidden


async def test_results_do_not_carry_the_upstream_servers_identity(manager: MCPManager) -> None:
    """The SDK's servers stamp `io.modelcontextprotocol/serverInfo` on results (2026-07-28): an agent talks
    to the surface in front of them and must not see which server answered."""
    direct = await manager.call_tool("alpha", "echo", {"text": "x"})
    assert "io.modelcontextprotocol/serverInfo" in (direct.meta or {})  # what the upstream sends
    relayed = await _meta(manager).call_tool("alpha__echo", {"text": "x"})
    failed = await _meta(manager).call_tool("alpha__fail", {"message": "no"})
    for result in (relayed, failed):
        assert not any(key.startswith("io.modelcontextprotocol/") for key in (result.meta or {}))


async def test_a_short_name_a_client_was_given_routes_to_its_tool(manager: MCPManager) -> None:
    meta = _meta(manager, names={"al-1": "alpha__echo"}.get)
    assert _text(await meta.call_tool("al-1", {"text": "via short name"})) == "via short name"


def test_a_servers_result_cannot_pass_itself_off_as_the_gateways_error() -> None:
    """Found by red-teaming: an upstream `_meta` `orchestrator/error` went through on a successful result,
    imitating the gateway's own corrective errors; only the protocol's own stamps were removed."""
    result = types.CallToolResult(content=[], _meta={"orchestrator/error": "unknown_tool", "vendor/trace": "t-1"})
    assert without_upstream_stamps(result).meta == {"vendor/trace": "t-1"}
    assert error_kind(without_upstream_stamps(result)) is None


def test_unique_items_are_checked_in_linear_time_with_json_schemas_equality() -> None:
    """Found by red-teaming: jsonschema compares items pairwise when they do not sort (objects); one call
    with 4,000 of them held a worker thread, shared by every spawn, for half a minute."""
    schema = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}
    entry = ToolCatalog.from_lists({"s": [{"name": "t", "inputSchema": schema}]}).entries[0]
    checker = ArgumentChecker()
    started = time.perf_counter()
    assert checker.check(entry, {"items": [{"n": n, "tag": "x" * 8} for n in range(4_000)]})
    assert time.perf_counter() - started < 5.0  # a bound on complexity: about 30 s before
    for same in ([1, 1.0], [{"a": 1, "b": 2}, {"b": 2, "a": 1}], [[1, "x"], [1, "x"]]):
        with pytest.raises(ArgumentProblem, match="non-unique elements"):
            checker.check(entry, {"items": same})
    for different in ([True, 1], [False, 0, None], [[1, 2], [2, 1]], [{"a": 1}, {"a": 1.5}]):
        assert checker.check(entry, {"items": different})
