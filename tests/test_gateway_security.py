"""The gateway's trust boundary, tried from the outside as an agent, another local process or a web page would.

Default configuration (no `gateway.token`) unless a test says otherwise. One manager for the module
(the published mcp-server-time and tests/servers/basic.py with 150 extra tools, over stdio); each test
starts its own gateway on 127.0.0.1:<free port> and talks to it over real HTTP.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import stat
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from orchestrator import (
    AgentProfile,
    ConfigError,
    Credentials,
    Gateway,
    GatewayAuthError,
    GatewayClient,
    GatewaySettings,
    LoadedConfig,
    MCPManager,
    OrchestratorError,
    Settings,
)
from orchestrator._config import ToolSearchOverrides, effective_values
from orchestrator._gateway.app import MAX_SESSIONS_PER_SPAWN
from orchestrator._gateway.auth import AUDIENCE, RuntimeFile
from orchestrator._launch import spawn_agent
from orchestrator._meta_tools import NAME_ECHO_CHARS, SEARCH_LIMIT_MAX
from orchestrator._store import open_store

from .conftest import TIME_SERVER, stdio_server_config

pytestmark = pytest.mark.anyio

EXTRA_TOOLS = 150
# More tools than SEARCH_LIMIT_MAX all matching one query, so a capped limit shows in the hit count.
EXPIRY_SEEN_S = 10.0
# A one-second credential must be refused within this long (bounded wait, not a sleep).
SQUATTER_READ_S = 5.0
HIDDEN = "time__convert_time"
_CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
ALLOWED = "time__get_current_time"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def security_settings(cache_dir: Path, **gateway: Any) -> Settings:
    servers = {
        "time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC"),
        "basic": stdio_server_config("basic.py", "--tools", str(EXTRA_TOOLS)),
    }
    agents = {
        # full mode over the time server without convert_time
        "timekeeper": AgentProfile(servers=["time"], deny=["*convert_time"]),
        # the same tools in search mode
        "seeker": AgentProfile(
            servers=["time"], deny=["*convert_time"], tool_search=ToolSearchOverrides(threshold_tokens=0)
        ),
        "searcher": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0)),
    }
    # Lexical ranking: these tests are about who may see and call what, not about ranking, and loading and
    # warming the embedding model competes for the CPU with the gateway under test.
    mcp = {"servers": servers, "cache_dir": cache_dir, "tool_search": {"ranking": "lexical"}}
    return Settings(mcp=mcp, agents=agents, gateway=GatewaySettings(**gateway))


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPManager]:
    async with MCPManager(security_settings(tmp_path_factory.mktemp("cache"))) as manager:
        yield manager


@contextlib.asynccontextmanager
async def serving(manager: MCPManager, tmp_path: Path, **gateway: Any) -> AsyncIterator[tuple[Gateway, str]]:
    gateway_ = Gateway(security_settings(tmp_path / "cache", **gateway), manager)
    try:
        async with gateway_.running("127.0.0.1", 0) as base:
            yield gateway_, base
    finally:
        gateway_.close()


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


HANDSHAKE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""A handshake-era `initialize` (2025-06-18): what opens an SDK session."""


async def request(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> httpx2.Response:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(trust_env=False) as http:
        if body is not None and "content" not in kw:
            kw["content"] = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        return await http.request(method, url, headers=sent, **kw)


def status_of(port: int, raw: bytes) -> int:
    """The status a raw HTTP request (bytes no HTTP client would send) gets from 127.0.0.1:`port`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        return int(sock.makefile("rb").readline().split()[1])


def text_of(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def one_line_error(response: httpx2.Response) -> str:
    payload = response.json()
    assert set(payload) == {"error"} and "\n" not in payload["error"] and "Traceback" not in payload["error"]
    return str(payload["error"])


# --------------------------------------------------------------------------- credentials on every endpoint


async def test_without_a_token_every_endpoint_still_needs_a_credential(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        assert gateway.credentials.generated  # no gateway.token: a secret made at start
        assert (await request("GET", f"{base}/health")).status_code == 401
        assert (await request("POST", f"{base}/mcp", body={})).status_code == 401
        assert (await request("POST", f"{base}/spawns", body={"task": "t", "agent": "searcher"})).status_code == 401
        assert (await request("GET", f"{base}/spawns/abc")).status_code == 401
        assert (await request("DELETE", f"{base}/spawns/abc")).status_code == 401
        secret = gateway.credentials.admin_secret
        assert (await request("GET", f"{base}/health", token=secret)).status_code == 200


async def test_a_tool_the_profile_hides_is_out_of_reach_on_every_route(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        admin = GatewayClient(base, gateway.credentials.admin_secret)
        full = await admin.open_spawn("keep time", "timekeeper")
        search = await admin.open_spawn("keep time by searching", "seeker")
        assert full["plan"]["mode"] == "full" and search["plan"]["mode"] == "search"

        async with connect(full["url"], full["token"]) as client:  # full mode: list and direct call
            assert [tool.name for tool in (await client.list_tools()).tools] == [ALLOWED]
            hidden = await client.call_tool(HIDDEN, {})
            assert hidden.is_error and "not available to agent 'timekeeper'" in text_of(hidden)
        async with connect(search["url"], search["token"]) as client:  # search mode: search, expand, call
            found = (
                await client.call_tool("tool_search", {"query": "convert time between timezones"})
            ).structured_content
            assert HIDDEN not in [hit["name"] for hit in found["hits"]]
            expanded = await client.call_tool("expand_tools", {"names": [HIDDEN]})
            assert expanded.is_error and "not available to agent 'seeker'" in text_of(expanded)
            called = await client.call_tool("call_tool", {"name": HIDDEN, "arguments": {}})
            assert called.is_error and "not available to agent 'seeker'" in text_of(called)

        # The agent's own credential opens nothing else: not the gateway's profile, not a new spawn.
        token = full["token"]
        assert (await request("POST", f"{base}/mcp", token=token, body={})).status_code == 401
        opened = await request("POST", f"{base}/spawns", token=token, body={"task": "t", "agent": "default"})
        assert opened.status_code == 401
        assert (await request("POST", search["url"], token=token, body={})).status_code == 401  # other spawn
        # A credential naming a wider profile, signed with any other key, is refused.
        claims = jwt.decode(token, options={"verify_signature": False})
        forged = jwt.encode({**claims, "agent": "default"}, "k" * 32, algorithm="HS256")
        assert (await request("POST", full["url"], token=forged, body={})).status_code == 401
        unsigned = jwt.encode({**claims, "agent": "default"}, None, algorithm="none")
        assert (await request("POST", full["url"], token=unsigned, body={})).status_code == 401
        assert claims["aud"] == AUDIENCE and claims["agent"] == "timekeeper" and claims["sub"] == full["id"]


async def test_a_credential_names_only_pins_its_profile_may_see(manager: MCPManager, tmp_path: Path) -> None:
    """Found by red-teaming: a spawn's credential (which its agent can read) carried every tool its task's
    earlier spawns called, including one its own profile hides, called by a spawn of a wider profile."""
    async with serving(manager, tmp_path) as (gateway, _):
        wide = await gateway.run_sync(functools.partial(gateway.open_spawn, "keep time", "searcher", task_id="t-1"))
        async with connect(wide.url, wide.token) as client:
            assert not (await client.call_tool("call_tool", {"name": HIDDEN, "arguments": _CONVERT})).is_error
            assert not (
                await client.call_tool("call_tool", {"name": ALLOWED, "arguments": {"timezone": "UTC"}})
            ).is_error
        await gateway.run_sync(gateway.close_spawn, wide.id)
        narrow = await gateway.run_sync(functools.partial(gateway.open_spawn, "keep time", "timekeeper", task_id="t-1"))
        claims = jwt.decode(narrow.token, options={"verify_signature": False})
        assert claims["pins"] == [ALLOWED]


async def test_a_handshake_era_session_is_bound_to_the_credential_that_opened_it(
    manager: MCPManager, tmp_path: Path
) -> None:
    async with serving(manager, tmp_path) as (gateway, _):
        one = await gateway.run_sync(gateway.open_spawn, "first", "searcher")
        other = await gateway.run_sync(gateway.open_spawn, "second", "searcher")
        accept = {"Accept": "application/json, text/event-stream"}
        opened = await request("POST", one.url, token=one.token, body=HANDSHAKE, headers=accept)
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        follow = {**accept, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        stolen = await request("POST", other.url, token=other.token, body=listing, headers=follow)
        assert stolen.status_code == 404  # another credential cannot continue it, even on its own endpoint
        own = await request("POST", one.url, token=one.token, body=listing, headers=follow)
        assert own.status_code == 200


# --------------------------------------------------------------------------- the admin API


async def test_browsers_and_rebound_host_names_are_refused_on_every_endpoint(
    manager: MCPManager, tmp_path: Path
) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        secret = gateway.credentials.admin_secret
        body = {"task": "t", "agent": "searcher"}
        for origin in ("http://evil.example", "http://localhost:3000", "null"):
            refused = await request("POST", f"{base}/spawns", token=secret, body=body, headers={"Origin": origin})
            assert refused.status_code == 403, origin
        health = await request("GET", f"{base}/health", token=secret, headers={"Origin": "http://evil.example"})
        assert health.status_code == 403
        assert not any(name.lower().startswith("access-control-") for name in health.headers)
        plain = await request("GET", f"{base}/health", token=secret)
        assert plain.status_code == 200 and not any(n.lower().startswith("access-control-") for n in plain.headers)
        port = base.rsplit(":", 1)[1]
        for path in ("/health", "/spawns", "/mcp", "/auth/challenge"):
            rebound = await request(
                "POST", f"{base}{path}", token=secret, body=body, headers={"Host": f"evil.example:{port}"}
            )
            assert rebound.status_code == 421, path
        mcp = await request("POST", f"{base}/mcp", token=secret, body={}, headers={"Origin": "http://evil.example"})
        assert mcp.status_code == 403
        # A port of other digits than ASCII's: '²' is a digit to str.isdigit (Latin-1 byte 0xB2 on the wire).
        sent = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:\xb2\r\nConnection: close\r\nAuthorization: Bearer "
        assert (await anyio.to_thread.run_sync(status_of, int(port), sent + secret.encode() + b"\r\n\r\n")) == 421


async def test_a_spawn_is_opened_only_by_a_json_post(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        secret = gateway.credentials.admin_secret
        body = json.dumps({"task": "t", "agent": "searcher"}).encode()
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            refused = await request(
                "POST", f"{base}/spawns", token=secret, content=body, headers={"Content-Type": kind}
            )
            assert refused.status_code == 415 and "application/json" in one_line_error(refused)
        assert gateway.open_spawns == 0
        accepted = await request(
            "POST",
            f"{base}/spawns",
            token=secret,
            content=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert accepted.status_code == 201 and accepted.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[]", "must be a JSON object"),
        (b'"task"', "must be a JSON object"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 60_000, "not valid JSON"),  # nested past the parser's recursion limit, under the size cap
        (b"{}", "'task' must be a string, got missing"),
        (b'{"task": 7}', "'task' must be a string, got int"),
        (b'{"task": "   "}', "'task' must not be empty"),
        (b'{"task": "t", "agent": 5}', "'agent' must be a string, got int"),
        (b'{"task": "t", "agent": ["default"]}', "'agent' must be a string, got list"),
        (b'{"task": "t", "agent": "nobody"}', "unknown agent profile 'nobody'"),
        (b'{"task": "t", "task_id": 12}', "'task_id' must be a string"),
        (b'{"task": "t", "task_id": "has space"}', "'task_id' must be 1 to 128"),
        (b'{"task": "t", "task_id": ""}', "'task_id' must be 1 to 128"),
        (b'{"task": "t", "admin": true}', "unknown field 'admin'"),
    ],
)
async def test_every_malformed_field_is_a_one_line_400(
    manager: MCPManager, tmp_path: Path, body: bytes, says: str
) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        secret = gateway.credentials.admin_secret
        response = await request(
            "POST", f"{base}/spawns", token=secret, content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        assert says in one_line_error(response)
        challenge = await request(
            "POST", f"{base}/auth/challenge", content=body, headers={"Content-Type": "application/json"}
        )
        assert challenge.status_code == 400
        one_line_error(challenge)


async def test_a_huge_body_is_refused_before_it_is_read(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        secret = gateway.credentials.admin_secret
        limit = gateway.settings.gateway.max_body_bytes
        huge = json.dumps({"task": "x" * (limit * 16)}).encode()
        declared = await request(
            "POST", f"{base}/spawns", token=secret, content=huge, headers={"Content-Type": "application/json"}
        )
        assert declared.status_code == 413 and "gateway.max_body_bytes" in one_line_error(declared)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused once the limit is passed
            for start in range(0, len(huge), 8192):
                yield huge[start : start + 8192]

        streamed = await request(
            "POST", f"{base}/spawns", token=secret, content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert streamed.status_code == 413
        assert gateway.open_spawns == 0


async def test_open_spawns_are_capped_and_a_closed_one_frees_its_place(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path, max_open_spawns=3) as (gateway, base):
        client = GatewayClient(base, gateway.credentials.admin_secret)
        opened = [await client.open_spawn(f"task {n}", "searcher") for n in range(3)]
        with pytest.raises(OrchestratorError, match="429 gateway: 3 spawns are open"):
            await client.open_spawn("one too many", "searcher")
        await client.close_spawn(opened[0]["id"])
        assert (await client.open_spawn("now there is room", "searcher"))["id"]


async def test_a_restarted_gateway_does_not_count_the_spawns_of_its_old_key(
    manager: MCPManager, tmp_path: Path
) -> None:
    """Found by review: spawn records outlive the process in the file store `orchestrator serve` uses, and a
    gateway with no `gateway.signing_key` makes a new key at each start. A restarted gateway counted its
    predecessor's spawns (whose credentials it cannot verify) against max_open_spawns for an hour, and
    refused new ones."""

    @contextlib.asynccontextmanager
    async def on_files(**gateway: Any) -> AsyncIterator[Gateway]:
        settings = security_settings(tmp_path / "cache", max_open_spawns=2, **gateway)
        gateway_ = Gateway(settings, manager, store=open_store(settings))
        try:
            async with gateway_.running("127.0.0.1", 0):
                yield gateway_
        finally:
            gateway_.close()

    for _ in range(2):  # a gateway, then its restart over the same store
        async with on_files() as gateway:
            for n in range(2):
                await gateway.run_sync(gateway.open_spawn, f"task {n}", "searcher")
            assert gateway.open_spawns == 2
    # Replicas sharing a key share the count: the same key's spawns fill it.
    async with on_files(signing_key="s" * 32) as gateway, on_files(signing_key="s" * 32) as replica:
        await gateway.run_sync(gateway.open_spawn, "one", "searcher")
        await replica.run_sync(replica.open_spawn, "two", "searcher")
        with pytest.raises(OrchestratorError, match="2 spawns are open"):
            await replica.run_sync(replica.open_spawn, "three", "searcher")


async def test_a_spawn_credential_expires_and_its_spawn_is_dropped(manager: MCPManager, tmp_path: Path) -> None:
    settings = security_settings(tmp_path / "cache", spawn_ttl_s=3)  # long enough to connect under load
    credentials = Credentials.from_settings(settings)
    credentials.leeway_s = 0  # the replicas' clock allowance would keep it alive 5 s longer
    gateway = Gateway(settings, manager, credentials=credentials)
    try:
        async with gateway.running("127.0.0.1", 0):
            handle = await gateway.run_sync(gateway.open_spawn, "brief task", "searcher")
            async with connect(handle.url, handle.token) as client:
                assert (await client.list_tools()).tools
            with anyio.fail_after(EXPIRY_SEEN_S):
                while (response := await request("POST", handle.url, token=handle.token, body={})).status_code != 401:  # noqa: ASYNC110 (expiry announces nothing)
                    await anyio.sleep(0.1)
            assert "expired" in one_line_error(response)
            assert gateway.open_spawns == 0  # the spawn log's record expired with it
            with pytest.raises(OrchestratorError, match="no open spawn"):
                gateway.spawn_stats(handle.id)
    finally:
        gateway.close()


async def test_a_closed_spawns_credential_is_refused(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, base):
        client = GatewayClient(base, gateway.credentials.admin_secret)
        info = await client.open_spawn("short task", "searcher")
        assert (await request("POST", info["url"], token=info["token"], body={})).status_code != 401
        await client.close_spawn(info["id"])
        closed = await request("POST", info["url"], token=info["token"], body={})
        assert closed.status_code == 404 and "has ended" in one_line_error(closed)
        assert gateway.store.get(f"revoked/{info['id']}") is not None  # until the credential would expire


async def test_a_closed_spawns_credential_stays_refused_through_the_clock_leeway(
    manager: MCPManager, tmp_path: Path
) -> None:
    """Found by red-teaming: the revocation ended at the credential's expiry, but the credential verifies for
    the clock leeway after it (5 s), so a closed spawn's agent could open a new session in between."""
    settings = security_settings(tmp_path / "cache", spawn_ttl_s=2)
    gateway = Gateway(settings, manager)
    try:
        async with gateway.running("127.0.0.1", 0):
            handle = await gateway.run_sync(gateway.open_spawn, "brief task", "searcher")
            await gateway.run_sync(gateway.close_spawn, handle.id)
            await anyio.sleep(3)  # past the credential's expiry, inside the leeway
            other = await gateway.run_sync(gateway.open_spawn, "another task", "searcher")
            async with connect(other.url, other.token) as client:  # a new spawn's first request prunes revocations
                assert (await client.list_tools()).tools
            accept = {"Accept": "application/json, text/event-stream"}
            late = await request("POST", handle.url, token=handle.token, body=HANDSHAKE, headers=accept)
            assert late.status_code == 404 and "has ended" in one_line_error(late)
    finally:
        gateway.close()


async def open_stream(url: str, token: str) -> dict[str, str]:
    """A handshake-era session on a spawn endpoint, initialized: the headers that continue it."""
    accept = {"Accept": "application/json, text/event-stream"}
    opened = await request("POST", url, token=token, body=HANDSHAKE, headers=accept)
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    follow = {**accept, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await request("POST", url, token=token, body=ready, headers=follow)).status_code == 202
    return follow


async def stream_ends(url: str, token: str, follow: dict[str, str], end: Any, within: float) -> bool:
    """Whether the session's GET stream (server notifications), opened before `end()` runs, is closed by the
    gateway within `within` seconds after it."""
    headers = {**follow, "Accept": "text/event-stream", "Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(trust_env=False, timeout=None) as http,
        http.stream("GET", url, headers=headers) as stream,
    ):
        assert stream.status_code == 200
        await end()
        with anyio.move_on_after(within):
            async for _ in stream.aiter_bytes():
                pass
            return True
    return False


async def test_one_spawn_holds_at_most_its_share_of_session_slots(manager: MCPManager, tmp_path: Path) -> None:
    """Found by red-teaming: the SDK's 10,000 session slots are shared by every spawn, and one credential
    could open all of them in a loop (400 MB), so every other handshake-era client got 503."""
    async with serving(manager, tmp_path) as (gateway, _):
        greedy = await gateway.run_sync(gateway.open_spawn, "open sessions in a loop", "searcher")
        opened = [await open_stream(greedy.url, greedy.token) for _ in range(MAX_SESSIONS_PER_SPAWN + 8)]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        with anyio.fail_after(EXPIRY_SEEN_S):
            while (  # noqa: ASYNC110 (an ended session announces nothing)
                await request("POST", greedy.url, token=greedy.token, body=listing, headers=opened[7])
            ).status_code != 404:
                await anyio.sleep(0.05)
        statuses = [
            (await request("POST", greedy.url, token=greedy.token, body=listing, headers=follow)).status_code
            for follow in opened
        ]
        assert statuses == [404] * 8 + [200] * MAX_SESSIONS_PER_SPAWN  # its oldest made room, nothing else
        other = await gateway.run_sync(gateway.open_spawn, "another task", "searcher")
        assert await open_stream(other.url, other.token)


async def test_a_spawns_sessions_end_when_it_is_closed_or_expires(manager: MCPManager, tmp_path: Path) -> None:
    """Found by red-teaming: the SDK keeps a session until its client ends it or it idles for 30 minutes, and
    an open GET stream never idles. A closed or expired spawn's agent kept its stream, and every finished
    spawn whose agent did not end its session held one of the session slots all spawns share."""
    async with serving(manager, tmp_path) as (gateway, base):
        secret = gateway.credentials.admin_secret
        closed = await gateway.run_sync(gateway.open_spawn, "closed early", "searcher")
        follow = await open_stream(closed.url, closed.token)

        async def close() -> None:
            assert (await request("DELETE", f"{base}/spawns/{closed.id}", token=secret)).status_code == 200

        assert await stream_ends(closed.url, closed.token, follow, close, within=EXPIRY_SEEN_S)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        assert (await request("POST", closed.url, token=closed.token, body=listing, headers=follow)).status_code == 404

    async with serving(manager, tmp_path, spawn_ttl_s=1) as (gateway, _):
        # Never closed: the session ends with the credential (1 s, then the 5 s clock leeway).
        expiring = await gateway.run_sync(gateway.open_spawn, "left to expire", "searcher")
        follow = await open_stream(expiring.url, expiring.token)

        async def nothing() -> None:
            return None

        assert await stream_ends(expiring.url, expiring.token, follow, nothing, within=EXPIRY_SEEN_S)


# --------------------------------------------------------------------------- bounds on what agents send


async def test_search_limit_is_capped_and_unknown_long_names_come_back_cut(manager: MCPManager, tmp_path: Path) -> None:
    async with serving(manager, tmp_path) as (gateway, _):
        handle = await gateway.run_sync(gateway.open_spawn, "search a lot", "searcher")
        async with connect(handle.url, handle.token) as client:
            found = await client.call_tool("tool_search", {"query": "extra tool number", "limit": 10**9})
            assert not found.is_error and len(found.structured_content["hits"]) == SEARCH_LIMIT_MAX
            as_text = await client.call_tool("tool_search", {"query": "extra tool number", "limit": "1000"})
            assert len(as_text.structured_content["hits"]) == SEARCH_LIMIT_MAX
            long_name = "basic__" + "x" * 1_000_000
            for name, arguments in (
                ("call_tool", {"name": long_name, "arguments": {}}),
                ("expand_tools", {"names": [long_name]}),
            ):
                result = await client.call_tool(name, arguments)
                text = text_of(result)
                assert result.is_error and "(1,000,007 characters)" in text and len(text) < 4 * NAME_ECHO_CHARS + 500
        stats = await gateway.run_sync(gateway.close_spawn, handle.id)
        assert (stats["searches"], stats["errors"]) == (2, 2)


# --------------------------------------------------------------------------- the client checks who answers


class Squatter:
    """A plain socket server on a port: answers every request with 200 and a made-up proof, keeps what
    it was sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._stopping:
                conn.close()
                return
            with conn:
                conn.settimeout(SQUATTER_READ_S)
                with contextlib.suppress(OSError):
                    data = conn.recv(65536)
                    self.received.extend(data)
                    body = b'{"proof": "' + b"0" * 64 + b'", "status": "ok"}'
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )

    def close(self) -> None:
        self._stopping = True
        socket.create_connection(("127.0.0.1", self.port)).close()  # wakes accept(): closing does not
        self._thread.join(timeout=SQUATTER_READ_S)
        self.sock.close()


@pytest.fixture
def squatter() -> Iterator[Squatter]:
    server = Squatter()
    yield server
    server.close()


@pytest.fixture
def runtime_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "xdg-run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder / "orchestrator"


async def test_a_squatter_on_the_port_gets_no_secret_and_the_spawn_goes_cold(
    squatter: Squatter, runtime_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "the-gateway-admin-secret-0123456789"
    monkeypatch.setenv("MY_GATEWAY_TOKEN", secret)  # an agent must not inherit it either
    # Nor the admin secret where docs/spawning.md keeps it for Codex, nor a server's credential (found by
    # red-teaming: with GITHUB_TOKEN an agent reaches GitHub around its profile).
    monkeypatch.setenv("ORCHESTRATOR_GATEWAY_TOKEN", "another-gateways-admin-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_0123456789abcdefghij")
    probe = tmp_path / "probe.json"
    agent_code = (
        "import json, os, sys, urllib.request, urllib.error\n"
        "url = os.environ['ORCHESTRATOR_MCP_URL']; base = url.split('/spawn/')[0]\n"
        "token = os.environ['ORCHESTRATOR_MCP_TOKEN']\n"
        "def status(path, body):\n"
        "    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method='POST',\n"
        "        headers={'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json',\n"
        "                 'Accept': 'application/json, text/event-stream'})\n"
        "    try:\n"
        "        with urllib.request.urlopen(req, timeout=10) as response:\n"
        "            return response.status\n"
        "    except urllib.error.HTTPError as exc:\n"
        "        with exc:\n"
        "            return exc.code\n"
        "out = {'env': dict(os.environ), 'mcp': status('/mcp', {}), 'spawns': status('/spawns', {'task': 'x'})}\n"
        "with open(sys.argv[1], 'w') as file:\n"
        "    json.dump(out, file)\n"
    )
    settings = Settings(
        mcp={
            "servers": {
                "time": stdio_server_config(TIME_SERVER),
                "github": {
                    "transport": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                    "enabled": False,
                },
            },
            "cache_dir": tmp_path / "cache",
        },
        agents={"probe": AgentProfile(command=[sys.executable, "-c", agent_code, str(probe)], timeout_s=60)},
        gateway=GatewaySettings(port=squatter.port, token="${MY_GATEWAY_TOKEN}"),
    )
    warnings: list[str] = []
    with anyio.fail_after(120):
        summary = await spawn_agent(settings, "TOP-SECRET-TASK-TEXT", "probe", warn=warnings.append)
    assert summary.ok and summary.path == "cold"
    assert len(warnings) == 1 and "did not prove it holds the gateway's secret" in warnings[0]
    assert "\n" not in warnings[0] and "cold path" in warnings[0]
    sent = bytes(squatter.received)
    assert b"/auth/challenge" in sent  # it was asked to prove itself, and was told nothing else
    assert secret.encode() not in sent and b"TOP-SECRET-TASK-TEXT" not in sent and b"Authorization" not in sent
    # On the cold path the agent reaches its own endpoint only: not /mcp, not /spawns, no secret inherited.
    report = json.loads(probe.read_text())
    assert (report["mcp"], report["spawns"]) == (401, 401)
    assert secret not in report["env"].values() and "BERNSTEIN_GATEWAY__TOKEN" not in report["env"]
    assert "ORCHESTRATOR_GATEWAY_TOKEN" not in report["env"] and "GITHUB_TOKEN" not in report["env"]
    assert report["env"]["HOME"] == os.environ["HOME"]  # the rest of the user's environment is kept


async def test_the_client_reads_serves_runtime_file_and_still_checks_the_proof(
    squatter: Squatter, runtime_folder: Path
) -> None:
    base = f"http://127.0.0.1:{squatter.port}"
    with RuntimeFile(runtime_folder, base).written(base, "secret-from-the-runtime-file") as path:
        client = GatewayClient(base)  # no secret given: the runtime file's
        assert client.has_secret
        with pytest.raises(GatewayAuthError, match="nothing was sent to it"):
            await client.open_spawn("TASK-TEXT", "default")
    assert not path.exists()
    assert b"secret-from-the-runtime-file" not in squatter.received and b"TASK-TEXT" not in squatter.received


def test_the_runtime_file_is_the_users_alone_and_gone_after_the_block(runtime_folder: Path) -> None:
    runtime = RuntimeFile(runtime_folder, "http://127.0.0.1:8931")
    planted = runtime_folder / "elsewhere"
    runtime_folder.mkdir(mode=0o700)
    planted.write_text("not to be overwritten")
    runtime.path.symlink_to(planted)  # a planted link is replaced, never followed
    with runtime.written("http://127.0.0.1:8931", "s3cret") as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(runtime_folder.stat().st_mode) == 0o700
        record = json.loads(path.read_text())
        assert record["secret"] == "s3cret" and record["pid"] == os.getpid() and record["url"].endswith(":8931")
        assert runtime.read_secret() == "s3cret"
        path.chmod(0o644)
        assert runtime.read_secret() is None  # readable by others: its secret may be known
    assert not path.exists() and planted.read_text() == "not to be overwritten"


def test_config_show_redacts_the_signing_key_and_the_store_url() -> None:
    settings = Settings(
        gateway=GatewaySettings(token="t", signing_key="k" * 32), store={"url": "redis://:pw@127.0.0.1:6379/0"}
    )
    shown = {key: value for key, value, _ in effective_values(LoadedConfig(settings, None, "test"))}
    assert shown["gateway.signing_key"] == shown["store.url"] == shown["gateway.token"] == "***"


async def test_an_agent_that_would_outlive_its_credential_is_not_started(tmp_path: Path) -> None:
    settings = Settings(
        mcp={"cache_dir": tmp_path / "cache"},
        agents={"slow": AgentProfile(command=[sys.executable, "-c", "pass"], timeout_s=7200)},
    )
    with pytest.raises(ConfigError, match=r"agents\.slow\.timeout_s: 7200 s outlives gateway\.spawn_ttl_s \(3600 s\)"):
        await spawn_agent(settings, "long task", "slow")
