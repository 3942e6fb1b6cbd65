"""Recovery: how long a server takes to come back, and how many calls fail meanwhile, with the default
supervisor settings (restart_backoff_s 0.5, restart_backoff_max_s 30, max_restarts 3, health_interval_s 15).

    .venv/bin/python benchmarks/recovery.py [--outage-s 5]

Three scenarios, each under steady load (4 callers, each calling `echo` every 50 ms, so ~80 calls/s):

- `kill -9 (stdio)`: the stdio server (tests/servers/hostile.py) is killed; the manager restarts it.
  Lost calls are the ones in flight at the kill plus any that could not wait for the restart.
- `down N s (stdio)`: the server crashes and refuses to start for N s (`--down-while FILE`), then starts
  again: a crash loop during a redeploy.
- `down N s (http)`: a streamable-HTTP server (tests/servers/basic.py) is killed and started again on the
  same port N s later.

"recovered after back" is from the moment the server can start again (the file removed, the HTTP server
listening) to the manager's `ready`; it is bounded by the backoff delay the supervisor was waiting out
then. Calls that fail while the server is really down are expected (they fail at once with the time of
the next try once the circuit is open); "lost" counts every failed call in the scenario.

Targets: kill -9 recovers within 5 s and loses at most the calls in flight (4) plus 4; after an outage
the server is back within restart_backoff_max_s (30 s) of being able to start.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from _common import REPO, add_results_flag, report_targets, run_recorded, table
from orchestrator import MCPManager, MCPSettings, OrchestratorError, ServerConfig, ServerState

SERVERS = REPO / "tests" / "servers"
CALLERS = 4
CALL_INTERVAL_S = 0.05
"""Each caller's pause between calls: ~80 calls/s together, a busy agent fleet."""
SETTLE_S = 1.0
"""Load kept up after recovery, so calls right after it count too."""
PORT_WAIT_S = 60.0


async def _under_load(
    manager: MCPManager, server: str, scenario: Callable[[], Awaitable[float]]
) -> tuple[float, Counter[str]]:
    """Run `scenario` (returns seconds from "can start again" to ready) while CALLERS call `echo`."""
    outcomes: Counter[str] = Counter()
    done = anyio.Event()

    async def caller() -> None:
        while not done.is_set():
            try:
                await manager.call_tool(server, "echo", {"text": "x"})
                outcomes["ok"] += 1
            except OrchestratorError as exc:
                outcomes[type(exc).__name__] += 1
            await anyio.sleep(CALL_INTERVAL_S)

    async with anyio.create_task_group() as tasks:
        for _ in range(CALLERS):
            tasks.start_soon(caller)
        await anyio.sleep(0.5)
        recovered = await scenario()
        await anyio.sleep(SETTLE_S)
        done.set()
    return recovered, outcomes


async def kill_9(folder: Path) -> tuple[float, Counter[str]]:
    config = ServerConfig(command=sys.executable, args=[str(SERVERS / "hostile.py")])
    async with MCPManager(MCPSettings(cache_dir=folder, servers={"h": config})) as manager:
        pid = int((await manager.call_tool("h", "pid", {})).content[0].text)

        async def scenario() -> float:
            killed = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            await manager.wait_for_state("h", ServerState.RESTARTING, ServerState.FAILED, timeout=10)
            await manager.wait_for_state("h", ServerState.READY, timeout=60)
            return time.perf_counter() - killed

        return await _under_load(manager, "h", scenario)


async def stdio_outage(folder: Path, outage_s: float) -> tuple[float, Counter[str]]:
    down = folder / "down"
    config = ServerConfig(command=sys.executable, args=[str(SERVERS / "hostile.py"), "--down-while", str(down)])
    async with MCPManager(MCPSettings(cache_dir=folder, servers={"h": config})) as manager:

        async def scenario() -> float:
            down.touch()
            try:
                await manager.call_tool("h", "crash", {})
            except OrchestratorError:
                pass
            await anyio.sleep(outage_s)
            down.unlink()
            back = time.perf_counter()
            await manager.wait_for_state("h", ServerState.READY, timeout=120)
            return time.perf_counter() - back

        return await _under_load(manager, "h", scenario)


async def http_outage(folder: Path, outage_s: float) -> tuple[float, Counter[str]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = _start_http(port)
    config = ServerConfig(transport="http", url=f"http://127.0.0.1:{port}/mcp")
    try:
        async with MCPManager(MCPSettings(cache_dir=folder, servers={"docs": config})) as manager:

            async def scenario() -> float:
                nonlocal server
                _stop_http(server)
                await anyio.sleep(outage_s)
                server = await anyio.to_thread.run_sync(_start_http, port)
                back = time.perf_counter()
                await manager.wait_for_state("docs", ServerState.READY, timeout=120)
                return time.perf_counter() - back

            return await _under_load(manager, "docs", scenario)
    finally:
        _stop_http(server)


def _start_http(port: int) -> subprocess.Popen[str]:
    command = [sys.executable, str(SERVERS / "basic.py"), "--transport", "streamable-http", "--port", str(port)]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + PORT_WAIT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("PORT "):
            return process
        if not line:
            break
    process.kill()
    raise RuntimeError(f"{' '.join(command)} did not start")


def _stop_http(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


async def main(outage_s: float) -> int:
    rows = []
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, run in (
            ("kill -9 (stdio)", lambda: kill_9(Path(folder) / "a")),
            (f"down {outage_s:g} s (stdio)", lambda: stdio_outage(Path(folder) / "b", outage_s)),
            (f"down {outage_s:g} s (http)", lambda: http_outage(Path(folder) / "c", outage_s)),
        ):
            recovered, outcomes = await run()
            results[name] = (recovered, outcomes)
            lost = sum(count for kind, count in outcomes.items() if kind != "ok")
            detail = ", ".join(f"{kind} {count}" for kind, count in sorted(outcomes.items()) if kind != "ok")
            rows.append([name, f"{recovered:.2f} s", outcomes["ok"], lost, detail or "-"])
    table(["scenario", "recovered after back", "calls ok", "calls lost", "failures by kind"], rows)
    kill = results["kill -9 (stdio)"]
    return report_targets(
        [
            ("kill -9: ready again within 5 s", kill[0] <= 5),
            (
                f"kill -9: at most {2 * CALLERS} calls lost",
                sum(c for k, c in kill[1].items() if k != "ok") <= 2 * CALLERS,
            ),
            *[
                (f"{name}: back within 30 s of being able to start", r <= 30)
                for name, (r, _) in results.items()
                if "down" in name
            ],
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outage-s", type=float, default=5.0)
    add_results_flag(parser)
    args = parser.parse_args()
    sys.exit(run_recorded(lambda: anyio.run(main, args.outage_s)))
