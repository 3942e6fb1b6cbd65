"""MCPManager against real servers over real transports: startup, listing, calls, failures, cleanup.

One module-scoped "fleet" manager (every transport, the published mcp-server-time, a paginated server,
a noisy one, a hanging one and a missing program) serves the read-mostly tests; tests that crash,
change or cancel servers start their own small manager.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from orchestrator import (
    MCPManager,
    MCPSettings,
    ServerConfig,
    ServerError,
    ServerState,
    Settings,
    ToolCallTimeout,
    ToolExecutionError,
    TransportError,
)

from .conftest import REPO_ROOT, TIME_SERVER, stdio_server_config

HANGING_TIMEOUT_S = 1.5
NO_RETRY_DURING_THE_MODULE = {"restart_backoff_s": 600.0, "restart_backoff_max_s": 600.0}
"""Failed servers are retried forever; the fleet's failing ones wait past the module's end, so the process
counts of the cleanup tests see no retry of theirs."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Fleet:
    manager: MCPManager
    entered_in_s: float


@pytest.fixture(scope="module")
async def fleet(
    basic_http_url: str, basic_sse_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fleet]:
    settings = MCPSettings(
        cache_dir=tmp_path_factory.mktemp("fleet-cache"),
        servers={
            "stdio": stdio_server_config("basic.py", call_timeout_s=1.0, env={"BASIC_SERVER_TAG": "from-config"}),
            "http": ServerConfig(transport="http", url=basic_http_url, headers={"X-Test": "yes"}),
            "sse": ServerConfig(transport="sse", url=basic_sse_url),
            "time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC"),
            "paged": stdio_server_config("paged.py"),
            "noisy": stdio_server_config("garbage.py"),
            "hanging": stdio_server_config(
                "hanging.py", startup_timeout_s=HANGING_TIMEOUT_S, **NO_RETRY_DURING_THE_MODULE
            ),
            "missing": ServerConfig(command="orchestrator-test-no-such-program", **NO_RETRY_DURING_THE_MODULE),
            "off": stdio_server_config("basic.py", enabled=False),
        },
    )
    started = time.perf_counter()
    async with MCPManager(settings) as manager:  # bounded by each server's startup_timeout_s
        yield Fleet(manager, time.perf_counter() - started)


# --------------------------------------------------------------------------- startup and listing


@pytest.mark.anyio
async def test_every_transport_and_the_published_time_server_come_up_ready(fleet: Fleet) -> None:
    status = {s.name: s for s in fleet.manager.status()}
    for name in ("stdio", "http", "sse", "time", "paged", "noisy"):
        assert status[name].state is ServerState.READY, status[name]
        assert status[name].error is None
        assert status[name].listed_at is not None and not status[name].from_cache
        assert fleet.manager.is_ready(name)
    assert [s.transport for s in (status["stdio"], status["http"], status["sse"])] == ["stdio", "http", "sse"]
    assert status["time"].tools == 2
    assert status["stdio"].tools == status["http"].tools == status["sse"].tools == 5


@pytest.mark.anyio
async def test_tool_lists_hold_ready_servers_sorted_by_name(fleet: Fleet) -> None:
    lists = fleet.manager.tool_lists()
    assert list(lists) == ["http", "noisy", "paged", "sse", "stdio", "time"]
    assert {tool["name"] for tool in lists["time"]} == {"get_current_time", "convert_time"}


@pytest.mark.anyio
async def test_pagination_is_followed_to_the_last_page(fleet: Fleet) -> None:
    names = [tool["name"] for tool in fleet.manager.tool_lists()["paged"]]
    assert names == [f"tool_{index:03d}" for index in range(250)]


@pytest.mark.anyio
async def test_tools_keep_the_servers_own_definitions_in_wire_shape(fleet: Fleet) -> None:
    echo = next(tool for tool in fleet.manager.tool_lists()["stdio"] if tool["name"] == "echo")
    assert echo["title"] == "Echo"
    assert echo["description"] == "Echo the text back unchanged."
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    assert echo["outputSchema"]["required"] == ["result"]
    paged = fleet.manager.tool_lists()["paged"][7]
    assert paged == {
        "name": "tool_007",
        "title": "Tool 7",
        "description": "Paged test tool number 7; answers with its own name and the value.",
        "inputSchema": {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]},
        "annotations": {"readOnlyHint": True},
    }


@pytest.mark.anyio
async def test_hanging_server_is_failed_after_its_timeout_while_the_others_are_ready(fleet: Fleet) -> None:
    hanging = next(s for s in fleet.manager.status() if s.name == "hanging")
    assert hanging.state is ServerState.FAILED
    assert hanging.error == f"no answer within startup_timeout_s={HANGING_TIMEOUT_S:g} s"
    assert hanging.tools == 0
    assert "hanging" not in fleet.manager.tool_lists()
    assert not fleet.manager.is_ready("hanging")


@pytest.mark.anyio
async def test_a_missing_program_is_failed_with_the_reason(fleet: Fleet) -> None:
    missing = next(s for s in fleet.manager.status() if s.name == "missing")
    assert missing.state is ServerState.FAILED
    assert missing.error == "cannot start 'orchestrator-test-no-such-program': No such file or directory"


@pytest.mark.anyio
async def test_disabled_server_is_listed_as_stopped_and_refuses_calls(fleet: Fleet) -> None:
    off = next(s for s in fleet.manager.status() if s.name == "off")
    assert off.state is ServerState.STOPPED
    assert off.error == "disabled (mcp.servers.off.enabled: false)"
    with pytest.raises(ServerError, match=r"server 'off': disabled"):
        await fleet.manager.call_tool("off", "echo", {"text": "x"})


@pytest.mark.anyio
async def test_garbage_on_stdout_does_not_break_the_server(fleet: Fleet) -> None:
    with anyio.fail_after(10):
        shouted = await fleet.manager.call_tool("noisy", "shout", {"text": "hello"})
        after = await fleet.manager.call_tool("noisy", "still_here", {})
    assert shouted.content[0].text == "HELLO"
    assert after.content[0].text == "yes"
    assert fleet.manager.is_ready("noisy")


# --------------------------------------------------------------------------- calls


@pytest.mark.anyio
async def test_calls_route_to_each_server_over_its_transport(fleet: Fleet) -> None:
    with anyio.fail_after(20):
        for name in ("stdio", "http", "sse"):
            result = await fleet.manager.call_tool(name, "echo", {"text": f"via {name}"})
            assert result.content[0].text == f"via {name}"
            assert result.structured_content == {"result": f"via {name}"}
        tag = await fleet.manager.call_tool("stdio", "whoami", None)
        now = await fleet.manager.call_tool("time", "get_current_time", {"timezone": "UTC"})
        page = await fleet.manager.call_tool("paged", "tool_249", {"value": "last"})
    assert tag.content[0].text == "from-config"  # env merged over os.environ reaches the child
    assert "UTC" in now.content[0].text
    assert page.content[0].text == "tool_249: last"


@pytest.mark.anyio
async def test_calls_from_many_tasks_share_one_connection(fleet: Fleet) -> None:
    results: list[int] = []

    async def add(n: int) -> None:
        result = await fleet.manager.call_tool("http", "add", {"a": n, "b": 1})
        results.append(result.structured_content["result"])

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(add, n)
    assert sorted(results) == list(range(1, 21))


@pytest.mark.anyio
async def test_a_tool_error_is_a_tool_execution_error_carrying_the_result(fleet: Fleet) -> None:
    with anyio.fail_after(10), pytest.raises(ToolExecutionError) as caught:
        await fleet.manager.call_tool("stdio", "fail", {"message": "disk full"})
    assert caught.value.result.is_error
    assert "disk full" in caught.value.result.content[0].text
    assert str(caught.value).startswith("tool 'fail' on server 'stdio': the tool reported an error:")
    assert (caught.value.server, caught.value.tool) == ("stdio", "fail")


@pytest.mark.anyio
async def test_a_slow_tool_is_a_timeout_and_the_server_keeps_working(fleet: Fleet) -> None:
    started = time.perf_counter()
    with anyio.fail_after(10), pytest.raises(ToolCallTimeout, match=r"no answer within call_timeout_s=1 s"):
        await fleet.manager.call_tool("stdio", "sleep", {"seconds": 30})
    assert time.perf_counter() - started < 3
    with anyio.fail_after(10):
        result = await fleet.manager.call_tool("stdio", "echo", {"text": "still up"})
    assert result.content[0].text == "still up"
    assert fleet.manager.is_ready("stdio")


@pytest.mark.anyio
async def test_calls_to_unknown_or_failed_servers_are_server_errors(fleet: Fleet) -> None:
    with pytest.raises(ServerError, match=r"server 'nope': unknown server; known: hanging, http, missing"):
        await fleet.manager.call_tool("nope", "echo", {})
    with pytest.raises(
        ServerError, match=r"server 'hanging': failed: no answer within startup_timeout_s=1.5 s; retry in"
    ):
        await fleet.manager.call_tool("hanging", "anything", {})  # at once: its circuit is open


@pytest.mark.anyio
async def test_each_call_is_recorded_once_with_its_result(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded: list[tuple[str, str, str, float]] = []
    monkeypatch.setattr(fleet.manager.telemetry, "record_tool_call", lambda *args: recorded.append(args))
    with anyio.fail_after(15):
        await fleet.manager.call_tool("sse", "echo", {"text": "x"})
        with pytest.raises(ToolExecutionError):
            await fleet.manager.call_tool("sse", "fail", {})
        with pytest.raises(ToolCallTimeout):
            await fleet.manager.call_tool("stdio", "sleep", {"seconds": 30})
        with pytest.raises(ServerError):
            await fleet.manager.call_tool("hanging", "x", {})
    assert [(server, tool, result) for server, tool, result, _ in recorded] == [
        ("sse", "echo", "ok"),
        ("sse", "fail", "tool_error"),
        ("stdio", "sleep", "timeout"),
        ("hanging", "x", "transport_error"),
    ]
    assert all(duration >= 0 for *_, duration in recorded)
    assert recorded[2][3] >= 0.9


# --------------------------------------------------------------------------- changes


@pytest.mark.anyio
async def test_list_changed_is_seen_within_one_second_on_both_protocol_eras_by_every_listener(
    tmp_path: Path,
) -> None:
    settings = MCPSettings(
        cache_dir=tmp_path,
        servers={
            # on_change accept: new tools are offered at once (the default holds them until approved).
            "modern": stdio_server_config("changing.py", on_change="accept"),
            "legacy": stdio_server_config("changing.py", "--legacy", on_change="accept"),
        },
    )
    heard: list[int] = []
    awaited: list[int] = []
    async_heard = anyio.Event()

    async def async_listener(version: int) -> None:
        awaited.append(version)
        async_heard.set()

    async with MCPManager(settings) as manager:
        versions = {s.name: s.protocol_version for s in manager.status()}
        assert versions == {"legacy": "2025-11-25", "modern": "2026-07-28"}
        unsubscribe = manager.add_listener(heard.append)
        manager.add_listener(async_listener)
        for server in ("modern", "legacy"):
            before = manager.version
            started = time.perf_counter()
            with anyio.fail_after(5):
                await manager.call_tool(server, "add_tool", {"name": "fresh_tool"})
            version = await manager.wait_for_version(before, timeout=1.0)
            assert time.perf_counter() - started < 1.0
            assert "fresh_tool" in {tool["name"] for tool in manager.tool_lists()[server]}
            assert heard[-1] == version
            with anyio.fail_after(1):
                await async_heard.wait()
            async_heard = anyio.Event()
            assert awaited[-1] == version
            with anyio.fail_after(5):
                result = await manager.call_tool(server, "fresh_tool", {})
            assert result.content[0].text == "I am fresh_tool"
        before = manager.version
        with anyio.fail_after(5):
            await manager.call_tool("modern", "remove_tool", {"name": "fresh_tool"})
        await manager.wait_for_version(before, timeout=1.0)
        assert "fresh_tool" not in {tool["name"] for tool in manager.tool_lists()["modern"]}
        unsubscribe()
        count, before = len(heard), manager.version
        with anyio.fail_after(5):
            await manager.call_tool("legacy", "add_tool", {"name": "unheard"})
        await manager.wait_for_version(before, timeout=1.0)
        assert len(heard) == count


# --------------------------------------------------------------------------- crashes and restarts


@pytest.mark.anyio
async def test_a_crash_fails_the_call_with_the_reason_then_the_server_is_restarted(tmp_path: Path) -> None:
    settings = MCPSettings(
        cache_dir=tmp_path, servers={"crashy": stdio_server_config("crashy.py", restart_backoff_s=0.05)}
    )
    async with MCPManager(settings) as manager:
        with anyio.fail_after(5), pytest.raises(TransportError) as caught:
            await manager.call_tool("crashy", "crash", {})
        assert str(caught.value) == (
            "tool 'crash' on server 'crashy': server process exited; stderr: crashy: fatal: crashing on purpose"
        )
        with anyio.fail_after(20):
            result = await manager.call_tool("crashy", "ping", {})  # waits for the restart
        assert result.content[0].text == "pong"
        status = manager.status()[0]
        assert status.state is ServerState.READY
        assert status.restarts == 1
        assert status.error is None
        assert status.tools == 2


@pytest.mark.anyio
async def test_a_server_whose_restarts_keep_failing_opens_its_circuit_after_max_restarts_and_keeps_its_tools(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "started-once"
    config = stdio_server_config(
        "crashy.py", "--refuse-restart", str(marker), max_restarts=2, restart_backoff_s=0.05, restart_backoff_max_s=30
    )
    settings = MCPSettings(cache_dir=tmp_path, servers={"crashy": config})
    async with MCPManager(settings) as manager:
        before = manager.version
        with anyio.fail_after(5), pytest.raises(TransportError):
            await manager.call_tool("crashy", "crash", {})
        status = await manager.wait_for_state("crashy", ServerState.FAILED, timeout=20)
        assert status.error == "server process exited during startup; stderr: crashy: refusing to restart"
        assert status.restarts == 3 and status.circuit == "open"
        assert status.retry_in_s is not None and 0 < status.retry_in_s <= 0.05 * 2**2
        assert manager.version == before  # its tools stay in the catalog while it is retried
        assert [tool["name"] for tool in manager.tool_lists()["crashy"]] == ["ping", "crash"]
        with pytest.raises(
            ServerError, match=r"failed: server process exited during startup; .*; (retry in \d+ s|retrying now)"
        ):
            await manager.call_tool("crashy", "ping", {})


# --------------------------------------------------------------------------- timeouts and cleanup


@pytest.mark.anyio
async def test_hanging_server_fails_within_its_startup_timeout(tmp_path: Path) -> None:
    settings = MCPSettings(
        cache_dir=tmp_path,
        servers={"hanging": stdio_server_config("hanging.py", "--garbage", startup_timeout_s=HANGING_TIMEOUT_S)},
    )
    started = time.perf_counter()
    async with MCPManager(settings) as manager:
        elapsed = time.perf_counter() - started
        status = manager.status()[0]
    assert HANGING_TIMEOUT_S <= elapsed < HANGING_TIMEOUT_S + 1.0
    assert status.state is ServerState.FAILED
    assert status.error is not None
    assert status.error.startswith(f"no answer within startup_timeout_s={HANGING_TIMEOUT_S:g} s; ")
    assert "it wrote non-MCP output on stdout" in status.error


def _live_descendants(root: int) -> set[int]:
    """Processes below `root` that are alive (zombies excluded), from /proc."""
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        states[int(entry)] = fields[0]
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if states.get(child) != "Z":
                found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.anyio
async def test_closing_on_an_error_leaves_no_child_process_even_a_lingering_one_with_its_own_child(
    tmp_path: Path,
) -> None:
    before = _live_descendants(os.getpid())
    settings = MCPSettings(
        cache_dir=tmp_path,
        servers={
            "plain": stdio_server_config("basic.py", forked=False),
            "stubborn": stdio_server_config("basic.py", "--linger", "--grandchild", forked=False),
        },
    )
    with pytest.raises(LookupError, match="raised in the body"):  # noqa: PT012 (propagates as is, not in a group)
        async with MCPManager(settings) as manager:
            assert all(s.state is ServerState.READY for s in manager.status())
            started = _live_descendants(os.getpid()) - before
            assert len(started) >= 5  # two servers, their keepers and the stubborn one's own child
            raise LookupError("raised in the body")
    assert not [pid for pid in started if _alive(pid)]
    assert _live_descendants(os.getpid()) - before == set()


@pytest.mark.anyio
async def test_cancelling_the_task_holding_the_manager_stops_its_children(tmp_path: Path) -> None:
    before = _live_descendants(os.getpid())
    settings = MCPSettings(
        cache_dir=tmp_path,
        servers={"plain": stdio_server_config("basic.py", forked=False), "hanging": stdio_server_config("hanging.py")},
    )
    with anyio.move_on_after(0.5) as scope:  # cancelled while both are still starting
        async with MCPManager(settings):
            pytest.fail("entering should have been cancelled")
    assert scope.cancelled_caught
    assert _live_descendants(os.getpid()) - before == set()

    with anyio.CancelScope() as scope:
        async with MCPManager(settings, wait=False) as manager:
            await manager.wait_for_version(0, timeout=20)  # basic is up
            started = _live_descendants(os.getpid()) - before
            assert started
            scope.cancel()
            await anyio.sleep_forever()
    assert not [pid for pid in started if _alive(pid)]
    assert _live_descendants(os.getpid()) - before == set()


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal, sys, anyio
    from orchestrator._config import MCPSettings, ServerConfig

    # SIGUSR1 writes every thread's stack to stderr, which the test shows if closing hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Ctrl-C as in a terminal: a shell that ran the tests in the background (`make test &`) left SIGINT
    # ignored, and ignored signals are inherited.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from orchestrator.protocols.mcp._manager import MCPManager

    async def main():
        settings = MCPSettings(cache_dir=sys.argv[1], servers={
            "plain": ServerConfig(command=sys.executable, args=[sys.argv[2]]),
            "other": ServerConfig(command=sys.executable, args=[sys.argv[2], "--name", "other"]),
        })
        try:
            async with MCPManager(settings) as manager:
                print(" ".join(s.state for s in manager.status()), flush=True)
                await anyio.sleep_forever()
        finally:
            print("closed", flush=True)

    anyio.run(main)
    """
)
CTRL_C_EXIT_TIMEOUT_S = 60
"""The interpreter's own exit after importing the SDK takes about 2 s (more on a loaded machine); the
test is about the children, checked as soon as the manager has closed."""


CTRL_C_CLOSE_TIMEOUT_S = 45
"""Closing takes under 3 s (stdin closed, then SIGTERM); far past that the manager is stuck."""


def _line_within(process: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The child's next stdout line, or None if none arrives within `timeout_s`."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline() if process.stdout else ""))
    reader.daemon = True
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines else None


def _signal_masks(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return " ".join(line for line in status if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))


def test_ctrl_c_stops_every_child_process(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, str(tmp_path), str(REPO_ROOT / "tests" / "servers" / "basic.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().split() == ["ready", "ready"]  # bounded by the pytest timeout
        children = _live_descendants(process.pid)
        assert len(children) == 4  # two servers, each under its keeper
        process.send_signal(signal.SIGINT)
        # printed once the manager has closed; past the bound, the child's stacks explain the hang
        closed = _line_within(process, CTRL_C_CLOSE_TIMEOUT_S)
        if closed is None:
            masks = _signal_masks(process.pid), _signal_masks(os.getpid())
            process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            process.kill()
            _, stderr = process.communicate()
            pytest.fail(
                f"no 'closed' {CTRL_C_CLOSE_TIMEOUT_S} s after Ctrl-C; signals (child, test) {masks}; stderr:\n{stderr}"
            )
        assert closed.split() == ["closed"]
        assert not [pid for pid in children if _alive(pid)]
        process.wait(timeout=CTRL_C_EXIT_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


# --------------------------------------------------------------------------- warm start


@pytest.mark.anyio
async def test_a_listing_is_cached_and_served_at_once_by_the_next_start(tmp_path: Path) -> None:
    settings = MCPSettings(
        cache_dir=tmp_path, servers={"paged": stdio_server_config("paged.py", "--tools", "30", forked=False)}
    )
    before = _live_descendants(os.getpid())
    async with MCPManager(settings) as manager:
        live = manager.tool_lists()
        first_listed = manager.status()[0].listed_at
        started = _live_descendants(os.getpid()) - before
    assert len(started) == 2  # the server and its keeper
    assert not [pid for pid in started if _alive(pid)]  # a normal close stops the child too
    assert len(live["paged"]) == 30
    cache_files = list((tmp_path / "tools").glob("paged-*.json"))
    assert len(cache_files) == 1

    started = time.perf_counter()
    async with MCPManager(settings, wait=False) as manager:
        assert time.perf_counter() - started < 0.5
        assert manager.tool_lists() == live
        status = manager.status()[0]
        assert (status.state, status.from_cache, status.tools) == (ServerState.STARTING, True, 30)
        assert status.listed_at == first_listed
        with anyio.fail_after(20):
            result = await manager.call_tool("paged", "tool_029", {"value": "warm"})  # waits until ready
        assert result.content[0].text == "tool_029: warm"
        status = manager.status()[0]
        assert (status.state, status.from_cache) == (ServerState.READY, False)
        assert status.listed_at is not None and first_listed is not None and status.listed_at > first_listed
        assert manager.version == 0  # the live list equals the cached one: nothing changed for listeners


@pytest.mark.anyio
async def test_a_changed_config_does_not_reuse_the_cached_list(tmp_path: Path) -> None:
    old = MCPSettings(cache_dir=tmp_path, servers={"paged": stdio_server_config("paged.py", "--tools", "5")})
    new = MCPSettings(cache_dir=tmp_path, servers={"paged": stdio_server_config("paged.py", "--tools", "6")})
    async with MCPManager(old):
        pass
    async with MCPManager(new, wait=False) as manager:
        assert manager.tool_lists() == {}
        assert manager.status()[0].from_cache is False
        with anyio.fail_after(20):
            await manager.wait_for_version(0, timeout=20)
        assert len(manager.tool_lists()["paged"]) == 6
    assert len(list((tmp_path / "tools").glob("paged-*.json"))) == 1  # the entry for the old config is gone


# --------------------------------------------------------------------------- construction


def test_selecting_an_unknown_server_is_an_error_naming_the_known_ones() -> None:
    settings = Settings(mcp=MCPSettings(servers={"time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")}))
    with pytest.raises(ServerError, match=r"server 'tyme': not configured \(no mcp.servers.tyme\); known: time"):
        MCPManager(settings, servers=["tyme"])


@pytest.mark.anyio
async def test_only_selected_servers_are_started_and_warm_start_off_writes_no_cache(tmp_path: Path) -> None:
    settings = Settings(
        mcp=MCPSettings(
            cache_dir=tmp_path,
            warm_start=False,
            servers={"a": stdio_server_config("paged.py", "--tools", "2"), "b": stdio_server_config("hanging.py")},
        )
    )
    async with MCPManager(settings, servers=["a"]) as manager:
        assert [s.name for s in manager.status()] == ["a"]
        assert manager.is_ready("a")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
async def test_a_manager_cannot_be_entered_twice(tmp_path: Path) -> None:
    manager = MCPManager(MCPSettings(cache_dir=tmp_path))
    async with manager:
        assert manager.tool_lists() == {}
        with pytest.raises(RuntimeError, match="already entered"):
            await manager.__aenter__()
