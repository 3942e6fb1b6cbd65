"""Spawn latency: time from a spawn request to the agent's first successful `tool_search`, warm vs cold.

    .venv/bin/python benchmarks/spawn.py [--warm N] [--cold N] [--process]

Both use the default `bernstein.yaml` servers (mcp-server-time and mcp-server-git, the published PyPI
packages) and an agent profile in search mode (threshold 0), so the agent's first act is a `tool_search`.

- warm (the project): a gateway is already up; a spawn is registered over HTTP (`POST /spawns`, exactly
  what `orchestrator spawn` does), the agent connects to its endpoint and searches.
- cold (the baseline): nothing is running; the spawn starts the manager with every server, waits for
  them, starts a gateway, registers the spawn, then the agent connects and searches (what
  `orchestrator spawn` does when no gateway answers).

The agent is an MCP client in this process (an orchestrator's own API loop, or an agent runtime that is
already up), so the figure is the spawn path itself. `--process` also times a separate agent process
(tests/agents/agent.py): its Python start-up and `import mcp` (over a second) add the same constant to
both paths. Target: warm at least 10x faster than cold.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from _common import add_results_flag, run_recorded  # noqa: E402
from orchestrator import AgentProfile, Gateway, GatewayClient, MCPManager, Settings, load_settings  # noqa: E402
from orchestrator._config import ToolSearchOverrides  # noqa: E402

TARGET_RATIO = 10.0
TLS = ssl.create_default_context()
# One TLS context for every agent client (as tests/agents/agent.py does): httpx builds one per client
# otherwise (~50 ms), an agent-side cost that is the same on both paths and not part of spawning.
AGENT_SCRIPT = REPO / "tests" / "agents" / "agent.py"
AGENT = "bench"
QUERY = "current time in a timezone"


def bench_settings(cache_dir: Path) -> Settings:
    base = load_settings(REPO / "bernstein.yaml")
    agents = {AGENT: AgentProfile(description="search mode", tool_search=ToolSearchOverrides(threshold_tokens=0))}
    mcp = base.mcp.model_copy(update={"cache_dir": cache_dir})
    return base.model_copy(update={"agents": agents, "mcp": mcp})


async def first_search(url: str, token: str) -> float:
    """Connect to a spawn endpoint and run one tool_search; returns when it has answered with hits."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=TLS) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("tool_search", {"query": QUERY})
        if result.is_error or not (result.structured_content or {}).get("hits"):
            raise RuntimeError(f"tool_search failed: {result}")
    return time.perf_counter()


async def warm_runs(settings: Settings, count: int) -> list[float]:
    times = []
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0) as base:
            client = GatewayClient(base, gateway.credentials.admin_secret)
            await first_search(*(await _open(client)))  # one untimed run: first-use costs in this process
            for _ in range(count):
                started = time.perf_counter()
                url, token, spawn_id = await _open(client, with_id=True)
                done = await first_search(url, token)
                times.append(done - started)
                await client.close_spawn(spawn_id)
        gateway.close()
    return times


async def cold_run(settings: Settings) -> float:
    started = time.perf_counter()
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0):
            handle = gateway.open_spawn("benchmark task", AGENT)
            done = await first_search(handle.url, handle.token)
        gateway.close()
    return done - started


async def _open(client: GatewayClient, with_id: bool = False) -> Any:
    info = await client.open_spawn("benchmark task", AGENT)
    if info["plan"]["mode"] != "search":
        raise RuntimeError("the benchmark profile must plan search mode")
    return (info["url"], info["token"], info["id"]) if with_id else (info["url"], info["token"])


def process_agent(url: str, token: str, folder: Path) -> float:
    """Launch tests/agents/agent.py as its own process; returns the wall-clock time of its first search."""
    config = folder / "mcp.json"
    out = folder / "agent.json"
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    config.write_text(json.dumps({"mcpServers": {"orchestrator": server}}))
    subprocess.run([sys.executable, str(AGENT_SCRIPT), "--config", str(config), "--out", str(out)], check=True)
    return float(json.loads(out.read_text())["first_search_at"])


async def warm_process_runs(settings: Settings, count: int, folder: Path) -> list[float]:
    times = []
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0) as base:
            client = GatewayClient(base, gateway.credentials.admin_secret)
            for _ in range(count):
                started = time.time()
                url, token, spawn_id = await _open(client, with_id=True)
                done = await anyio.to_thread.run_sync(process_agent, url, token, folder)
                times.append(done - started)
                await client.close_spawn(spawn_id)
        gateway.close()
    return times


async def cold_process_run(settings: Settings, folder: Path) -> float:
    started = time.time()
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0):
            handle = gateway.open_spawn("benchmark task", AGENT)
            done = await anyio.to_thread.run_sync(process_agent, handle.url, handle.token, folder)
        gateway.close()
    return done - started


def _row(label: str, values: list[float]) -> str:
    p50 = statistics.median(values)
    return f"  {label:<26} p50 {p50 * 1000:8.1f} ms   min {min(values) * 1000:8.1f} ms   n={len(values)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm", type=int, default=20, help="warm spawns to time")
    parser.add_argument("--cold", type=int, default=3, help="cold spawns to time")
    parser.add_argument("--process", action="store_true", help="also time a separate agent process (slow)")
    add_results_flag(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        settings = bench_settings(folder / "cache")
        cold = [anyio.run(cold_run, settings) for _ in range(args.cold)]
        warm = anyio.run(warm_runs, settings, args.warm)
        if args.process:
            cold_process = [anyio.run(cold_process_run, settings, folder) for _ in range(2)]
            warm_process = anyio.run(warm_process_runs, settings, 3, folder)
    ratio = statistics.median(cold) / statistics.median(warm)
    print("spawn request -> first successful tool_search (servers: time, git from bernstein.yaml)")
    print(_row("warm (gateway up)", warm))
    print(_row("cold (servers started)", cold))
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(f"  {'ratio cold/warm':<26} {ratio:8.1f}x   target >= {TARGET_RATIO:.0f}x: {verdict}")
    if args.process:
        process_ratio = statistics.median(cold_process) / statistics.median(warm_process)
        print("with the agent as its own process (adds Python start-up and `import mcp` to both):")
        print(_row("warm, agent process", warm_process))
        print(_row("cold, agent process", cold_process))
        print(f"  {'ratio cold/warm':<26} {process_ratio:8.1f}x   (information; the target applies above)")


if __name__ == "__main__":
    sys.exit(run_recorded(main))
