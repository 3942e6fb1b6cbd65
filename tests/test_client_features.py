"""What real agent clients need from the gateway and the provider formats (issue 15).

- Name budgets: Claude Code and Codex put `mcp__<gateway.server_name>__` before every tool name and the
  model API allows 64 characters, so each profile is listed names that fit after its client's prefix;
  checked over every real catalog in ../shared/data.
- Provider formats inside provider limits: every real tool in OpenAI and Anthropic shape passes a
  validator of their rules; OpenAI's 128 tools per request sends a profile to search mode.
- Through the gateway: progress and log messages relayed to the caller, resources and prompts proxied (a
  `resource_link` reads back), error results that clients validating `outputSchema` accept, no upstream
  identity in results, tools that need MCP tasks hidden with their reason.
- Answer at once: `orchestrator serve` answers `initialize` and `tools/list` before its servers are up
  and announces them with list_changed.

Upstream servers: tests/servers/features.py (an SDK server using progress, logging, resources, prompts
and output schemas) and tests/servers/tasks.py (a task-only tool), over stdio behind one manager.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from orchestrator import (
    AgentProfile,
    ConfigError,
    Gateway,
    MCPManager,
    OrchestratorError,
    ServerConfig,
    Settings,
    SpawnPlanner,
    ToolCatalog,
    render_tools,
)
from orchestrator._clients import client_kind
from orchestrator._formats import (
    ANTHROPIC_DESCRIPTION_LIMIT,
    OPENAI_DESCRIPTION_LIMIT,
    OPENAI_TOOL_LIMIT,
    TOP_LEVEL_FORBIDDEN,
    ClientNames,
    provider_schema,
    to_anthropic,
    to_openai,
)
from orchestrator._gateway.proxy import MATCHED_URI_CHARS, _template_pattern
from orchestrator._launch import fill_command
from orchestrator.protocols.mcp._catalog import read_snapshot

from .conftest import server_script, stdio_server_config

pytestmark = pytest.mark.anyio

MODEL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# What Anthropic and OpenAI accept as a tool name: the whole name the client finally sends.
CLAUDE_PREFIX = "mcp__orchestrator__"
LONGEST_PREFIX = "mcp__" + "s" * 24 + "__"
# gateway.server_name at its longest (24 characters).
LONG_TOOL = "summarize_repository_activity_for_the_last_week"
# features.py's 47-character tool: `features__...` is 57 characters, 76 after Claude Code's prefix.
START_S = 60.0
# Bound on servers and gateways starting: importing mcp costs ~2 s of CPU on a loaded 2-core machine.
EVENT_S = 10.0
# Bound on a notification arriving once its cause happened (measured in milliseconds when it works).


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- real catalogs


def _real_catalogs(shared: Path) -> Iterator[tuple[str, ToolCatalog]]:
    """All 29 servers of catalogs/ as one catalog (the 590 tools), then each variant configuration."""
    yield "catalogs", ToolCatalog.from_snapshot(shared / "catalogs")
    for path in sorted((shared / "catalog-variants").glob("*.json")):
        yield path.name, ToolCatalog.from_lists({path.stem: read_snapshot(path)[path.stem]})


def test_every_real_tool_fits_the_model_name_limit_after_a_clients_prefix(shared_data: Path) -> None:
    for source, catalog in _real_catalogs(shared_data):
        for prefix in (CLAUDE_PREFIX, LONGEST_PREFIX):
            names = ClientNames(catalog, 64 - len(prefix))
            listed = [names.name(entry.name) for entry in catalog]
            assert len(set(listed)) == len(listed), f"{source}: names collide after {prefix!r}"
            for entry, name in zip(catalog, listed, strict=True):
                assert MODEL_NAME.fullmatch(prefix + name), f"{source}: {prefix + name!r} ({len(prefix + name)})"
                assert names.qualified(name) == entry.name
                if len(entry.name) <= names.budget:
                    assert name == entry.name  # a name that fits is never changed
    full = ToolCatalog.from_snapshot(shared_data / "catalogs")
    assert len(ClientNames(full, 64 - len(CLAUDE_PREFIX)).shortened) == 7  # the issue's 7 of 590


def test_a_shortened_name_depends_only_on_its_tool(shared_data: Path) -> None:
    full = ToolCatalog.from_snapshot(shared_data / "catalogs")
    budget = 64 - len(CLAUDE_PREFIX)
    shortened = ClientNames(full, budget).shortened
    alone = ToolCatalog(entry for entry in full if entry.name in shortened)
    assert ClientNames(alone, budget).shortened == shortened  # the same names whatever else is listed
    for qualified, short in shortened.items():
        assert short.startswith(qualified[:8]) and re.search(r"-[0-9a-f]{12}$", short)


def test_a_prefix_that_leaves_too_little_room_is_refused() -> None:
    catalog = ToolCatalog.from_lists({"s": [{"name": "t", "inputSchema": {"type": "object"}}]})
    with pytest.raises(OrchestratorError, match=re.escape("shorten gateway.server_name or the profile's tool_prefix")):
        ClientNames(catalog, 20)


def _walk(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        yield path, schema
        for key, value in schema.items():
            if isinstance(value, dict | list):
                yield from _walk(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _walk(item, f"{path}/{index}")


def _provider_problems(name: str, description: str, schema: dict[str, Any], provider: str) -> list[str]:
    """The request-validation rules the two APIs apply to one tool (each from a real 400 message)."""
    problems = []
    if not MODEL_NAME.fullmatch(name):
        problems.append(f"name {name!r}")
    if len(description) > (OPENAI_DESCRIPTION_LIMIT if provider == "openai" else ANTHROPIC_DESCRIPTION_LIMIT):
        problems.append(f"description of {len(description)} characters")
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        problems.append("top level is not an object with properties")
    forbidden = TOP_LEVEL_FORBIDDEN if provider == "openai" else ("oneOf", "anyOf", "allOf")
    problems += [f"top-level {key}" for key in forbidden if key in schema]
    if provider == "openai":
        for path, node in _walk(schema):
            kind = node.get("type")
            if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in node:
                problems.append(f"array schema missing items at {path or '/'}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        problems.append(f"not a valid JSON Schema: {exc.message}")
    return problems


def test_every_real_tool_passes_the_openai_and_anthropic_request_rules(shared_data: Path) -> None:
    checked = 0
    for source, catalog in _real_catalogs(shared_data):
        for entry in catalog:
            openai = to_openai(entry)["function"]
            anthropic = to_anthropic(entry)
            assert not _provider_problems(openai["name"], openai["description"], openai["parameters"], "openai"), (
                source,
                entry.name,
            )
            assert not _provider_problems(
                anthropic["name"], anthropic["description"], anthropic["input_schema"], "anthropic"
            ), (source, entry.name)
            checked += 1
    assert checked >= 590


def test_schemas_are_repaired_where_a_provider_rejects_what_mcp_allows() -> None:
    schema = {
        "anyOf": [
            {"properties": {"path": {"type": "string"}}, "required": ["path"]},
            {"properties": {"ids": {"type": "array"}, "mixed": {"type": ["string", "array"]}}},
        ],
        "properties": {"tags": {"anyOf": [{"type": "array"}, {"type": "null"}]}},
    }
    before = json.dumps(schema, sort_keys=True)
    openai = provider_schema(schema, "openai")
    assert json.dumps(schema, sort_keys=True) == before  # the input is never changed
    assert openai["type"] == "object" and "anyOf" not in openai and "required" not in openai
    assert set(openai["properties"]) == {"path", "ids", "mixed", "tags"}
    assert openai["properties"]["ids"]["items"] == {} and openai["properties"]["mixed"]["items"] == {}
    assert openai["properties"]["tags"]["anyOf"][0]["items"] == {}
    anthropic = provider_schema(schema, "anthropic")
    assert "anyOf" not in anthropic and "items" not in anthropic["properties"]["ids"]  # Anthropic takes it
    fine = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}, "required": ["a"]}
    assert provider_schema(fine, "openai") == fine and provider_schema(fine, "anthropic") == fine


def test_more_tools_than_openai_takes_are_refused_in_openai_format(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    with pytest.raises(
        OrchestratorError, match=re.escape(f"590 tools is over OpenAI's {OPENAI_TOOL_LIMIT} per request")
    ):
        render_tools(catalog, "openai")
    assert len(render_tools(catalog, "anthropic")) == 590  # no documented limit there


def test_a_profile_over_its_clients_tool_limit_goes_to_search_mode_with_the_reason(shared_data: Path) -> None:
    catalog = ToolCatalog.from_snapshot(shared_data / "catalogs")
    settings = Settings(
        mcp={"tool_search": {"threshold_tokens": 10**7}},  # so the token rule alone would send every tool
        agents={
            "codex": AgentProfile(command=["codex", "exec", "{task}"]),
            "claude": AgentProfile(command=["claude", "-p", "{task}"]),
            "capped": AgentProfile(tool_search={"max_tools": 50}),
        },
    )
    planner = SpawnPlanner(settings)
    codex = planner.plan("t", "codex", catalog, record=False)
    assert codex.mode == "search" and codex.reason.startswith("590 tools > max_tools 100")
    assert planner.plan("t", "claude", catalog, record=False).mode == "full"
    assert planner.plan("t", "capped", catalog, record=False).reason.startswith("590 tools > max_tools 50")
    small = ToolCatalog(list(catalog)[:60])
    assert planner.plan("t", "codex", small, record=False).mode == "full"  # within the limit: every tool


def test_the_client_kind_comes_from_the_profile_or_its_command() -> None:
    assert client_kind(AgentProfile(command=["/usr/local/bin/claude", "-p"])) == "claude-code"
    assert client_kind(AgentProfile(command=["codex", "exec"])) == "codex"
    assert client_kind(AgentProfile(command=["my-agent"])) == "api"
    assert client_kind(AgentProfile(client="codex", command=["wrapper.sh"])) == "codex"
    assert client_kind(AgentProfile()) == "api"


def test_gateway_server_name_is_checked_where_it_is_set() -> None:
    with pytest.raises(ValueError, match="server_name"):
        Settings(gateway={"server_name": "my__gateway"})  # `__` would break the clients' split
    with pytest.raises(ValueError, match="server_name"):
        Settings(gateway={"server_name": "g" * 25})


def test_a_command_template_may_name_the_gateway() -> None:
    argv = fill_command(
        ["codex", "-c", 'mcp_servers.{server_name}.url="{mcp_url}"'],
        {
            "task": "t",
            "mcp_config": "c",
            "mcp_url": "http://h/mcp",
            "tools_prompt": "",
            "prompt_file": "f",
            "server_name": "gw",
        },
    )
    assert argv == ["codex", "-c", 'mcp_servers.gw.url="http://h/mcp"']


# --------------------------------------------------------------------------- through the gateway


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, MCPManager]]:
    settings = Settings(
        mcp={
            "servers": {"features": stdio_server_config("features.py"), "tasks": stdio_server_config("tasks.py")},
            "cache_dir": tmp_path_factory.mktemp("cache"),
            "tool_search": {"ranking": "lexical"},
        },
        agents={
            "claude": AgentProfile(command=["claude", "-p", "{task}"]),
            "loop": AgentProfile(client="api"),
            "searcher": AgentProfile(client="claude-code", tool_search={"threshold_tokens": 0}),
            "narrow": AgentProfile(client="api", allow=["features__total"]),
            "nohello": AgentProfile(client="api", deny=["features__note-hello", "features__greeting"]),
        },
        gateway={"server_name": "gw"},
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0):
            yield gateway, manager
        gateway.close()


@contextlib.asynccontextmanager
async def spawn_client(gateway: Gateway, agent: str, **options: Any) -> AsyncIterator[Client]:
    """An MCP client on a new spawn's endpoint over streamable HTTP, as an agent CLI connects."""
    handle = await gateway.run_sync(lambda: gateway.open_spawn("check the client features", agent))
    headers = {"Authorization": f"Bearer {handle.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(handle.url, http_client=http), **options) as client,
    ):
        yield client
    await gateway.run_sync(gateway.close_spawn, handle.id)


def _text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_claude_code_profile_is_listed_names_that_fit_after_its_prefix(
    live: tuple[Gateway, MCPManager],
) -> None:
    gateway, _ = live
    async with spawn_client(gateway, "claude") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert all(MODEL_NAME.fullmatch("mcp__gw__" + name) for name in names)
        (short,) = [name for name in names if name.startswith("features__summarize")]
        assert len(short) <= 64 - len("mcp__gw__") and short != f"features__{LONG_TOOL}"
        assert _text(await client.call_tool(short, {})) == "quiet week"  # the short name routes back
    async with spawn_client(gateway, "loop") as client:  # an API loop adds no prefix: the qualified name
        assert f"features__{LONG_TOOL}" in [tool.name for tool in (await client.list_tools()).tools]


async def test_the_gateway_goes_by_its_configured_server_name(live: tuple[Gateway, MCPManager]) -> None:
    gateway, _ = live
    handle = await gateway.run_sync(lambda: gateway.open_spawn("named", "claude"))
    assert list(handle.mcp_config()["mcpServers"]) == ["gw"]
    headers = {"Authorization": f"Bearer {handle.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(handle.url, http_client=http)) as client,
    ):
        assert client.server_info.name == "gw"
    await gateway.run_sync(gateway.close_spawn, handle.id)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_and_log_messages_reach_the_caller(live: tuple[Gateway, MCPManager], mode: str) -> None:
    """Both protocol eras: 2026-07-28 opts in to logs per request (`log_level`), older clients with
    logging/setLevel; progress follows the caller's progress token either way."""
    gateway, _ = live
    logs: list[types.LoggingMessageNotificationParams] = []
    marked = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)
        if params.data == f"marker-{mode}":
            marked.set()

    options: dict[str, Any] = {"mode": mode, "logging_callback": on_log}
    if mode == "auto":
        options["log_level"] = "info"
    async with spawn_client(gateway, "claude", **options) as client:
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level("info")
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        counted = await client.call_tool("features__count", {"steps": 3}, progress_callback=on_progress)
        assert _text(counted) == "counted 3"
        assert seen == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]
        assert _text(await client.call_tool("features__note", {"text": f"marker-{mode}"})) == "logged"
        with anyio.fail_after(EVENT_S):
            await marked.wait()
        assert [entry.level for entry in logs if entry.data == f"marker-{mode}"] == ["info"]


async def test_an_argument_sent_as_a_header_must_agree_with_the_body(live: tuple[Gateway, MCPManager]) -> None:
    """2026-07-28's `x-mcp-header`: the annotation reaches the client, whose SDK then sends the argument as
    the header `Mcp-Param-Region` too; the gateway refuses a call whose header disagrees with its body,
    checked against the schema this caller was listed (`GatewayHandlers.input_schema`)."""
    gateway, _ = live
    tampering = False

    async def tamper(request: httpx2.Request) -> None:
        if tampering and "mcp-param-region" in request.headers:
            request.headers["Mcp-Param-Region"] = "elsewhere"

    handle = await gateway.run_sync(lambda: gateway.open_spawn("regions", "loop"))
    headers = {"Authorization": f"Bearer {handle.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, event_hooks={"request": [tamper]}) as http,
        Client(streamable_http_client(handle.url, http_client=http)) as client,
    ):
        (tool,) = [tool for tool in (await client.list_tools()).tools if tool.name == "features__in_region"]
        assert tool.input_schema["properties"]["region"]["x-mcp-header"] == "Region"
        assert _text(await client.call_tool("features__in_region", {"region": "north"})) == "in north"
        tampering = True
        with pytest.raises(Exception, match="Mcp-Param-Region"):
            await client.call_tool("features__in_region", {"region": "north"})
    await gateway.run_sync(gateway.close_spawn, handle.id)


async def test_a_resource_link_a_tool_returned_reads_back_through_the_gateway(live: tuple[Gateway, MCPManager]) -> None:
    gateway, _ = live
    async with spawn_client(gateway, "searcher") as client:  # search mode: the tool goes through call_tool
        linked = await client.call_tool("call_tool", {"name": "features__link", "arguments": {"name": "hello"}})
        (link,) = [block for block in linked.content if isinstance(block, types.ResourceLink)]
        read = await client.read_resource(str(link.uri))
        assert [item.text for item in read.contents] == ["Note hello from the features server."]  # type: ignore[union-attr]
        templated = await client.read_resource("features://notes/other")  # matched by the server's template
        assert templated.contents[0].text == "Note other from the features server."  # type: ignore[union-attr]
        with pytest.raises(Exception, match="not found"):
            await client.read_resource("nowhere://nothing")


async def test_resources_and_prompts_are_listed_namespaced_like_tools(live: tuple[Gateway, MCPManager]) -> None:
    gateway, _ = live
    async with spawn_client(gateway, "loop") as client:
        resources = (await client.list_resources()).resources
        assert [(r.name, str(r.uri)) for r in resources] == [("features__note-hello", "features://notes/hello")]
        templates = (await client.list_resource_templates()).resource_templates
        assert [(t.name, t.uri_template) for t in templates] == [("features__note", "features://notes/{name}")]
        prompts = (await client.list_prompts()).prompts
        assert [prompt.name for prompt in prompts] == ["features__greeting"]
        got = await client.get_prompt("features__greeting", {"name": "Ada"})
        assert [message.content.text for message in got.messages] == ["Please greet Ada warmly."]  # type: ignore[union-attr]


async def test_resources_and_prompts_follow_the_profiles_allow_and_deny(live: tuple[Gateway, MCPManager]) -> None:
    """Found by red-teaming: a profile allowed one tool could list and read every resource and prompt of
    every server. A server's resources and prompts go only to profiles that open the whole server
    (`ProfileFilter.opens`), and each name is held to allow/deny like a tool's."""
    gateway, _ = live
    async with spawn_client(gateway, "narrow") as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["features__total"]
        assert (await client.list_resources()).resources == []
        assert (await client.list_resource_templates()).resource_templates == []
        assert (await client.list_prompts()).prompts == []
        with pytest.raises(Exception, match="not found"):
            await client.read_resource("features://notes/secret")
        with pytest.raises(Exception, match="unknown prompt"):
            await client.get_prompt("features__greeting", {"name": "Ada"})
    async with spawn_client(gateway, "nohello") as client:
        assert (await client.list_resources()).resources == []
        assert [t.name for t in (await client.list_resource_templates()).resource_templates] == ["features__note"]
        assert (await client.list_prompts()).prompts == []
        with pytest.raises(Exception, match="unknown prompt"):
            await client.get_prompt("features__greeting", {"name": "Ada"})


async def test_an_error_result_carries_nothing_an_output_schema_could_reject(live: tuple[Gateway, MCPManager]) -> None:
    """`features__total` declares an output schema ({"result": integer}). TypeScript SDK v1 and MCP
    Inspector validate structuredContent against it even on errors (-32602 before this fix)."""
    gateway, _ = live
    async with spawn_client(gateway, "claude") as client:
        (tool,) = [tool for tool in (await client.list_tools()).tools if tool.name == "features__total"]
        assert tool.output_schema is not None
        wrong = await client.call_tool("features__total", {"a": None})
        assert wrong.is_error and wrong.structured_content is None
        assert (wrong.meta or {}).get("orchestrator/error") == "invalid_arguments"
        assert "null is not of type" in _text(wrong) and "None" not in _text(wrong)
        unknown = await client.call_tool("features__totl", {})
        assert "Closest names: features__total" in _text(unknown) and "tool_search" not in _text(unknown)  # full mode


async def test_a_result_does_not_name_the_upstream_server(live: tuple[Gateway, MCPManager]) -> None:
    gateway, manager = live
    direct = await manager.call_tool("features", "total", {"a": 1, "b": 2})
    assert direct.meta and direct.meta["io.modelcontextprotocol/serverInfo"]["name"] == "features"
    for mode in ("auto", "legacy"):
        async with spawn_client(gateway, "claude", mode=mode) as client:
            result = await client.call_tool("features__total", {"a": 1, "b": 2})
            info = (result.meta or {}).get("io.modelcontextprotocol/serverInfo")
            assert info is None or info["name"] == "gw", (mode, result.meta)  # the gateway's own stamp at most


async def test_a_tool_that_only_runs_as_a_task_is_hidden_with_its_reason(live: tuple[Gateway, MCPManager]) -> None:
    gateway, manager = live
    (status,) = [s for s in manager.status() if s.name == "tasks"]
    assert [(d.name, d.reason) for d in status.dropped_tools] == [
        (
            "background",
            'execution.taskSupport is "required": it only runs as an MCP task, which orchestrator does not run',
        )
    ]
    async with spawn_client(gateway, "loop") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "tasks__quick" in names and "tasks__background" not in names
        assert _text(await client.call_tool("tasks__quick", {"text": "x"})) == "quick: x"


# --------------------------------------------------------------------------- answer at once


@contextlib.contextmanager
def _gated_server(tmp_path: Path) -> Iterator[tuple[ServerConfig, Path]]:
    """basic.py behind a gate: it starts only once the gate file is removed (a server that comes up late)."""
    gate = tmp_path / "gate"
    gate.touch()
    script = f'while [ -e "{gate}" ]; do sleep 0.05; done; exec "{sys.executable}" "{server_script("basic.py")}"'
    yield ServerConfig(command="sh", args=["-c", script], startup_timeout_s=START_S), gate
    gate.unlink(missing_ok=True)


async def test_stdio_serve_answers_before_its_servers_are_up_and_announces_them(tmp_path: Path) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with _gated_server(tmp_path) as (late, gate):
        config = tmp_path / "bernstein.yaml"
        config.write_text(
            json.dumps(
                {"mcp": {"servers": {"late": late.model_dump(mode="json")}, "cache_dir": str(tmp_path / "cache")}}
            )
        )
        orchestrator = Path(sys.executable).with_name("orchestrator")
        params = StdioServerParameters(
            command=str(orchestrator),
            args=["--config", str(config), "serve", "--transport", "stdio"],
            env=dict(os.environ),
        )
        with anyio.fail_after(START_S):
            async with Client(params, mode="legacy", message_handler=on_message) as client:
                assert (await client.list_tools()).tools == []  # answered while the server waits at its gate
                gate.unlink()
                await changed.wait()
                names = [tool.name for tool in (await client.list_tools()).tools]
                assert "late__echo" in names
                assert _text(await client.call_tool("late__echo", {"text": "up"})) == "up"


async def test_http_gateway_answers_before_its_servers_are_up(tmp_path: Path) -> None:
    with _gated_server(tmp_path) as (late, gate):
        settings = Settings(mcp={"servers": {"late": late}, "cache_dir": tmp_path / "cache"})
        with anyio.fail_after(START_S):
            async with MCPManager(settings, wait=False) as manager:
                gateway = Gateway(settings, manager)
                async with gateway.running("127.0.0.1", 0):
                    async with (
                        spawn_client(gateway, "default") as client,
                        client.listen(tools_list_changed=True) as events,
                    ):
                        assert (await client.list_tools()).tools == []
                        gate.unlink()
                        async for _event in events:
                            break
                        assert "late__add" in [tool.name for tool in (await client.list_tools()).tools]
                gateway.close()


def test_a_tool_prefix_too_long_for_any_name_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings(
        mcp={"servers": {}, "cache_dir": tmp_path},
        agents={"odd": AgentProfile(tool_prefix="mcp__{server}__" + "x" * 20, command=["odd"])},
        gateway={"server_name": "s" * 24},  # the prefix grows to 51 characters: 13 left for names
    )
    manager = MCPManager(settings)
    with pytest.raises(ConfigError, match=r"agents\.odd: its client's tool prefix"):
        Gateway(settings, manager, agent="odd")


def test_resource_templates_match_uris_without_backtracking_blowups() -> None:
    """Found by red-teaming: a template's regex backtracked (cubic for `{+a}{+b}{+c}.json`, 4 KB: 15 s;
    quadratic for `{city}-{date}`), run on the event loop on URIs up to 4 MiB: one resources/read froze
    every spawn. Side-by-side variables now match as one, and URIs past MATCHED_URI_CHARS are not matched."""
    assert _template_pattern("{+a}{+b}{+c}.json").pattern == r".+\.json"
    assert _template_pattern("x://{a}{b}/{+c}").fullmatch("x://ab/c/d")
    assert not _template_pattern("weather://{city}-{date}/forecast").fullmatch("weather://porto/forecast")
    started = time.perf_counter()
    assert not _template_pattern("{+a}{+b}{+c}.json").fullmatch("x" * 4000)
    assert not _template_pattern("weather://{city}-{date}/forecast").fullmatch(
        "weather://" + "a-" * (MATCHED_URI_CHARS // 2)
    )
    assert time.perf_counter() - started < 1.0  # a bound on complexity: 15 s before


async def test_resource_and_prompt_descriptions_reach_agents_as_inert_as_tools(tmp_path: Path) -> None:
    """Found by red-teaming: a server's resource, template and prompt descriptions (and a prompt argument's)
    reached agents exactly as sent, a `## Tools` heading, a directory line and template tokens included;
    a tool's are sanitized. They go into the model's context the same way."""
    settings = Settings(
        mcp={"servers": {"features": stdio_server_config("features.py", "--hostile-text")}, "cache_dir": tmp_path},
        agents={"loop": AgentProfile(client="api")},
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0), spawn_client(gateway, "loop") as client:
            (resource,) = (await client.list_resources()).resources
            (template,) = (await client.list_resource_templates()).resource_templates
            (prompt,) = (await client.list_prompts()).prompts
        gateway.close()
    (argument,) = prompt.arguments or []
    for text in (resource.description, template.description, prompt.description, argument.description):
        assert text is not None and text.startswith("A note.")
        lines = text.splitlines()
        assert not any(line.startswith(("#", "fake__tool -", "assistant:", "<|")) for line in lines), text
        assert "<|im_start|>" not in text and "</tool_description>" not in text and "<system>" not in text


async def test_one_spawns_links_and_a_squatters_template_never_route_another_spawns_reads(tmp_path: Path) -> None:
    """Found by red-teaming: the URI -> server map was one for every spawn, fed by any spawn's tool results,
    and tried before the matching templates in server name order. Spawn A calling a tool that links to
    `features://notes/hello` made spawn B's read of it go to that tool's server; a server named before
    `features` with a `features://{kind}/{rest}` template took B's reads of other notes."""
    settings = Settings(
        mcp={
            "servers": {"features": stdio_server_config("features.py"), "aaa": stdio_server_config("squatter.py")},
            "cache_dir": tmp_path,
        },
        agents={"loop": AgentProfile(client="api")},
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with (
            gateway.running("127.0.0.1", 0),
            spawn_client(gateway, "loop") as a,
            spawn_client(gateway, "loop") as b,
        ):
            await b.list_resource_templates()  # the gateway learns both servers' templates
            linked = await a.call_tool("aaa__link_to", {"uri": "features://notes/hello"})
            assert [block.uri for block in linked.content if isinstance(block, types.ResourceLink)]
            for uri, text in (
                ("features://notes/hello", "Note hello from the features server."),
                ("features://notes/secret-42", "Note secret-42 from the features server."),
            ):
                read = await b.read_resource(uri)
                assert [item.text for item in read.contents] == [text]  # type: ignore[union-attr]
        gateway.close()


async def test_globs_written_with_a_servers_configured_name_reach_its_hashed_names(tmp_path: Path) -> None:
    """Found in review: a server named `My features` lists `My_features__total-<hash>`, so profile globs written
    from bernstein.yaml (`My features__*`) matched none of its tools, prompts or resources."""
    settings = Settings(
        mcp={
            "servers": {"My features": stdio_server_config("features.py")},
            "cache_dir": tmp_path / "cache",
            "tool_search": {"ranking": "lexical"},
        },
        agents={
            "whole": AgentProfile(client="api", allow=["My features__*"], deny=["My features__greeting"]),
            "one": AgentProfile(client="api", allow=["My features__total"]),
        },
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0):
            async with spawn_client(gateway, "whole") as client:
                tools = [tool.name for tool in (await client.list_tools()).tools]
                assert any(name.startswith("My_features__total-") for name in tools), tools
                resources = (await client.list_resources()).resources
                assert [str(resource.uri) for resource in resources] == ["features://notes/hello"]
                assert (await client.list_prompts()).prompts == []  # denied by its configured name
            async with spawn_client(gateway, "one") as client:
                (tool,) = (await client.list_tools()).tools
                assert tool.name.startswith("My_features__total-")
                assert (await client.list_resources()).resources == []  # one tool does not open the server
        gateway.close()
