"""The MCP gateway over real servers: both modes, per-spawn endpoints and credentials, list_changed, binding
rules. The trust boundary itself (credentials, the admin API's checks, bounds) is tests/test_gateway_security.py.

One manager for the module (the published mcp-server-time and tests/servers/changing.py over stdio) and
one gateway on 127.0.0.1:<free port>; MCP clients connect over streamable HTTP like agents do.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    AgentProfile,
    ConfigError,
    Gateway,
    GatewayAuthError,
    GatewayClient,
    GatewaySettings,
    MCPManager,
    OrchestratorError,
    Settings,
    Telemetry,
)
from orchestrator._config import ToolSearchOverrides
from orchestrator._gateway.addresses import check_bind, is_loopback, mcp_config
from orchestrator._tokens import count_definition_tokens

from .conftest import TIME_SERVER, stdio_server_config

CHANGE_SEEN_S = 3.0
"""list_changed must reach a client promptly; generous for two busy cores (the manager's own bound is 1 s)."""
CLIENT_TIMEOUT_S = 30.0
"""Per request: the first hybrid search loads the models inside the request, seconds on a loaded machine."""

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def gateway_settings(cache_dir: Path, **gateway: Any) -> Settings:
    servers = {
        "time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC"),
        # on_change accept: tools it adds are offered at once (the default holds them until approved).
        "changing": stdio_server_config("changing.py", on_change="accept"),
    }
    agents = {
        "searcher": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0)),
        "timekeeper": AgentProfile(servers=["time"], deny=["*convert_time"]),
    }
    return Settings(mcp={"servers": servers, "cache_dir": cache_dir}, agents=agents, gateway=GatewaySettings(**gateway))


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, str]]:
    settings = gateway_settings(tmp_path_factory.mktemp("cache"))
    async with MCPManager(settings) as manager, Gateway(settings, manager) as gateway:
        async with gateway.running("127.0.0.1", 0) as base:
            yield gateway, base


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None = None, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=CLIENT_TIMEOUT_S) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


def _text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_search_mode_spawn_finds_expands_and_calls_a_tool(live: tuple[Gateway, str]) -> None:
    gateway, _ = live
    handle = gateway.open_spawn("what time is it in UTC", "searcher")
    assert handle.plan.mode == "search"
    async with connect(handle.url, handle.token) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        assert listed == ["tool_search", "expand_tools", "call_tool"]
        found = (await client.call_tool("tool_search", {"query": "current time timezone"})).structured_content
        assert found["outcome"] == "hit" and found["hits"][0]["name"] == "time__get_current_time"
        expanded = (await client.call_tool("expand_tools", {"names": ["time__get_current_time"]})).structured_content
        assert "timezone" in expanded["tools"][0]["input_schema"]["properties"]
        result = await client.call_tool(
            "call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
        )
        assert not result.is_error and json.loads(_text(result))["timezone"] == "UTC"
    stats = gateway.close_spawn(handle.id)
    assert (stats["searches"], stats["expands"], stats["calls"], stats["mode"]) == (1, 1, 1, "search")


async def test_full_mode_proxies_every_visible_tool_under_its_qualified_name(live: tuple[Gateway, str]) -> None:
    gateway, _ = live
    handle = gateway.open_spawn("time task", "timekeeper")
    assert handle.plan.mode == "full"
    async with connect(handle.url, handle.token) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert list(tools) == ["time__get_current_time"]  # other server and denied tool are hidden
        result = await client.call_tool("time__get_current_time", {"timezone": "Europe/Paris"})
        assert json.loads(_text(result))["timezone"] == "Europe/Paris"
        hidden = await client.call_tool("time__convert_time", {})
        assert hidden.is_error and "not available to agent 'timekeeper'" in _text(hidden)
        wrong = await client.call_tool("time__get_current_time", {"timezone": 7})
        assert wrong.is_error and "at 'timezone': 7 is not of type" in _text(wrong)
    gateway.close_spawn(handle.id)


async def test_the_gateway_records_each_servers_catalog_size_once_per_catalog_version(
    live: tuple[Gateway, str], telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    gateway, _ = live
    fresh = Gateway(gateway.settings, gateway.manager, telemetry=telemetry)
    try:
        catalog = fresh.catalog()
        fresh.catalog()  # unchanged version: no second recording needed, values stay
        data = reader.get_metrics_data()
        assert data is not None
        gauges = {
            (metric.name, dict(point.attributes)["server"]): point.value
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name in ("mcp_catalog_tools", "mcp_catalog_tokens")
            for point in metric.data.data_points
        }
        time_entries = [entry for entry in catalog if entry.server == "time"]
        expected_tokens = sum(
            count_definition_tokens(entry.definition(), gateway.settings.mcp.tool_search.tokenizer)
            for entry in time_entries
        )
        assert gauges[("mcp_catalog_tools", "time")] == len(time_entries) == 2
        assert gauges[("mcp_catalog_tokens", "time")] == expected_tokens > 0
        assert ("mcp_catalog_tools", "changing") in gauges
    finally:
        fresh.close()


async def test_a_later_spawn_of_the_same_task_gets_the_tools_it_called_pinned(live: tuple[Gateway, str]) -> None:
    gateway, _ = live
    first = gateway.open_spawn("report the time twice", "searcher")
    async with connect(first.url, first.token) as client:
        await client.call_tool("call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})
    gateway.close_spawn(first.id)
    second = gateway.open_spawn("report the time twice", "searcher")
    assert second.task_id == first.task_id and "time__get_current_time" in second.plan.pinned
    async with connect(second.url, second.token) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
    assert "time__get_current_time" in listed and "tool_search" in listed
    gateway.close_spawn(second.id)


async def test_a_spawn_endpoint_needs_its_own_token_and_ends_with_the_spawn(live: tuple[Gateway, str]) -> None:
    gateway, _ = live
    one, other = gateway.open_spawn("a", "searcher"), gateway.open_spawn("b", "searcher")
    assert await _status(one.url, None) == 401
    assert await _status(one.url, other.token) == 401
    gateway.close_spawn(one.id)
    assert await _status(one.url, one.token) == 404
    gateway.close_spawn(other.id)


async def test_spawns_are_opened_and_closed_over_http_as_orchestrator_spawn_does(live: tuple[Gateway, str]) -> None:
    gateway, base = live
    secret = gateway.credentials.admin_secret
    async with GatewayClient(base, secret) as client:
        health = await client.health()
        assert health is not None and {s["name"]: s["state"] for s in health["servers"]} == {
            "changing": "ready",
            "time": "ready",
        }
        assert health["workers"]["threads"] == GatewaySettings().workers
        info = await client.open_spawn("http task", "searcher")
        assert info["url"] == f"{base}/spawn/{info['id']}/mcp"
        assert info["mcp_config"] == mcp_config(info["url"], info["token"])
        assert info["plan"]["mode"] == "search" and len(info["plan"]["fingerprint"]) == 64
        closed = await client.close_spawn(info["id"])
        assert closed["calls"] == 0
        with pytest.raises(OrchestratorError, match=rf"DELETE /spawns/{info['id']} failed: 404 gateway: no open spawn"):
            await client.close_spawn(info["id"])
    once = GatewayClient(base, secret)  # outside `async with`: each call opens and closes its own connection
    assert (await once.health() or {}).get("status") == "ok"
    with pytest.raises(OrchestratorError, match="POST /spawns failed: 400 unknown agent profile 'nobody'"):
        await once.open_spawn("http task", "nobody")
    assert await GatewayClient("http://127.0.0.1:9", secret).health() is None


async def test_list_changed_reaches_connected_clients_in_both_protocol_eras(live: tuple[Gateway, str]) -> None:
    _, base = live
    legacy_heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            legacy_heard.set()

    secret = live[0].credentials.admin_secret
    async with (
        connect(f"{base}/mcp", secret) as modern,
        connect(f"{base}/mcp", secret, mode="legacy", message_handler=on_message) as legacy,
    ):
        await legacy.list_tools()
        async with modern.listen(tools_list_changed=True) as events:
            added = await modern.call_tool("changing__add_tool", {"name": "fresh_tool"})
            assert not added.is_error
            with anyio.fail_after(CHANGE_SEEN_S):
                async for _event in events:
                    break
                await legacy_heard.wait()
        names = [tool.name for tool in (await modern.list_tools()).tools]
        assert "changing__fresh_tool" in names
        assert "changing__fresh_tool" in [tool.name for tool in (await legacy.list_tools()).tools]


async def test_a_gateway_token_is_required_on_every_endpoint(live: tuple[Gateway, str], tmp_path: Path) -> None:
    gateway, _ = live
    guarded = Gateway(gateway_settings(tmp_path, token="s3cret"), gateway.manager)
    assert guarded.credentials.admin_secret == "s3cret" and not guarded.credentials.generated
    async with guarded.running("127.0.0.1", 0) as base:
        assert await _status(f"{base}/mcp", None) == 401
        assert await _status(f"{base}/health", "wrong") == 401
        with pytest.raises(GatewayAuthError, match="did not prove it holds the gateway's secret"):
            await GatewayClient(base, "wrong").health()
        assert (await GatewayClient(base, "s3cret").health())["status"] == "ok"
        async with connect(f"{base}/mcp", "s3cret") as client:
            assert "time__get_current_time" in [tool.name for tool in (await client.list_tools()).tools]
    guarded.close()


def test_binding_beyond_loopback_needs_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "token")
    with pytest.raises(
        ConfigError, match=re.escape("gateway.host: '0.0.0.0' is not a loopback address; set gateway.token")
    ):
        check_bind("0.0.0.0", None)


async def _status(url: str, token: str | None) -> int:
    """HTTP status of a plain GET to an MCP endpoint (refused before the MCP transport sees it)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers) as http:
        return (await http.get(url)).status_code
