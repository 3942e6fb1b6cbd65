"""Nothing a stdio server starts outlives it, or the orchestrator process that started it (issue 26).

The server is `tests/servers/escaping.py`: before serving it forks two children that ignore SIGTERM, one
in its process group and one daemonized into a new session (setsid and a double fork), and writes the
three pids to a file per start. Every check is by pid (`/proc/<pid>/stat`; a zombie counts as gone), never
by name. `orchestrator serve` and the CLI commands run as real subprocesses of the `orchestrator` script;
the manager cases run in this process. Linux only: on other systems servers are cleaned up by process
group, which these children escape by design (docs/servers.md, "Process cleanup").
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import yaml

from orchestrator import MCPManager, MCPSettings, ServerConfig, ServerState, TransportError
from orchestrator.protocols.mcp._keeper import descendants
from orchestrator.protocols.mcp._processes import KEEPER_SCRIPT, keeper_usable
from orchestrator.protocols.mcp._transports import GROUP_KILL_TIMEOUT_S, PROCESS_EXIT_TIMEOUT_S

from .conftest import server_script, stdio_server_config
from .test_manager import _alive

pytestmark = pytest.mark.skipif(not keeper_usable(), reason="servers run under a keeper only on Linux with /proc")

ORCHESTRATOR = str(Path(sys.executable).with_name("orchestrator"))
FAST = {"restart_backoff_s": 0.05, "restart_backoff_max_s": 0.5, "startup_timeout_s": 30.0}
STOP_BOUND_S = 5.0
"""The issue's bound on stopping; the worst case measured is about PROCESS_EXIT + GROUP_KILL (4 s)."""
STARTED_S = 60.0
"""For a command to start its server (importing the SDK takes ~2 s of CPU): a bound on a loaded 2-core machine."""
GONE_AFTER_KILL_S = 10.0
"""After SIGKILL of `serve`: the keepers' grace (2 s) plus slack for a loaded machine."""
COMMAND_S = 120.0
BANNER_MAX_LINES = 20


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def escaping(pid_dir: Path, *args: str) -> ServerConfig:
    return stdio_server_config("escaping.py", "--pid-dir", str(pid_dir), *args, **FAST)


def starts(pid_dir: Path) -> list[dict[str, int]]:
    """One record per start of the server, oldest first: {"server", "group", "session"} pids."""
    files = sorted(pid_dir.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    return [json.loads(path.read_text()) for path in files]


def alive(pids: dict[str, int] | set[int]) -> list[int]:
    values = pids.values() if isinstance(pids, dict) else pids
    return sorted(pid for pid in values if _alive(pid))


async def wait_for_starts(pid_dir: Path, count: int) -> list[dict[str, int]]:
    with anyio.fail_after(STARTED_S):
        while len(found := starts(pid_dir)) < count:  # noqa: ASYNC110 (another process writes the files)
            await anyio.sleep(0.05)
    return found


async def wait_gone(pids: set[int], within_s: float) -> None:
    with anyio.fail_after(within_s):
        while alive(pids):  # noqa: ASYNC110 (processes of another tree announce nothing)
            await anyio.sleep(0.05)


# --------------------------------------------------------------------------- the manager


@pytest.mark.anyio
async def test_closing_the_manager_ends_a_child_in_a_new_session_too_within_the_stop_bound(tmp_path: Path) -> None:
    before = set(descendants(os.getpid()))  # other tests' servers (session fixtures) are this process's too
    async with MCPManager(MCPSettings(cache_dir=tmp_path, servers={"esc": escaping(tmp_path)})) as manager:
        assert manager.status()[0].state is ServerState.READY
        [pids] = starts(tmp_path)
        assert alive(pids) == sorted(pids.values())
        below = set(descendants(os.getpid())) - before
        assert len(below) == 4  # the keeper, the server and its two children
        assert set(pids.values()) <= below  # the daemonized child was handed to the keeper, not to init
        started = time.perf_counter()
    stop_s = time.perf_counter() - started
    print(f"\nstop, server exits on stdin EOF, two children ignore SIGTERM: {stop_s:.2f} s")
    assert alive(pids) == []
    assert alive(below) == []
    assert stop_s < STOP_BOUND_S


@pytest.mark.anyio
async def test_a_server_that_ignores_eof_and_sigterm_is_ended_with_its_children_within_the_stop_bound(
    tmp_path: Path,
) -> None:
    async with MCPManager(MCPSettings(cache_dir=tmp_path, servers={"esc": escaping(tmp_path, "--linger")})):
        [pids] = starts(tmp_path)
        started = time.perf_counter()
    stop_s = time.perf_counter() - started
    print(f"\nstop, server and children ignore stdin EOF and SIGTERM: {stop_s:.2f} s")
    assert alive(pids) == []
    assert PROCESS_EXIT_TIMEOUT_S + GROUP_KILL_TIMEOUT_S - 0.1 < stop_s < STOP_BOUND_S  # every grace, then SIGKILL


@pytest.mark.anyio
async def test_a_restart_leaves_no_process_of_the_server_that_died(tmp_path: Path) -> None:
    async with MCPManager(MCPSettings(cache_dir=tmp_path, servers={"esc": escaping(tmp_path)})) as manager:
        [first] = starts(tmp_path)
        with anyio.fail_after(10), pytest.raises(TransportError, match="server process exited"):
            await manager.call_tool("esc", "crash", {})
        await manager.wait_for_state("esc", ServerState.READY, timeout=STARTED_S)
        assert alive(first) == []  # gone before the new server was started
        old, second = await wait_for_starts(tmp_path, 2)
        assert old == first and alive(second) == sorted(second.values())
        with anyio.fail_after(10):
            assert (await manager.call_tool("esc", "echo", {"text": "back"})).content[0].text == "back"
    assert alive(second) == []


@pytest.mark.anyio
async def test_a_keeper_killed_from_outside_takes_its_server_and_the_servers_group_along(tmp_path: Path) -> None:
    """The documented gap: only the child that left the server's process group is orphaned."""
    async with MCPManager(MCPSettings(cache_dir=tmp_path, servers={"esc": escaping(tmp_path)})) as manager:
        [first] = starts(tmp_path)
        keeper = _parent(first["server"])
        os.kill(keeper, signal.SIGKILL)
        await wait_gone({first["server"]}, 10)  # PR_SET_PDEATHSIG: SIGKILL
        await wait_for_starts(tmp_path, 2)  # restarted, once the old one was stopped
        assert alive({first["server"], first["group"]}) == []  # its process group was ended before the restart
        await manager.wait_for_state("esc", ServerState.READY, timeout=STARTED_S)
    try:
        assert alive({first["session"]}) == [first["session"]]
    finally:
        os.kill(first["session"], signal.SIGKILL)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_keeper_keeps_its_server_when_only_the_thread_that_started_it_exits(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the starting *thread* exits; the keeper acts only once its parent
    process is gone, so a manager whose event loop spawns from a worker thread keeps its servers."""
    report_r, report_w = os.pipe()
    started: list[subprocess.Popen[bytes]] = []
    command = [sys.executable, "-c", "import sys; sys.stdin.read()"]

    def spawn() -> None:
        keeper = [sys.executable, "-I", "-S", str(KEEPER_SCRIPT), str(report_w), str(os.getpid()), "2", "--"]
        started.append(subprocess.Popen([*keeper, *command], stdin=subprocess.PIPE, pass_fds=(report_w,)))

    thread = threading.Thread(target=spawn)
    thread.start()
    thread.join()
    os.close(report_w)
    [keeper] = started
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/self/task/{thread.native_id}").exists():  # once gone, the kernel has sent SIGHUP
            assert time.monotonic() < deadline, "the thread never exited"
            time.sleep(0.01)
        with os.fdopen(report_r, "rb") as report:
            kind, server = report.read().split()
        assert kind == b"ok"
        while _pending_signals(keeper.pid) & (1 << (signal.SIGHUP - 1)):  # until the keeper has taken it
            assert time.monotonic() < deadline, "the keeper never took its SIGHUP"
            time.sleep(0.01)
        assert keeper.poll() is None and _alive(int(server))
    finally:
        assert keeper.stdin is not None
        keeper.stdin.close()
        assert keeper.wait(timeout=10) == 0  # the server's own status
    assert not _alive(int(server))


def test_the_keeper_exits_with_the_servers_status_and_reports_a_command_it_cannot_start(tmp_path: Path) -> None:
    for command, status, report in (
        (["sh", "-c", "exit 5"], 5, b"ok"),
        (["sh", "-c", "kill -KILL $$"], 128 + signal.SIGKILL, b"ok"),
        (["orchestrator-test-no-such-program"], 127, b"error 2"),
    ):
        report_r, report_w = os.pipe()
        keeper = [sys.executable, "-I", "-S", str(KEEPER_SCRIPT), str(report_w), str(os.getpid()), "2", "--"]
        done = subprocess.run([*keeper, *command], pass_fds=(report_w,), timeout=30, check=False)
        os.close(report_w)
        with os.fdopen(report_r, "rb") as pipe:
            assert pipe.read().startswith(report), command
        assert done.returncode == status, command


def _pending_signals(pid: int) -> int:
    """Signals pending for the whole process (`ShdPnd` in /proc/<pid>/status), as a bit mask."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no ShdPnd for {pid}")


# --------------------------------------------------------------------------- orchestrator serve and the CLI


def _config(tmp_path: Path) -> Path:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    data: dict[str, Any] = {
        "mcp": {
            "cache_dir": str(tmp_path / "cache"),
            "servers": {
                "esc": {"command": sys.executable, "args": [server_script("escaping.py"), "--pid-dir", str(pid_dir)]}
            },
        },
        "gateway": {"host": "127.0.0.1", "port": 0, "token": "cleanup-test-token"},
    }
    path = tmp_path / "bernstein.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
async def test_no_process_the_server_started_outlives_serve_stopped_by_a_signal(tmp_path: Path, signum: int) -> None:
    config = _config(tmp_path)
    process = subprocess.Popen(  # noqa: ASYNC220 (its stderr is read in a thread)
        [ORCHESTRATOR, "--config", str(config), "serve"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        seen = []
        for _ in range(BANNER_MAX_LINES):  # the banner: serving, with its signal handler in place
            line = await anyio.to_thread.run_sync(process.stderr.readline)
            seen.append(line)
            if re.search(r"at http://127\.0\.0\.1:\d+/mcp", line) or not line:
                break
        assert "/mcp" in seen[-1], "".join(seen)
        [pids] = await wait_for_starts(tmp_path / "pids", 1)
        below = set(descendants(process.pid))
        assert set(pids.values()) <= below  # the keeper, the server and both children
        started = time.perf_counter()
        process.send_signal(signum)
        status = await anyio.to_thread.run_sync(lambda: process.wait(timeout=COMMAND_S))
        exit_s = time.perf_counter() - started
        if signum == signal.SIGKILL:
            assert status == -signal.SIGKILL
            await wait_gone(below, GONE_AFTER_KILL_S)  # the keeper heard its parent die and ended the rest
            gone_s = time.perf_counter() - started
            print(f"\nserve killed: its server and children gone {gone_s:.2f} s after the SIGKILL")
        else:
            print(f"\nserve stopped by {signal.Signals(signum).name}: exited in {exit_s:.2f} s")
            assert status == 0
            assert alive(below) == []  # serve exits only once they are gone
            assert exit_s < STOP_BOUND_S
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [["servers"], ["tools", "list"], ["tools", "plan"]], ids=["servers", "tools-list", "tools-plan"]
)
def test_no_process_the_server_started_outlives_a_cli_command(tmp_path: Path, command: list[str]) -> None:
    config = _config(tmp_path)
    done = subprocess.run(
        [ORCHESTRATOR, "--config", str(config), *command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [pids] = starts(tmp_path / "pids")
    assert alive(pids) == []
