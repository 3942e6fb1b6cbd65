"""The client named in the MCP handshake gets its own name budget and tool limit, however it was started.

Claude Code sends `clientInfo.name` `claude-code`, Codex `codex-mcp-client` (checked with the pinned CLIs
of tests/interop). A profile that does not name its client (its command a wrapper script, `npx`, or a path
the gateway does not recognise) still gets names that fit after the client's `mcp__<server>__` prefix, and
a Codex session still stays within OpenAI's tool count. Real MCP clients (`mcp.Client` with that
`client_info`) through a running gateway, over the test servers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from orchestrator import AgentProfile, Gateway, MCPManager, Settings
from orchestrator._clients import client_from_handshake, client_kind
from orchestrator._config import ToolSearchOverrides

from .conftest import stdio_server_config

LONG = "features__summarize_repository_activity_for_the_last_week"
CLAUDE_PREFIX = "mcp__orchestrator__"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def _client(url: str, token: str, name: str | None) -> AsyncIterator[Client]:
    info = types.Implementation(name=name, version="1") if name else None
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), client_info=info) as client,
    ):
        yield client


def test_the_handshake_names_and_the_program_names_are_recognised() -> None:
    assert client_from_handshake("claude-code") == "claude-code"
    assert client_from_handshake("codex-mcp-client") == "codex"
    assert client_from_handshake("some-other-client") is None and client_from_handshake(None) is None
    assert client_kind(AgentProfile(command=["/opt/npm/bin/claude.exe", "-p"])) == "claude-code"
    assert client_kind(AgentProfile(command=["./run-claude.sh"])) == "api"  # known only from its handshake


@pytest.mark.anyio
async def test_a_client_started_through_a_wrapper_gets_names_that_fit_after_its_prefix(tmp_path: Path) -> None:
    """A profile with no `client:` whose command is a wrapper: the profile alone gives 64-character names
    (an API loop's); Claude Code's handshake gets them cut to 64 - len('mcp__orchestrator__') and calls by
    the short name reach the tool. A client with no known name keeps the profile's names."""
    settings = Settings(
        mcp={"servers": {"features": stdio_server_config("features.py")}, "cache_dir": tmp_path},
        agents={
            "wrapped": AgentProfile(
                command=["./run-claude.sh", "{task}"], tool_search=ToolSearchOverrides(threshold_tokens=1_000_000)
            )
        },
    )
    with anyio.fail_after(90):
        async with MCPManager(settings) as manager:
            gateway = Gateway(settings, manager)
            async with gateway.running("127.0.0.1", 0):
                spawn = await gateway.run_sync(gateway.open_spawn, "summarize", "wrapped")
                async with _client(spawn.url, spawn.token, "claude-code") as claude:
                    names = [tool.name for tool in (await claude.list_tools()).tools]
                    assert LONG not in names
                    assert all(len(CLAUDE_PREFIX + name) <= 64 for name in names), names
                    (short,) = [name for name in names if name.startswith("features__summarize")]
                    called = await claude.call_tool(short, {})
                    assert not called.is_error, called
                async with _client(spawn.url, spawn.token, "an-api-loop") as loop:
                    assert LONG in [tool.name for tool in (await loop.list_tools()).tools]
                stats = await gateway.run_sync(gateway.spawn_stats, spawn.id)
                assert stats["calls"] == 1
            gateway.close()


@pytest.mark.anyio
async def test_a_codex_handshake_keeps_a_large_catalog_within_openais_tool_count(tmp_path: Path) -> None:
    """130 tools in full mode for an unnamed profile; Codex's handshake sends them to search mode."""
    settings = Settings(
        mcp={"servers": {"big": stdio_server_config("basic.py", "--tools", "125")}, "cache_dir": tmp_path},
        agents={"wrapped": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=10_000_000))},
    )
    with anyio.fail_after(90):
        async with MCPManager(settings) as manager:
            gateway = Gateway(settings, manager)
            async with gateway.running("127.0.0.1", 0):
                spawn = await gateway.run_sync(gateway.open_spawn, "echo", "wrapped")
                assert spawn.plan.mode == "full" and spawn.plan.visible_tools == 130
                async with _client(spawn.url, spawn.token, "codex-mcp-client") as codex:
                    listed = [tool.name for tool in (await codex.list_tools()).tools]
                    assert listed == ["tool_search", "expand_tools", "call_tool"]
            gateway.close()
