"""Many short-lived agents through one gateway: real agent processes, real mcp-server-time.

The agents are tests/agents/agent.py processes forked from a pre-imported zygote (tests/zygote.py):
each is its own process with its own MCP session, without paying `import mcp` (over a second) twenty times.
Spawns go through `spawn_agent`, the code `orchestrator spawn` runs, on its warm path.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator import AgentProfile, Gateway, GatewaySettings, MCPManager, Settings
from orchestrator._config import ToolSearchOverrides
from orchestrator._launch import SpawnSummary, spawn_agent

from .conftest import TESTS_DIR, TIME_SERVER, forked_command, start_zygote, stdio_server_config, stop_zygote

AGENTS = TESTS_DIR / "agents"
CONCURRENT_SPAWNS = 20
SPAWNS_DONE_S = 90.0
# Bounds, not expectations: twenty agents on two cores finish in a few seconds.
TOKEN = "gateway-spawns-test-secret"
# The gateway's admin secret, shared with `spawn_agent` through the settings as `gateway.token` would be.

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    socket_path = str(tmp_path_factory.mktemp("zygote") / "agents.sock")
    process = start_zygote(socket_path, AGENTS / "agent.py")
    yield socket_path
    stop_zygote(process)


@pytest.fixture(scope="module")
async def warm(tmp_path_factory: pytest.TempPathFactory, zygote: str) -> AsyncIterator[tuple[Settings, Path]]:
    out = tmp_path_factory.mktemp("agent-results")
    command = forked_command(zygote, AGENTS / "agent.py", "--config", "{mcp_config}", "--out", f"{out}/{{task}}.json")
    agents = {
        "small": AgentProfile(command=command, timeout_s=60, tool_search=ToolSearchOverrides(threshold_tokens=0)),
        "big": AgentProfile(command=command, timeout_s=60, tool_search=ToolSearchOverrides(threshold_tokens=100_000)),
    }
    time_server = stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")
    settings = Settings(
        mcp={"servers": {"time": time_server}, "cache_dir": tmp_path_factory.mktemp("cache")},
        agents=agents,
        gateway=GatewaySettings(token=TOKEN),
    )
    async with MCPManager(settings) as manager:
        gateway = Gateway(settings, manager)
        async with gateway.running("127.0.0.1", 0) as base:
            port = int(base.rsplit(":", 1)[1])
            yield settings.model_copy(update={"gateway": GatewaySettings(port=port, token=TOKEN)}), out
        gateway.close()


def _result(out: Path, task: str) -> dict:
    return json.loads((out / f"{task}.json").read_text())


def _time_server_pids() -> set[int]:
    """This process's children running mcp-server-time: its launchers (tests/forked.py), from /proc."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"-m\x00mcp_server_time\x00" in cmdline:  # its launcher; not the zygote
            pids.add(int(entry.name))
    return pids


async def test_twenty_spawns_at_once_share_one_gateway_and_one_server_process(warm: tuple[Settings, Path]) -> None:
    settings, out = warm
    servers_before = _time_server_pids()
    assert len(servers_before) == 1
    summaries: dict[str, SpawnSummary] = {}

    async def one(task: str) -> None:
        summaries[task] = await spawn_agent(settings, task, "small")

    with anyio.fail_after(SPAWNS_DONE_S):
        async with anyio.create_task_group() as tg:
            for index in range(CONCURRENT_SPAWNS):
                tg.start_soon(one, f"concurrent-{index:02d}")
    assert len(summaries) == CONCURRENT_SPAWNS
    for task, summary in summaries.items():
        assert summary.ok, (task, summary, _result(out, task))
        assert (summary.path, summary.mode, summary.searches, summary.expands, summary.calls) == (
            "warm",
            "search",
            1,
            1,
            1,
        )
        report = _result(out, task)
        assert report["tool"] == "time__get_current_time" and report["result"]["timezone"] == "UTC"
    assert len({summary.spawn_id for summary in summaries.values()}) == CONCURRENT_SPAWNS
    assert _time_server_pids() == servers_before  # started once, never again


async def test_the_same_agent_script_works_in_full_mode_and_in_search_mode(warm: tuple[Settings, Path]) -> None:
    settings, out = warm
    full = await spawn_agent(settings, "mode-full", "big")
    search = await spawn_agent(settings, "mode-search", "small")
    assert full.ok and search.ok
    assert (full.mode, full.searches, full.calls, full.tokens_saved) == ("full", 0, 1, 0)
    assert (search.mode, search.searches, search.expands, search.calls) == ("search", 1, 1, 1)
    assert _result(out, "mode-full")["mode"] == "full" and _result(out, "mode-search")["mode"] == "search"
    assert _result(out, "mode-full")["result"]["timezone"] == _result(out, "mode-search")["result"]["timezone"] == "UTC"


async def test_an_agent_that_overruns_its_timeout_is_stopped(warm: tuple[Settings, Path]) -> None:
    settings, _ = warm
    # Same profile name as the gateway knows (it plans); the local profile says what to launch.
    sleeper = AgentProfile(command=[sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=0.5)
    slow = settings.model_copy(update={"agents": {**settings.agents, "small": sleeper}})
    with anyio.fail_after(10):
        summary = await spawn_agent(slow, "sleepy", "small")
    assert summary.exit_status == "timeout" and not summary.ok
