"""Faulty and hostile MCP servers (issue 14): the manager recovers, isolates the bad part, and never wedges.

Real server processes: `tests/servers/hostile.py` (raw JSON-RPC that misbehaves on request, starts in
~50 ms) and `basic.py` over streamable HTTP for the network cases. Backoffs are small so each test is
bounded; the two HTTP outage tests take a few seconds each and are marked `slow`. The recovery figures
(time to recover after the server comes back, calls lost during the outage) are printed; run with `-s`
to see them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    Circuit,
    DroppedTool,
    MCPManager,
    MCPSettings,
    ServerConfig,
    ServerError,
    ServerState,
    Telemetry,
    ToolCallTimeout,
    ToolExecutionError,
    TransportError,
)

from .conftest import _read_port, server_script, stdio_server_config
from .test_manager import _alive, _live_descendants

FAST = {"restart_backoff_s": 0.05, "restart_backoff_max_s": 0.5, "startup_timeout_s": 10.0}
"""Small backoffs keep every restart in these tests well under a second."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def hostile(*args: str, **overrides: Any) -> ServerConfig:
    return stdio_server_config("hostile.py", *args, **{**FAST, **overrides})


def settings(tmp_path: Path, **servers: ServerConfig) -> MCPSettings:
    return MCPSettings(cache_dir=tmp_path, servers=servers)


# --------------------------------------------------------------------------- tolerant reading


@pytest.mark.anyio
async def test_stray_prints_are_skipped_counted_and_logged_once_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with MCPManager(settings(tmp_path, h=hostile("--stray-print"))) as manager:
        with anyio.fail_after(10):
            for _ in range(2):
                assert (await manager.call_tool("h", "print_line", {})).content[0].text == "printed"
            assert (await manager.call_tool("h", "echo", {"text": "still here"})).content[0].text == "still here"
        status = manager.status()[0]
    assert status.state is ServerState.READY
    assert status.line_faults == {"not_json": 4}  # the banner, a log line, and one per print_line call
    skipped = [r for r in caplog.records if "skipped a stdout line that is not JSON" in r.getMessage()]
    assert len(skipped) == 1  # rate-limited: one line per reason and minute
    assert "hostile server v0.1 starting" in skipped[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no tracebacks anywhere (the SDK logged one per line)


@pytest.mark.anyio
async def test_invalid_utf8_in_an_answer_is_replaced_and_the_server_keeps_working(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile(call_timeout_s=5))) as manager:
        with anyio.fail_after(10):
            answer = await manager.call_tool("h", "bad_utf8", {})
            after = await manager.call_tool("h", "echo", {"text": "next"})
        status = manager.status()[0]
    assert answer.content[0].text == "caf\ufffd \ufffd\ufffd"
    assert after.content[0].text == "next"
    assert (status.state, status.line_faults) == (ServerState.READY, {"invalid_utf8": 1})


@pytest.mark.anyio
async def test_a_32_mb_line_does_not_delay_startup_and_an_oversized_answer_fails_only_its_call(
    tmp_path: Path,
) -> None:
    started = time.perf_counter()
    async with MCPManager(settings(tmp_path, h=hostile("--huge-line-mb", "32"))) as manager:
        up_in = time.perf_counter() - started
        assert manager.status()[0].state is ServerState.READY
        with anyio.fail_after(10):
            called = time.perf_counter()
            with pytest.raises(ToolExecutionError, match=r"longer than max_message_bytes=16777216 and was dropped"):
                await manager.call_tool("h", "huge", {"mb": 20})
            failed_in = time.perf_counter() - called
            assert (await manager.call_tool("h", "echo", {"text": "after"})).content[0].text == "after"
        status = manager.status()[0]
    print(f"\n32 MB line at startup: ready in {up_in:.2f} s; 20 MB answer failed its call in {failed_in:.2f} s")
    assert up_in < 5  # the SDK's reader took ~47 s over such a line
    assert failed_in < 5  # at once, not after call_timeout_s
    assert status.line_faults == {"too_long": 2}
    assert status.state is ServerState.READY


@pytest.mark.anyio
async def test_an_oversized_http_answer_fails_only_its_call(tmp_path: Path, basic_http_url: str) -> None:
    """Found by red-teaming: `max_message_bytes` bounded stdio only; a streamable HTTP server's answer was
    read whole whatever its size (a 315 MB result took 3.3 GB in the process serving every server)."""
    server = ServerConfig(transport="http", url=basic_http_url, max_message_bytes=65_536)
    async with MCPManager(settings(tmp_path, web=server)) as manager:
        with anyio.fail_after(20):
            with pytest.raises(ToolExecutionError, match=r"max_message_bytes=65536"):
                await manager.call_tool("web", "echo", {"text": "x" * 100_000})
            assert (await manager.call_tool("web", "echo", {"text": "after"})).content[0].text == "after"
        assert manager.status()[0].state is ServerState.READY


# --------------------------------------------------------------------------- per-tool validation


@pytest.mark.anyio
async def test_broken_tools_are_dropped_with_their_reasons_and_the_servers_other_tools_stay(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile("--broken-tools"))) as manager:
        status = manager.status()[0]
        names = [tool["name"] for tool in manager.tool_lists()["h"]]
        catalog = manager.catalog()
        assert manager.is_ready("h")  # degraded still routes calls
        with anyio.fail_after(10):
            echoed = await manager.call_tool("h", "echo", {"text": "good tools work"})
    assert status.state is ServerState.DEGRADED
    assert status.dropped_tools == (
        DroppedTool("schema_string", "inputSchema is a string, not an object"),
        DroppedTool("schema_list", "inputSchema is a list, not an object"),
        DroppedTool("schema_null", "inputSchema is null, not an object"),
        DroppedTool("#10", "name is a number (42), not a string"),
        DroppedTool("description_list", "description is a list, not a string"),
        DroppedTool(
            "ref_cycle",
            "inputSchema has a $ref cycle that never reaches a property or item: "
            "#/$defs/b -> #/$defs/b/allOf/0 -> #/$defs/a -> #/$defs/b",
        ),
    )
    assert status.error is not None and status.error.startswith("6 tool(s) dropped: schema_string (inputSchema is")
    assert names == ["echo", "wedge", "bad_utf8", "huge", "print_line", "crash", "pid", "tree"]
    assert "h__tree" in catalog  # recursion that descends into the value is a valid schema
    assert echoed.content[0].text == "good tools work"


@pytest.mark.anyio
async def test_a_re_list_of_many_broken_tools_is_read_in_linear_time(tmp_path: Path) -> None:
    """Found by red-teaming: each re-list compared the dropped tools with the last listing's as a tuple, once
    per tool: 10,000 tools with a string schema (400 KB) blocked the event loop, and every other server
    with it, for 15-17 s per `list_changed` (77 s at 20,000)."""
    async with MCPManager(settings(tmp_path, h=hostile("--broken-many", "10000", max_tools=20_000))) as manager:
        [first] = manager.status()
        assert len(first.dropped_tools) == 10_000
        started = time.monotonic()
        await manager.call_tool("h", "relist", {})
        with anyio.fail_after(120):
            while manager.status()[0].listed_at == first.listed_at:  # noqa: ASYNC110 (an unchanged re-list announces nothing)
                await anyio.sleep(0.05)
        took = time.monotonic() - started
    assert took < 5.0, f"re-list took {took:.1f} s"  # a bound on complexity (linear: well under 1 s here)


@pytest.mark.anyio
async def test_a_listing_past_max_tools_keeps_the_first_and_reads_no_further_page(tmp_path: Path) -> None:
    """A server listing more tools than `max_tools` (250 over pages of 40, the cap 100) has its first 100
    offered and callable, the rest dropped unread as one entry, and the server degraded saying so; the
    pages after the cap are not requested."""
    paged = stdio_server_config("paged.py", "--tools", "250", "--page-size", "40", max_tools=100)
    async with MCPManager(settings(tmp_path, p=paged)) as manager:
        status = manager.status()[0]
        names = [tool["name"] for tool in manager.tool_lists()["p"]]
        answered = await manager.call_tool("p", "tool_099", {"value": "kept"})
        catalog = manager.catalog()
    assert names == [f"tool_{index:03d}" for index in range(100)]
    assert "p__tool_099" in catalog and "p__tool_100" not in catalog
    assert answered.content[0].text == "tool_099: kept"
    assert status.state is ServerState.DEGRADED
    assert status.dropped_tools == (
        DroppedTool("#100+", "20 tool(s) past max_tools (100) not read, and the pages after it were not read"),
    )


@pytest.mark.anyio
async def test_one_huge_page_past_max_tools_is_cut_before_it_is_parsed(tmp_path: Path) -> None:
    """3,000 tools in one page with a cap of 1,000: 1,000 kept, the rest dropped unread."""
    async with MCPManager(settings(tmp_path, h=hostile("--many", "3000", max_tools=1_000))) as manager:
        status = manager.status()[0]
        kept = len(manager.tool_lists()["h"])
    assert kept == 1_000 and status.state is ServerState.DEGRADED
    (cut,) = [tool for tool in status.dropped_tools if tool.name == "#1000+"]
    assert re.fullmatch(r"[\d,]+ tool\(s\) past max_tools \(1,000\) not read", cut.reason)


@pytest.mark.anyio
async def test_a_150_deep_schema_is_dropped_and_the_listing_still_parses(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile("--deep", "150"))) as manager:
        status = manager.status()[0]
        names = {tool["name"] for tool in manager.tool_lists()["h"]}
    assert status.state is ServerState.DEGRADED
    assert status.dropped_tools == (
        DroppedTool("deep_schema", "inputSchema is nested more than 64 levels deep (schema_max_depth)"),
    )
    assert "non-MCP" not in str(status.error)
    assert {"echo", "huge"} <= names and "deep_schema" not in names


@pytest.mark.anyio
async def test_the_schema_limits_are_configurable(tmp_path: Path) -> None:
    tight = MCPSettings(cache_dir=tmp_path, schema_max_depth=2, servers={"h": hostile()})
    async with MCPManager(tight) as manager:
        dropped = {tool.name for tool in manager.status()[0].dropped_tools}
    assert dropped == {"echo", "huge"}  # {"type": "object", "properties": {"text": {...}}} is 3 levels


# --------------------------------------------------------------------------- the supervisor


@pytest.mark.anyio
async def test_a_crash_loop_opens_the_circuit_keeps_the_tools_and_recovers_when_the_server_comes_back(
    tmp_path: Path, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    down = tmp_path / "down"
    config = hostile("--down-while", str(down), max_restarts=2)
    async with MCPManager(settings(tmp_path, h=config), telemetry=telemetry) as manager:
        before = manager.catalog().version
        down.touch()  # from now on every start fails at once
        with (
            anyio.fail_after(5),
            pytest.raises(TransportError, match="server process exited; stderr: hostile: crashing"),
        ):
            await manager.call_tool("h", "crash", {})
        failed = await manager.wait_for_state("h", ServerState.FAILED, timeout=10)
        assert failed.error == "server process exited during startup; stderr: hostile: down"
        assert failed.restarts == 3  # the crash and two quick restarts that failed: the circuit opened
        assert failed.circuit in (Circuit.OPEN, Circuit.HALF_OPEN)
        assert failed.tools == 7 and manager.catalog().version == before  # names and plans do not flap
        assert _gauge(reader, "h") == "failed"
        with pytest.raises(
            ServerError,
            match=r"server 'h': failed: server process exited during startup; "
            r"stderr: hostile: down; (retry in \d+ s|retrying now)",
        ):
            await manager.call_tool("h", "echo", {"text": "x"})  # at once: the circuit is open

        back = time.perf_counter()
        down.unlink()
        await manager.wait_for_state("h", ServerState.READY, timeout=10)
        recovered_in = time.perf_counter() - back
        with anyio.fail_after(5):
            assert (await manager.call_tool("h", "echo", {"text": "back"})).content[0].text == "back"
        status = manager.status()[0]
    print(f"\ncrash loop: recovered {recovered_in:.2f} s after the server came back (restart_backoff_max_s=0.5)")
    assert recovered_in < 0.5 + 2  # the capped backoff plus a start
    assert (status.circuit, status.next_retry_at, status.error) == (Circuit.CLOSED, None, None)
    assert _gauge(reader, "h") == "stopped"


@pytest.mark.anyio
async def test_a_server_down_at_its_first_start_is_failed_with_its_reason_and_retried_until_it_comes_up(
    tmp_path: Path,
) -> None:
    down = tmp_path / "down"
    down.touch()
    async with MCPManager(settings(tmp_path, h=hostile("--down-while", str(down)))) as manager:
        status = manager.status()[0]
        assert status.state is ServerState.FAILED
        assert status.error == "server process exited during startup; stderr: hostile: down"
        assert status.tools == 0 and "h" not in manager.tool_lists()
        assert status.as_dict()["circuit"] in ("open", "half-open")
        down.unlink()
        await manager.wait_for_state("h", ServerState.READY, timeout=10)
        assert manager.status()[0].tools == 7


@pytest.mark.anyio
async def test_a_call_that_times_out_on_a_server_that_stopped_reading_restarts_it(tmp_path: Path) -> None:
    config = hostile(call_timeout_s=1.0, health_timeout_s=1.0)
    async with MCPManager(settings(tmp_path, h=config)) as manager:
        with anyio.fail_after(5), pytest.raises(ToolCallTimeout):
            await manager.call_tool("h", "wedge", {})
        restarting = await manager.wait_for_state("h", ServerState.RESTARTING, timeout=10)
        assert restarting.error == (
            "the connection stopped answering: a call timed out, then a health probe got no answer "
            "within health_timeout_s=1 s"
        )
        with anyio.fail_after(10):  # waits for the restart
            assert (await manager.call_tool("h", "echo", {"text": "unstuck"})).content[0].text == "unstuck"


@pytest.mark.anyio
async def test_kill_9_with_calls_in_flight_fails_them_cleanly_and_the_next_call_works(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile(call_timeout_s=30))) as manager:
        pid = int((await manager.call_tool("h", "pid", {})).content[0].text)
        errors: list[BaseException] = []

        async def stuck() -> None:
            try:
                await manager.call_tool("h", "wedge", {})
            except TransportError as exc:
                errors.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                for _ in range(3):
                    tasks.start_soon(stuck)
                await anyio.sleep(0.2)  # let the three requests reach the server
                os.kill(pid, signal.SIGKILL)
            assert [str(error) for error in errors] == ["tool 'wedge' on server 'h': server process exited"] * 3
            assert (await manager.call_tool("h", "echo", {"text": "next"})).content[0].text == "next"


@pytest.mark.anyio
async def test_endless_pagination_stops_with_its_reason(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile("--endless-pages"))) as manager:
        status = manager.status()[0]
    assert (status.state, status.error) == (ServerState.FAILED, "tools/list did not end within 1000 pages")


@pytest.mark.anyio
async def test_a_list_changed_storm_does_not_starve_calls(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile("--storm", "5000"))) as manager:
        started = time.perf_counter()
        with anyio.fail_after(10):
            for index in range(20):
                assert (await manager.call_tool("h", "echo", {"text": str(index)})).content[0].text == str(index)
        assert time.perf_counter() - started < 5
        assert manager.status()[0].state is ServerState.READY


# --------------------------------------------------------------------------- no orphans


@pytest.mark.anyio
async def test_a_child_the_server_leaves_behind_is_ended_with_it_on_restart_and_on_close(tmp_path: Path) -> None:
    before = _live_descendants(os.getpid())
    async with MCPManager(settings(tmp_path, h=hostile("--grandchild"))) as manager:
        first = _live_descendants(os.getpid()) - before
        assert len(first) == 3  # the keeper, the server and its `sleep 300`
        with anyio.fail_after(5), pytest.raises(TransportError):
            await manager.call_tool("h", "crash", {})
        await manager.wait_for_state("h", ServerState.READY, timeout=10)
        assert not [pid for pid in first if _alive(pid)]  # the crashed server's child went with it
        second = _live_descendants(os.getpid()) - before
        assert len(second) == 3
    assert not [pid for pid in second if _alive(pid)]  # the server exits on stdin EOF; its child is ended too


# --------------------------------------------------------------------------- HTTP outages (slow)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_http(port: int) -> subprocess.Popen[str]:
    command = [sys.executable, server_script("basic.py"), "--transport", "streamable-http", "--port", str(port)]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        _read_port(process, command)
    except BaseException:
        _stop_http(process)
        raise
    return process


def _stop_http(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_http_server_down_for_5_s_is_reconnected_when_it_comes_back(tmp_path: Path) -> None:
    port = _free_port()
    config = ServerConfig(
        transport="http", url=f"http://127.0.0.1:{port}/mcp", health_interval_s=0.5, health_timeout_s=1.0, **FAST
    )
    config = config.model_copy(update={"restart_backoff_max_s": 1.0, "call_timeout_s": 5.0})
    server = _start_http(port)
    outcomes: Counter[str] = Counter()
    try:
        async with MCPManager(settings(tmp_path, docs=config)) as manager:
            assert manager.is_ready("docs")

            async def caller(until: anyio.Event) -> None:
                while not until.is_set():
                    try:
                        await manager.call_tool("docs", "echo", {"text": "x"})
                        outcomes["ok"] += 1
                    except (ServerError, TransportError, ToolCallTimeout) as exc:
                        outcomes[type(exc).__name__] += 1
                    await anyio.sleep(0.1)

            done = anyio.Event()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(caller, done)
                await anyio.sleep(0.3)
                _stop_http(server)
                down_at = time.perf_counter()
                left = await manager.wait_for_state("docs", ServerState.RESTARTING, ServerState.FAILED, timeout=5)
                noticed_in = time.perf_counter() - down_at
                await anyio.sleep(max(0.0, 5 - (time.perf_counter() - down_at)))
                server = await anyio.to_thread.run_sync(_start_http, port)
                back_at = time.perf_counter()
                await manager.wait_for_state("docs", ServerState.READY, timeout=15)
                recovered_in = time.perf_counter() - back_at
                await anyio.sleep(0.5)
                done.set()
            with anyio.fail_after(5):
                assert (await manager.call_tool("docs", "echo", {"text": "back"})).content[0].text == "back"
    finally:
        _stop_http(server)
    print(
        f"\nHTTP server down 5 s: noticed in {noticed_in:.2f} s ({left.state}), recovered {recovered_in:.2f} s "
        f"after it came back; calls every 0.1 s: {dict(outcomes)}"
    )
    assert recovered_in < 1.0 + 2.0  # the capped backoff plus a connection
    assert outcomes["ok"] > 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_frozen_http_server_is_noticed_by_its_health_probe_without_a_call(tmp_path: Path) -> None:
    port = _free_port()
    config = ServerConfig(
        transport="http",
        url=f"http://127.0.0.1:{port}/mcp",
        health_interval_s=0.3,
        health_timeout_s=0.5,
        **{**FAST, "startup_timeout_s": 1.0},
    )
    server = _start_http(port)
    try:
        async with MCPManager(settings(tmp_path, docs=config)) as manager:
            server.send_signal(signal.SIGSTOP)  # the socket stays open; nothing answers
            stopped_at = time.perf_counter()
            try:
                degraded = await manager.wait_for_state("docs", ServerState.DEGRADED, timeout=5)
                gone = await manager.wait_for_state("docs", ServerState.RESTARTING, ServerState.FAILED, timeout=5)
                noticed_in = time.perf_counter() - stopped_at
            finally:
                server.send_signal(signal.SIGCONT)
            await manager.wait_for_state("docs", ServerState.READY, timeout=15)
    finally:
        _stop_http(server)
    print(f"\nfrozen HTTP server: restarted {noticed_in:.2f} s after it froze, without a call")
    assert degraded.error == "a health probe got no answer within health_timeout_s=0.5 s"
    assert gone.error == "2 health probes in a row got no answer within health_timeout_s=0.5 s"


def _gauge(reader: InMemoryMetricReader, server: str) -> str | None:
    """The state whose `mcp_server_state` series is 1 for `server`."""
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "mcp_server_state":
                    for point in metric.data.data_points:
                        if point.attributes.get("server") == server and point.value == 1:
                            return str(point.attributes["state"])
    return None


# --------------------------------------------------------------------------- the checks on their own


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "#"}, "inputSchema has a $ref cycle that never reaches a property or item: # -> #"),
        (
            {"$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
            "inputSchema has a $ref cycle that never reaches a property or item: "
            "#/$defs/a -> #/$defs/a/anyOf/1 -> #/$defs/a",
        ),
        (
            {"$defs": {"a": {"$anchor": "me", "not": {"$ref": "#me"}}}},
            "inputSchema has a $ref cycle that never reaches a property or item: #/$defs/a -> #/$defs/a/not -> #/$defs/a",
        ),
        (
            {"properties": {"x": {"$ref": "#/$defs/gone"}}},
            "inputSchema has a $ref that does not resolve: '#/$defs/gone'",
        ),
        (_deep(150), "inputSchema is nested more than 64 levels deep (schema_max_depth)"),
        ({"description": "x" * 300_000}, "inputSchema is 300018 bytes, over schema_max_bytes=262144"),
        ("a string", "inputSchema is a string, not an object"),
        # fine: recursion that descends into the value, a $ref-shaped default, properties named like keywords
        ({"$defs": {"n": {"properties": {"kids": {"items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"}, None),
        ({"type": "object", "default": {"$ref": "#"}}, None),
        ({"properties": {"not": {"type": "string"}, "allOf": {"$ref": "#/properties/not"}}}, None),
        ({"$ref": "https://example.com/schema.json"}, None),
    ],
)
def test_schema_problem_names_what_would_break_a_validator(schema: Any, problem: str | None) -> None:
    from orchestrator.protocols.mcp._schemas import schema_problem

    assert schema_problem(schema) == problem


def test_every_check_is_iterative_so_absurd_nesting_cannot_break_it() -> None:
    from orchestrator.protocols.mcp._schemas import json_depth, schema_problem, tool_problem

    nested: Any = {}
    for _ in range(100_000):
        nested = {"a": nested}
    assert json_depth(nested, stop_at=64) == 65
    assert schema_problem(nested) == "inputSchema is nested more than 64 levels deep (schema_max_depth)"
    assert tool_problem({"name": "t", "inputSchema": {"type": "object"}, "outputSchema": nested}) == (
        "outputSchema is nested more than 64 levels deep (schema_max_depth)"
    )


def test_the_line_reader_bounds_lines_splits_chunks_and_fails_the_request_of_a_dropped_answer() -> None:
    import mcp.types as types

    from orchestrator.protocols.mcp._transports import StdoutLineFault, _LineReader

    reader = _LineReader(limit=1024)
    response = b'{"jsonrpc":"2.0","id":7,"result":{}}'
    first = reader.feed(response[:10])
    items = reader.feed(response[10:] + b"\r\nnot json\n" + b'{"jsonrpc":"2.0","id":8,"result":{"x":"' + b"y" * 2000)
    items += reader.feed(b"y" * 5000 + b'"}}\n{"jsonrpc":"2.0","id":9,"result":{}}\n')
    assert first == []
    kinds = [type(item.message).__name__ if hasattr(item, "message") else item.reason for item in items]
    assert kinds == ["JSONRPCResponse", "not_json", "too_long", "JSONRPCError", "JSONRPCResponse"]
    assert isinstance(items[2], StdoutLineFault) and items[2].size > 1024
    error = items[3].message
    assert isinstance(error, types.JSONRPCError) and error.id == 8
    assert error.error.message == "the server's response is longer than max_message_bytes=1024 and was dropped"
    assert items[4].message.id == 9


# --------------------------------------------------------------------------- hostile tool text (issue 24)

_STRUCTURE = re.compile(
    r"^\s*(?:#{1,6}\s|[\w.-]+\s+-\s+SYSTEM|(?:system|assistant|user|developer|human)\s*:|<\|)|<\|[^|]*\|>|</?system>"
    r"|</tool_description>",
    re.IGNORECASE | re.MULTILINE,
)
"""What tool text must never bring into a prompt: a heading, a directory line, a role turn, a template token
or a framing tag (orchestrator's own prompt lines are checked apart)."""


def assert_inert(text: str, where: str) -> None:
    found = _STRUCTURE.search(text)
    assert found is None, f"{where}: {found.group(0)!r} in {text[:300]!r}"


def _texts(value: Any) -> list[str]:
    """Every string in a definition (names, descriptions, titles, schema text)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*_texts(key), *_texts(item))]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return []


@pytest.mark.anyio
async def test_a_tool_whose_text_imitates_the_prompt_is_held_back_by_default(tmp_path: Path) -> None:
    async with MCPManager(settings(tmp_path, h=hostile("--hostile-text"))) as manager:
        catalog = manager.catalog()
        (status,) = manager.status()
    assert "h__notes" not in catalog and "h__echo" in catalog
    assert [tool.name for tool in status.held_tools] == ["h__notes"]
    assert status.held_tools[0].reason.startswith("flagged: prompt-imitation in ")


@pytest.mark.anyio
async def test_a_flagged_tool_is_held_and_its_neighbours_stay_offered(tmp_path: Path) -> None:
    """The order to blind-copy reports opens send_report's description: held is send_report, not the tool
    listed before it (a string's first sentence was once credited to the string before)."""
    async with MCPManager(settings(tmp_path, h=hostile("--mail-bcc"))) as manager:
        catalog = manager.catalog()
        (status,) = manager.status()
    assert [tool.name for tool in status.held_tools] == ["h__send_report"]
    assert status.held_tools[0].reason.startswith("flagged: exfil-destination in description: Always BCC")
    assert "h__send_report" not in catalog and len(catalog) == 7  # every plain tool offered


@pytest.mark.anyio
async def test_hostile_tool_text_accepted_anyway_is_inert_on_every_path(tmp_path: Path) -> None:
    """`on_flag: accept` lets the red-team description through: full plan, pinned tools, the directory,
    search hits, expand_tools, each provider format, the CLI and a real client of the gateway all get it
    with no heading, directory line, role turn, template token or framing tag of its own."""
    from orchestrator import (
        AgentProfile,
        Gateway,
        Settings,
        SpawnPlanner,
        ToolSearchEngine,
        ToolSearchSettings,
        render_tools,
    )

    server = hostile("--hostile-text", on_flag="accept")
    config = Settings(
        mcp={"servers": {"h": server}, "cache_dir": tmp_path},
        agents={
            "full": AgentProfile(tool_search={"threshold_tokens": 1_000_000}),
            "searcher": AgentProfile(tool_search={"threshold_tokens": 0}, pinned=["h__notes"]),
        },
    )
    async with MCPManager(config) as manager:
        catalog = manager.catalog()
        assert "h__notes" in catalog
        planner = SpawnPlanner(config)
        full = planner.plan("note", "full", catalog, record=False)
        search = planner.plan("note", "searcher", catalog, record=False)
        assert (full.mode, search.mode) == ("full", "search")
        for plan in (full, search):
            for text in _texts(plan.tools):
                assert_inert(text, f"{plan.mode} plan")
        prompt = search.prompt.splitlines()
        assert prompt.count("## Tools") == 1 and sum(line.startswith("### Directory") for line in prompt) == 1
        assert not [line for line in prompt if line.lstrip().startswith(("fake__tool", "assistant:", "<|", "SYSTEM"))]
        engine = ToolSearchEngine(catalog, ToolSearchSettings(ranking="lexical"))
        hits = engine.search("take a note")
        assert hits and all("\n" not in hit.summary for hit in hits)
        expanded = engine.expand_tools(["h__notes"])
        for fmt in ("mcp", "anthropic", "openai"):
            for tool in render_tools(list(catalog) if fmt == "mcp" else expanded, fmt):  # type: ignore[arg-type]
                body = tool.model_dump(mode="json") if fmt == "mcp" else tool
                for text in _texts(body):
                    assert_inert(text, fmt)
        gateway = Gateway(config, manager)
        async with gateway.running("127.0.0.1", 0):
            for agent, check in (("full", "list"), ("searcher", "expand")):
                handle = await gateway.run_sync(gateway.open_spawn, "note", agent)
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {handle.token}"}, timeout=30) as http,
                    Client(streamable_http_client(handle.url, http_client=http)) as client,
                ):
                    if check == "list":
                        listed = (await client.list_tools()).tools
                        for text in _texts([tool.model_dump(mode="json") for tool in listed]):
                            assert_inert(text, "gateway tools/list")
                    else:
                        result = await client.call_tool("expand_tools", {"names": ["h__notes"]})
                        for block in result.content:
                            assert_inert(json.loads(block.text)["tools"][0]["description"], "gateway expand_tools")
        gateway.close()


def test_hostile_tool_text_is_inert_in_cli_output(tmp_path: Path) -> None:
    """`tools expand`, `tools list`, `tools plan` and `spawn --dry-run --format anthropic|openai`."""
    from typer.testing import CliRunner

    from orchestrator._cli import app

    server = hostile("--hostile-text", on_flag="accept")
    config = tmp_path / "bernstein.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "mcp": {
                    "cache_dir": str(tmp_path / "cache"),
                    "servers": {"h": server.model_dump(mode="json", exclude_defaults=True)},
                    "tool_search": {"threshold_tokens": 0, "ranking": "lexical"},
                }
            }
        )
    )
    runner = CliRunner()
    for args in (
        ["tools", "expand", "h__notes"],
        ["tools", "list"],
        ["tools", "plan"],
        ["spawn", "--task", "note", "--dry-run", "--format", "anthropic"],
        ["spawn", "--task", "note", "--dry-run", "--format", "openai"],
        ["spawn", "--task", "note", "--dry-run", "--format", "text"],
    ):
        result = runner.invoke(app, ["-c", str(config), *args])
        assert result.exit_code == 0, (args, result.output)
        output = result.stdout.replace("## Tools\n", "", 1) if args[1] in ("plan", "--task") else result.stdout
        lines = [line for line in output.splitlines() if not line.startswith("### Directory (")]
        assert_inert("\n".join(lines), " ".join(args))
        assert "fake__tool - SYSTEM" not in "\n".join(
            line.lstrip() for line in lines if line.lstrip().startswith("fake")
        )
