"""Learning from use through a real gateway: spawns' searches and successful calls become traces in the
store, later spawns' searches rank with them, and every search-mode call is counted by the called tool's
rank in the spawn's latest search. The published mcp-server-time over stdio; MCP clients over HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    AgentProfile,
    Gateway,
    MCPManager,
    MetaTools,
    ServerConfig,
    Settings,
    Telemetry,
    ToolSearchEngine,
    ToolSearchSettings,
    TraceRecorder,
    TraceStore,
)
from orchestrator._config import ToolSearchOverrides
from orchestrator._store import MemoryStore
from orchestrator._telemetry import SEARCH_CALL_RANK

from .conftest import TIME_SERVER, stdio_server_config

pytestmark = pytest.mark.anyio

REQUEST = "clock reading for a meeting, please"
"""Shares no word with mcp-server-time's tools: a miss until two spawns called get_current_time after it."""
TOOL = "time__get_current_time"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPManager]:
    time_server = stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")
    settings = Settings(mcp={"servers": {"time": time_server}, "cache_dir": tmp_path_factory.mktemp("cache")})
    async with MCPManager(settings) as live:
        yield live


def learning_settings(manager: MCPManager) -> Settings:
    return Settings(
        mcp={
            "servers": {"time": ServerConfig(command="unused")},
            "tool_search": {"ranking": "lexical", "traces": {"refresh_s": 0}},
        },
        agents={"searcher": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))},
    )


@contextlib.asynccontextmanager
async def spawn_client(gateway: Gateway, task: str) -> AsyncIterator[tuple[str, Client]]:
    handle = await gateway.run_sync(gateway.open_spawn, task, "searcher")
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {handle.token}"}) as http,
        Client(streamable_http_client(handle.url, http_client=http)) as client,
    ):
        yield handle.id, client
    await gateway.run_sync(gateway.close_spawn, handle.id)


async def search(client: Client, query: str) -> list[str]:
    found = (await client.call_tool("tool_search", {"query": query})).structured_content
    assert found is not None
    return [hit["name"] for hit in found["hits"]]


async def call(client: Client) -> None:
    result = await client.call_tool("call_tool", {"name": TOOL, "arguments": {"timezone": "UTC"}})
    assert not result.is_error and json.loads(" ".join(getattr(b, "text", "") for b in result.content))


def ranks(reader: InMemoryMetricReader) -> dict[str, float]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        str(dict(point.attributes or {})["rank"]): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == SEARCH_CALL_RANK
        for point in metric.data.data_points
        if point.value
    }


async def test_two_spawns_teach_a_third_and_every_call_is_counted_by_rank(
    manager: MCPManager, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    store = MemoryStore()
    async with Gateway(learning_settings(manager), manager, store=store, telemetry=telemetry) as gateway:
        async with gateway.running("127.0.0.1", 0):
            taught: list[str] = []
            for task in ("first task", "second task"):
                async with spawn_client(gateway, task) as (spawn, client):
                    assert TOOL not in await search(client, REQUEST)
                    for _ in range(3):  # a spawn counts once however often it calls
                        await call(client)
                    taught.append(spawn)
            traces = await gateway.run_sync(TraceStore(store).load)
            assert [(t.query, t.server, t.tool, t.spawn, t.rank) for t in traces] == [
                (REQUEST, "time", "get_current_time", spawn, None) for spawn in taught
            ]
            async with spawn_client(gateway, "third task") as (_spawn, client):
                assert (await search(client, REQUEST))[:1] == [TOOL]
                await call(client)
            async with spawn_client(gateway, "fourth task") as (_spawn, client):
                await call(client)  # no search first: a pinned or remembered tool
    assert ranks(reader) == {"not_found": 6, "1": 1, "unsearched": 1}


async def test_full_mode_calls_are_not_counted_and_failed_calls_teach_nothing(
    manager: MCPManager, reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    settings = learning_settings(manager).model_copy(
        update={"agents": {"searcher": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=10**6))}}
    )
    store = MemoryStore()
    async with Gateway(settings, manager, store=store, telemetry=telemetry) as gateway:
        async with gateway.running("127.0.0.1", 0), spawn_client(gateway, "full task") as (_spawn, client):
            assert await client.call_tool(TOOL, {"timezone": "UTC"})
        assert await gateway.run_sync(TraceStore(store).load) == []
    assert ranks(reader) == {}


async def test_the_gateways_own_endpoint_counts_as_one_spawn_whatever_clients_reach_it(manager: MCPManager) -> None:
    """Found by red-teaming: each client kind reaching /mcp (its own variant of the endpoint) recorded traces
    as a new spawn, so the admin endpoint alone passed `min_spawns` (docs: it counts as one spawn)."""
    store = MemoryStore()
    async with Gateway(learning_settings(manager), manager, agent="searcher", store=store) as gateway:
        async with gateway.running("127.0.0.1", 0) as base:
            for name in (None, "claude-code", "codex-mcp-client"):
                info = types.Implementation(name=name, version="1") if name else None
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {gateway.credentials.admin_secret}"}) as http,
                    Client(streamable_http_client(f"{base}/mcp", http_client=http), client_info=info) as client,
                ):
                    await search(client, f"{REQUEST} as {name}")
                    await call(client)
            traces = await gateway.run_sync(TraceStore(store).load)
    assert len(traces) == 1 and traces[0].spawn.startswith("local-")  # one spawn: one trace per tool


async def test_an_in_process_loop_learns_through_a_recorder_listener(manager: MCPManager, tmp_path: Path) -> None:
    traces = TraceStore(MemoryStore())
    recorder = TraceRecorder(traces)
    engine = ToolSearchEngine(manager.catalog(), ToolSearchSettings(ranking="lexical"))
    meta = MetaTools(engine, manager, listeners=[recorder.listener(lambda name: ("time", name.split("__", 1)[1]))])
    found = meta.tool_search("current time in a timezone").structured_content
    assert found is not None
    rank = [hit["name"] for hit in found["hits"]].index(TOOL) + 1
    bad: Any = await meta.call_tool(TOOL, {"timezone": "Not/AZone"})
    assert bad.is_error and traces.load() == []  # a tool error teaches nothing
    ok = await meta.call_tool(TOOL, {"timezone": "UTC"})
    assert not ok.is_error
    [trace] = traces.load()
    assert (trace.query, trace.tool, trace.rank) == ("current time in a timezone", "get_current_time", rank)
    assert trace.spawn.startswith("local-")


async def test_a_spawn_of_a_task_like_earlier_ones_starts_with_their_tools_pinned(
    manager: MCPManager, telemetry: Telemetry
) -> None:
    async with Gateway(learning_settings(manager), manager, store=MemoryStore(), telemetry=telemetry) as gateway:
        async with gateway.running("127.0.0.1", 0):
            for city in ("Tokyo", "Paris"):
                async with spawn_client(gateway, f"report the current time in {city} for the standup notes") as (
                    _spawn,
                    client,
                ):
                    await call(client)
                if city == "Tokyo":  # one spawn is not enough to pin anything for another task
                    handle = await gateway.run_sync(gateway.open_spawn, "report the current time in Oslo", "searcher")
                    assert handle.plan.pinned == []
                    await gateway.run_sync(gateway.close_spawn, handle.id)
            similar = await gateway.run_sync(
                gateway.open_spawn, "report the current time in Lima for the standup notes", "searcher"
            )
            assert similar.plan.pinned == [TOOL] and TOOL in [tool["name"] for tool in similar.plan.tools]
            other = await gateway.run_sync(gateway.open_spawn, "summarise the quarterly ledger entries", "searcher")
            assert other.plan.pinned == []
