"""The gateway's worker pool: searches, expands, call checks and history files run off the event loop.

One manager for the module (the published mcp-server-time over stdio); each test starts its own gateway
on 127.0.0.1:<free port> with `gateway.workers` as it needs, and MCP clients connect over streamable
HTTP like agents do. The ranking is a real `ScoreBlend` that holds every search until the test releases
it (a stand-in for a slow query embedding), handed in through the gateway's embedding runtime.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from orchestrator import (
    AgentProfile,
    EmbeddingRuntime,
    Gateway,
    GatewaySettings,
    MCPManager,
    Settings,
    TaskHistory,
    ToolCatalog,
    ToolSearchSettings,
)
from orchestrator._config import ToolSearchOverrides
from orchestrator._planning import task_key

from .conftest import TIME_SERVER, stdio_server_config

HELD_LIMIT_S = 30.0
# A held search gives up after this long (it fails the test instead of hanging the worker thread).
SEEN_S = 10.0
# Bound on what must happen promptly while a search is held: a call, a search reaching the blend.
AGENT = "searcher"
TIME_TOOL = "time__get_current_time"

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class HeldBlend:
    """A ScoreBlend that holds each search in `blend` until `release` is set, then ranks lexically."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.threads: list[int] = []
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()

    def prepare(self, catalog: ToolCatalog) -> None:
        pass

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            self.threads.append(threading.get_ident())
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.entered.release()
        try:
            if not self.release.wait(HELD_LIMIT_S):
                raise RuntimeError("HeldBlend: never released")
            return lexical, candidates
        finally:
            with self._lock:
                self.inside -= 1

    async def wait_entered(self, count: int) -> None:
        """Until `count` more searches have reached `blend` (bounded by SEEN_S)."""
        with anyio.fail_after(SEEN_S):
            for _ in range(count):
                await anyio.to_thread.run_sync(self.entered.acquire)


class HeldEmbeddings(EmbeddingRuntime):
    """An embedding runtime whose hybrid blend is a `HeldBlend` (nothing is loaded)."""

    def __init__(self, blend: HeldBlend) -> None:
        super().__init__(None)
        self.held = blend

    def create_blend(self, search_settings: ToolSearchSettings) -> Any:
        return self.held


class ThreadNotingHistory(TaskHistory):
    """Task history in files that notes which thread wrote each record."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.threads: list[int] = []

    def record(self, task_id: str, called: Iterable[str]) -> list[str]:
        self.threads.append(threading.get_ident())
        return super().record(task_id, called)


def worker_settings(cache_dir: Path, workers: int) -> Settings:
    servers = {"time": stdio_server_config(TIME_SERVER, "--local-timezone", "UTC")}
    agents = {AGENT: AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))}
    return Settings(
        mcp={"servers": servers, "cache_dir": cache_dir, "tool_search": {"ranking": "hybrid"}},
        agents=agents,
        gateway=GatewaySettings(workers=workers),
    )


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPManager]:
    async with MCPManager(worker_settings(tmp_path_factory.mktemp("cache"), 0)) as manager:
        yield manager


@contextlib.asynccontextmanager
async def serving(
    manager: MCPManager, tmp_path: Path, workers: int, blend: HeldBlend, history: TaskHistory | None = None
) -> AsyncIterator[Gateway]:
    settings = worker_settings(tmp_path / "cache", workers)
    gateway = Gateway(settings, manager, history=history, embeddings=HeldEmbeddings(blend))
    try:
        async with gateway.running("127.0.0.1", 0):
            yield gateway
    finally:
        gateway.close()


@contextlib.asynccontextmanager
async def agent(gateway: Gateway, task: str) -> AsyncIterator[Client]:
    handle = await gateway.run_sync(gateway.open_spawn, task, AGENT)
    assert handle.plan.mode == "search"
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {handle.token}"}) as http,
        Client(streamable_http_client(handle.url, http_client=http)) as client,
    ):
        yield client


async def search(client: Client, results: list[Any]) -> None:
    results.append((await client.call_tool("tool_search", {"query": "current time timezone"})).structured_content)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded by SEEN_S) until `condition()` holds: state no event announces (the pool's queue)."""
    with anyio.fail_after(SEEN_S):
        while not condition():  # noqa: ASYNC110 (a CapacityLimiter signals nothing when a task queues)
            await anyio.sleep(0.01)


async def test_a_search_held_in_a_worker_does_not_hold_up_another_agents_call(
    manager: MCPManager, tmp_path: Path
) -> None:
    blend = HeldBlend()
    async with (
        serving(manager, tmp_path, 2, blend) as gateway,
        agent(gateway, "slow search") as slow,
        agent(gateway, "quick call") as quick,
        anyio.create_task_group() as tg,
    ):
        found: list[Any] = []
        tg.start_soon(search, slow, found)
        await blend.wait_entered(1)
        with anyio.fail_after(SEEN_S):
            result = await quick.call_tool("call_tool", {"name": TIME_TOOL, "arguments": {"timezone": "UTC"}})
        assert not result.is_error and found == []  # answered while the search was still held
        blend.release.set()
    assert TIME_TOOL in [hit["name"] for hit in found[0]["hits"]]


async def test_the_worker_pool_bounds_how_many_searches_run_at_once(manager: MCPManager, tmp_path: Path) -> None:
    blend = HeldBlend()
    async with serving(manager, tmp_path, 2, blend) as gateway:
        found: list[Any] = []
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(agent(gateway, f"task {n}")) for n in range(4)]
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(search, client, found)
                await blend.wait_entered(2)
                await until(lambda: gateway.workers()["waiting"] == 2)
                assert gateway.health()["workers"] == {"threads": 2, "busy": 2, "waiting": 2}
                assert blend.inside == 2
                blend.release.set()
        assert len(found) == 4 and all(result["outcome"] == "hit" for result in found)
        assert blend.most_inside == 2 and len(blend.threads) == 4


@pytest.mark.parametrize(("workers", "on_loop"), [(0, True), (2, False)])
async def test_searches_and_history_writes_run_on_the_loop_only_with_no_workers(
    manager: MCPManager, tmp_path: Path, workers: int, on_loop: bool
) -> None:
    blend = HeldBlend()
    blend.release.set()
    history = ThreadNotingHistory(tmp_path / "tasks")
    loop_thread = threading.get_ident()
    async with serving(manager, tmp_path, workers, blend, history) as gateway, agent(gateway, "noted task") as client:
        found: list[Any] = []
        await search(client, found)
        result = await client.call_tool("call_tool", {"name": TIME_TOOL, "arguments": {"timezone": "UTC"}})
        assert not result.is_error and found[0]["outcome"] == "hit"
    assert TaskHistory(tmp_path / "tasks").recent(task_key("noted task")) == [TIME_TOOL]  # from its file
    assert (blend.threads[0] == loop_thread) is on_loop
    assert (history.threads[0] == loop_thread) is on_loop


async def test_one_agents_flood_holds_at_most_half_the_pool_and_another_agent_is_served(
    manager: MCPManager, tmp_path: Path
) -> None:
    """Three searches from one spawn take one of the two threads (the rest wait in that spawn's own queue),
    so another spawn's search runs at once instead of waiting behind them."""
    blend = HeldBlend()
    async with (
        serving(manager, tmp_path, 2, blend) as gateway,
        agent(gateway, "flooding task") as flooding,
        agent(gateway, "other task") as other,
    ):
        found: list[Any] = []
        async with anyio.create_task_group() as tg:
            try:
                for _ in range(3):
                    tg.start_soon(search, flooding, found)
                await blend.wait_entered(1)
                await anyio.sleep(0.2)  # time for a second flooding search to take the free thread, were it let
                assert blend.inside == 1 and gateway.workers()["busy"] == 1
                tg.start_soon(search, other, found)
                await blend.wait_entered(1)  # the other spawn's search reached the blend: it got the free thread
                assert blend.inside == 2
            finally:
                blend.release.set()
        assert len(found) == 4 and all(result["outcome"] == "hit" for result in found)
        assert blend.most_inside == 2
