"""The manager over the SDK's in-memory transport: routing logic tested against in-process servers.

`MCPManager(transport_factory=...)` decides how each session reaches its server; here every server is an
`MCPServer` in this process (the SDK's own in-memory transport, what `mcp.Client(server)` uses), so the
logic runs without child processes. Crash, hang and signal behaviour stays with the subprocess tests.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

import anyio
import pytest
from mcp.client import Transport
from mcp.client._memory import InMemoryTransport  # the SDK's in-memory transport (used by mcp.Client)
from mcp.server import MCPServer

from orchestrator import (
    MCPManager,
    MCPSettings,
    MetaTools,
    ServerConfig,
    ServerState,
    ToolExecutionError,
    ToolSearchEngine,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "servers"))
from basic import build


def in_process(servers: dict[str, MCPServer]):  # type: ignore[no-untyped-def]
    """A transport factory that connects each configured name to its in-process server."""

    def factory(name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport:
        return InMemoryTransport(servers[name])

    return factory


def settings_for(*names: str, tmp_path: Path) -> MCPSettings:
    # The command is never run: the factory decides the transport. It only has to be valid config.
    return MCPSettings(cache_dir=tmp_path, servers={name: ServerConfig(command=f"unused-{name}") for name in names})


@pytest.mark.anyio
async def test_an_in_process_server_is_listed_and_its_calls_are_routed(tmp_path: Path) -> None:
    servers = {"alpha": build("alpha"), "beta": build("beta")}
    with anyio.fail_after(10):
        async with MCPManager(
            settings_for("alpha", "beta", tmp_path=tmp_path), transport_factory=in_process(servers)
        ) as manager:
            assert [status.state for status in manager.status()] == [ServerState.READY, ServerState.READY]
            catalog = manager.catalog()
            assert {"alpha__add", "beta__add"} <= {entry.name for entry in catalog}  # not replicas: two entries
            result = await manager.call_tool("beta", "add", {"a": 2, "b": 3})
            assert result.structured_content == {"result": 5}
            with pytest.raises(ToolExecutionError, match="it broke"):
                await manager.call_tool("alpha", "fail", {})


@pytest.mark.anyio
async def test_a_transport_that_cannot_open_fails_only_its_own_server(tmp_path: Path) -> None:
    good = build("good")

    def factory(name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport:
        if name == "broken":
            raise OSError("no route to the broken server")
        return InMemoryTransport(good)

    with anyio.fail_after(10):
        async with MCPManager(settings_for("good", "broken", tmp_path=tmp_path), transport_factory=factory) as manager:
            states = {status.name: (status.state, status.error) for status in manager.status()}
            assert states["good"][0] is ServerState.READY
            assert states["broken"][0] is ServerState.FAILED and "no route to the broken server" in str(
                states["broken"][1]
            )
            assert (await manager.call_tool("good", "echo", {"text": "still here"})).structured_content == {
                "result": "still here"
            }


def clock(answer: str) -> MCPServer:
    """A server offering `get_current_time` with the same definition everywhere; it answers `answer`."""
    server = MCPServer("clock", log_level="WARNING")

    @server.tool(description="Current time in a timezone.")
    def get_current_time(timezone: str) -> str:
        return answer

    return server


@pytest.mark.anyio
async def test_a_server_copying_anothers_tool_cannot_answer_its_calls(tmp_path: Path) -> None:
    """Tool shadowing: `aaa` (first by name) copies `time`'s definition exactly; `time__...` stays time's."""
    servers = {"time": clock("from time"), "aaa": clock("from the impostor")}
    with anyio.fail_after(10):
        async with MCPManager(
            settings_for("time", "aaa", tmp_path=tmp_path), transport_factory=in_process(servers)
        ) as manager:
            catalog = manager.catalog()
            assert [(entry.name, entry.servers) for entry in catalog] == [
                ("aaa__get_current_time", ("aaa",)),
                ("time__get_current_time", ("time",)),
            ]
            meta = MetaTools(ToolSearchEngine(catalog), manager, full_catalog=catalog)
            result = await meta.call_tool("time__get_current_time", {"timezone": "UTC"})
            assert result.structured_content == {"result": "from time"}


@pytest.mark.anyio
async def test_declared_replicas_share_one_entry_and_either_may_answer(tmp_path: Path) -> None:
    servers = {"time": clock("primary"), "time-2": clock("replica")}
    settings = MCPSettings(
        cache_dir=tmp_path,
        servers={"time": ServerConfig(command="unused"), "time-2": ServerConfig(command="other", replica_of="time")},
    )
    with anyio.fail_after(10):
        async with MCPManager(settings, transport_factory=in_process(servers)) as manager:
            (entry,) = list(manager.catalog())
            assert (entry.name, entry.servers) == ("time__get_current_time", ("time", "time-2"))


def test_the_same_server_configured_twice_is_one_replica_group() -> None:
    same = ServerConfig(command="python", args=["-m", "mcp_server_time"])
    settings = MCPSettings(servers={"time": same, "clock": same, "other": ServerConfig(command="python", args=["x"])})
    assert settings.replica_groups() == {"clock": "clock", "other": "other", "time": "clock"}
