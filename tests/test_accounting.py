"""Session accounting: the cost model (pure), the round estimate, the spawn log, and the gateway recording
sessions of real MCP clients (metrics by agent and mode, `GET /spawns/<id>`, one log line per spawn).

Gateway tests serve tests/servers/basic.py in process (the SDK's in-memory transport behind the manager)
and talk to the gateway over streamable HTTP, as agents do.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client import Transport
from mcp.client._memory import InMemoryTransport  # the SDK's in-memory transport (used by mcp.Client)
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    Action,
    AgentProfile,
    ConfigError,
    Gateway,
    MCPManager,
    ServerConfig,
    SessionBasis,
    Settings,
    SpawnLog,
    SpawnRecord,
    Telemetry,
)
from orchestrator._accounting import (
    BATCH_GAP_S,
    DEFAULT_SEARCH_RESULT_TOKENS,
    MAX_RECORDED_ACTIONS,
    SessionRecorder,
    break_even,
    session_cost,
)
from orchestrator._config import ToolSearchOverrides
from orchestrator._spawnlog import FileSpawnLogStore, StoreSpawnLogStore, read_spawn_log, spawn_log_store
from orchestrator._store import FileStore
from orchestrator._telemetry.instruments import (
    SESSION_ACTIONS,
    SESSION_ROUNDS,
    SESSION_TOKENS_COUNTERFACTUAL,
    SESSION_TOKENS_SENT,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "servers"))
from basic import build

THINK_S = 2 * BATCH_GAP_S
"""A pause standing in for the model's turn between two rounds: past the batch gap, so the next call
starts a new round however fast the client is."""
EXTRA_TOOLS = 30
"""basic.py with 30 extra tools: a catalog where search mode sends less per round than full mode."""
BOUND_S = 30.0
"""Bound on one gateway scenario (an in-process server; seconds of work on a loaded machine)."""

SEARCH = SessionBasis("search", full_tokens=10_000, search_tokens=1_000, pinned=("s__pinned",))
FULL = SessionBasis("full", full_tokens=2_000, search_tokens=800, pinned=("s__pinned",))


def search(hits: int, tokens: int = 100) -> Action:
    return Action("search", result_tokens=tokens, hits=hits)


def expand(*tools: tuple[str, int]) -> Action:
    return Action("expand", result_tokens=sum(t for _, t in tools), tools=tools)


def call(name: str, schema: int = 50, result: int = 7) -> Action:
    return Action("call", result_tokens=result, tools=((name, schema),))


# --------------------------------------------------------------------------- the cost model


def test_a_search_mode_session_pays_the_base_each_round_expanded_schemas_after_and_each_result_once() -> None:
    batches = ((search(3, 120),), (expand(("s__a", 300)),), (call("s__a", 300, result=40),))
    cost = session_cost(SEARCH, batches)
    # 4 rounds (3 batches + the answer) x 1,000; s__a's 300 in rounds 3 and 4; one 120-token result.
    assert cost.rounds == 4 and cost.search_rounds == 4
    assert cost.search_mode_tokens == 4 * 1_000 + 2 * 300 + 120 == cost.tokens
    assert cost.search_result_tokens == 120
    # Full mode needs neither the search nor the expand round: 2 rounds x 10,000.
    assert (cost.full_rounds, cost.full_mode_tokens) == (2, 20_000) and cost.counterfactual == 20_000
    assert cost.saved == 20_000 - 4_720
    assert (cost.searches, cost.misses, cost.expands, cost.calls, cost.errors) == (1, 0, 1, 1, 0)
    assert cost.call_result_tokens == 40  # outside both costs
    assert cost.needed == ("s__a",)


def test_a_batch_that_calls_as_well_as_searches_stays_a_round_in_full_mode() -> None:
    batches = ((search(0), call("s__pinned")), (search(0),), (expand(("s__b", 10)),), (call("s__b", 10),))
    cost = session_cost(SEARCH, batches)
    assert cost.rounds == 5 and cost.misses == 2
    assert cost.full_rounds == 3  # the miss-only and expand-only batches go; the mixed one stays


def test_a_full_mode_session_is_priced_in_search_mode_with_a_search_and_an_expand_per_new_tool() -> None:
    batches = ((call("s__a", 300), call("s__b", 200)), (call("s__a", 300),), (call("s__pinned"), call("s__c", 100)))
    cost = session_cost(FULL, batches, search_result_tokens=150)
    assert (cost.rounds, cost.full_mode_tokens) == (4, 4 * 2_000) and cost.tokens == 8_000
    # Search mode: [search a, search b] [expand a b] [a b] [a] [search c] [expand c] [pinned c] [answer].
    assert cost.search_rounds == 8
    carried = 0 + 0 + 500 + 500 + 500 + 500 + 600 + 600
    assert cost.search_mode_tokens == 8 * 800 + carried + 3 * 150 == cost.counterfactual
    assert cost.search_result_tokens == 450
    assert cost.needed == ("s__a", "s__b", "s__c")  # the pinned tool needs no finding


def test_a_full_mode_session_without_searches_of_its_own_prices_them_at_the_default() -> None:
    cost = session_cost(FULL, ((call("s__a"),),))
    assert cost.search_result_tokens == DEFAULT_SEARCH_RESULT_TOKENS


def test_errors_are_rounds_but_neither_searches_nor_expands_and_expand_nothing() -> None:
    failed_search = Action("search", result_tokens=30, error=True)
    failed_expand = Action("expand", result_tokens=30, tools=(("s__x", 999),), error=True)
    cost = session_cost(SEARCH, ((failed_search,), (failed_expand,), (Action("call", error=True),)))
    assert (cost.rounds, cost.searches, cost.misses, cost.expands, cost.calls, cost.errors) == (4, 0, 0, 0, 1, 3)
    assert cost.search_mode_tokens == 4 * 1_000  # no result paid, nothing carried
    assert cost.needed == ()


def test_the_break_even_is_where_both_modes_cost_the_same() -> None:
    costs = [
        session_cost(SEARCH, ((search(2),), (expand(("s__a", 300)),), (call("s__a", 300),))),
        session_cost(FULL, ((call("s__a", 300),), (call("s__b", 100),))),
    ]
    catalog = break_even(costs)
    assert catalog is not None
    full_rounds = sum(cost.full_rounds for cost in costs)
    search_tokens = sum(cost.search_mode_tokens for cost in costs)
    assert full_rounds * catalog == pytest.approx(search_tokens)
    assert break_even([]) is None


def test_actions_and_bases_survive_json_and_bad_ones_name_the_field() -> None:
    action = Action("expand", result_tokens=12, tools=(("s__a", 5), ("s__b", 6)))
    assert Action.from_json(json.loads(json.dumps(action.to_json()))) == action
    assert SessionBasis.from_json(SEARCH.to_json()) == SEARCH
    with pytest.raises(ValueError, match="action kind 'list'"):
        Action.from_json({"kind": "list"})
    with pytest.raises(ValueError, match=r"action result_tokens: expected a whole number from 0 to 1e\+15, got -3"):
        Action.from_json({"kind": "call", "result_tokens": -3})
    with pytest.raises(ValueError, match="basis full_tokens"):
        SessionBasis.from_json({"mode": "full", "search_tokens": 1})
    # What another process wrote: sums of counts past a float's range overflowed later, in `tune`.
    with pytest.raises(ValueError, match=r"action result_tokens: .* got a huge number"):
        Action.from_json({"kind": "call", "result_tokens": 10**400})
    with pytest.raises(ValueError, match="action: expected an object, got int"):
        Action.from_json(1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the round estimate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_overlapping_calls_and_calls_right_after_a_response_share_a_round_and_a_pause_starts_one() -> None:
    clock = Clock()
    recorder = SessionRecorder(clock=clock)
    first = recorder.begin()
    second = recorder.begin()  # arrives while the first is in flight: a parallel batch
    recorder.end(first, call("a"))
    clock.now += BATCH_GAP_S / 10
    recorder.end(second, call("b"))
    clock.now += BATCH_GAP_S / 10
    third = recorder.begin()  # right after the last response: the client running its batch in turn
    recorder.end(third, call("c"))
    clock.now += BATCH_GAP_S * 2  # the model's turn
    recorder.listed()  # a listing is no round of its own
    fourth = recorder.begin()
    recorder.end(fourth, call("d"))
    assert (first, second, third, fourth) == (0, 0, 0, 1)
    assert [[action.tools[0][0] for action in batch] for batch in recorder.batches()] == [["a", "b", "c"], ["d"]]
    assert recorder.lists == 1


def test_a_cancelled_call_still_ends_its_round_and_runaway_sessions_keep_counting_rounds_only() -> None:
    clock = Clock()
    recorder = SessionRecorder(clock=clock)
    recorder.end(recorder.begin(), None)
    assert recorder.batches() == ((),)
    for _ in range(MAX_RECORDED_ACTIONS + 2):
        clock.now += 1
        recorder.end(recorder.begin(), call("a"))
    batches = recorder.batches()
    assert len(batches) == MAX_RECORDED_ACTIONS + 3
    assert sum(len(batch) for batch in batches) == MAX_RECORDED_ACTIONS and recorder.dropped == 2
    # Rounds past the cap cost a pointer each: 200,000 more single-call rounds, well under 64 bytes each
    # (an empty list each was 56 bytes plus the pointer).
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200_000):
            clock.now += 1
            recorder.end(recorder.begin(), call("a"))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 200_000 * 16, grown
    assert len(recorder.batches()) == MAX_RECORDED_ACTIONS + 3 + 200_000 and recorder.dropped == 200_002


# --------------------------------------------------------------------------- the spawn log


class HeldStore:
    """A spawn-log store whose writes wait until the test lets them through."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.release = threading.Event()
        self.writer: str | None = None

    def append_line(self, line: str) -> None:
        self.release.wait(BOUND_S)
        self.writer = threading.current_thread().name
        self.lines.append(line)

    def read_lines(self) -> Iterator[str]:
        return iter(self.lines)


def record(spawn_id: str = "abc", agent: str = "coder") -> SpawnRecord:
    return SpawnRecord(
        id=spawn_id,
        agent=agent,
        task_id="t1",
        mode="search",
        ended="closed",
        opened_at=1.0,
        duration_s=2.0,
        catalog_version="v1",
        threshold_tokens=6000,
        basis=SEARCH,
        batches=((search(1),), (call("s__a"),)),
        session={"tokens": 1},
    )


def test_appending_returns_before_the_store_has_written_and_close_writes_what_is_queued() -> None:
    store = HeldStore()
    log = SpawnLog(store)
    log.append(record("one"))  # the store holds the write: append must not wait for it
    log.append(record("two"))
    assert store.lines == []
    store.release.set()
    assert log.flush()
    assert [json.loads(line)["id"] for line in store.lines] == ["one", "two"]
    assert store.writer == "orchestrator-spawn-log"
    log.append(record("three"))
    log.close()
    assert len(store.lines) == 3
    log.append(record("late"))  # after close: dropped, never raised
    assert len(store.lines) == 3


def test_the_file_log_reads_back_its_records_and_counts_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "spawns.jsonl"
    log = SpawnLog(FileSpawnLogStore(path))
    log.append(record("one"))
    log.close()
    with path.open("a", encoding="utf-8") as file:
        file.write("not json\n")
        file.write(json.dumps({"v": 99, "id": "x"}) + "\n")
        file.write(json.dumps({**record("two").to_json(), "batches": [[{"kind": "list"}]]}) + "\n")
    read = read_spawn_log(path)
    assert [item.id for item in read.records] == ["one"]
    assert read.records[0] == record("one")
    assert read.skipped == 3 and read.first_problem is not None and read.first_problem.startswith(f"{path}:2: ")
    assert (path.stat().st_mode & 0o777) == 0o600
    with pytest.raises(ConfigError, match="no such file"):
        read_spawn_log(tmp_path / "missing.jsonl")


def test_with_a_shared_store_the_log_is_one_list_every_writer_appends_to(tmp_path: Path) -> None:
    settings = Settings(gateway={"spawn_log": tmp_path / "team.jsonl"}, store={"url": "redis://unused:6379/0"})
    store = FileStore(tmp_path / "store")  # the files store stands in for Redis: the same interface
    where = spawn_log_store(settings, store)
    assert isinstance(where, StoreSpawnLogStore) and where.key == "spawnlog/team.jsonl"
    for name in ("one", "two"):  # two replicas, one list
        log = SpawnLog(StoreSpawnLogStore(store, "team.jsonl"))
        log.append(record(name))
        log.close()
    read = read_spawn_log(where.path, where)
    assert [item.id for item in read.records] == ["one", "two"] and read.records[0] == record("one")
    assert not (tmp_path / "team.jsonl").exists()
    local = Settings(gateway={"spawn_log": tmp_path / "team.jsonl"})
    assert isinstance(spawn_log_store(local, store), FileSpawnLogStore)  # no store.url: the file
    assert spawn_log_store(Settings(), store) is None  # no spawn log: off


# --------------------------------------------------------------------------- the gateway


def in_process(name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport:
    return InMemoryTransport(build("basic", EXTRA_TOOLS))


def settings_for(tmp_path: Path, spawn_log: Path | None = None) -> Settings:
    agents = {
        "searcher": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0)),
        "fuller": AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=1_000_000)),
    }
    return Settings(
        mcp={
            "servers": {"basic": ServerConfig(command="unused-basic")},  # the factory decides the transport
            "cache_dir": tmp_path / "cache",
            "tool_search": {"ranking": "lexical"},
        },
        agents=agents,
        gateway={"spawn_log": spawn_log},
    )


@contextlib.asynccontextmanager
async def serving(settings: Settings, telemetry: Telemetry) -> AsyncIterator[tuple[Gateway, str]]:
    async with MCPManager(settings, transport_factory=in_process) as manager:
        gateway = Gateway(settings, manager, telemetry=telemetry)
        try:
            async with gateway.running("127.0.0.1", 0) as base:
                yield gateway, base
        finally:
            gateway.close()


@contextlib.asynccontextmanager
async def agent(url: str, token: str) -> AsyncIterator[Client]:
    """A real MCP client over streamable HTTP, as an agent connects."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def admin(gateway: Gateway, base: str) -> httpx2.AsyncClient:
    """The admin API (POST/GET/DELETE /spawns) with the gateway's secret."""
    return httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {gateway.credentials.admin_secret}"})


async def search_session(client: Client) -> None:
    """list, then four rounds: a miss, a hit, an expand, two calls at once."""
    await client.list_tools()
    assert (await client.call_tool("tool_search", {"query": "zzqx florble"})).structured_content["outcome"] == "miss"
    await anyio.sleep(THINK_S)
    assert (await client.call_tool("tool_search", {"query": "echo text"})).structured_content["outcome"] == "hit"
    await anyio.sleep(THINK_S)
    assert not (await client.call_tool("expand_tools", {"names": ["basic__echo", "basic__add"]})).is_error
    await anyio.sleep(THINK_S)
    async with anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "call_tool", {"name": "basic__echo", "arguments": {"text": "hi"}})
        group.start_soon(client.call_tool, "call_tool", {"name": "basic__add", "arguments": {"a": 1, "b": 2}})


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


@pytest.mark.anyio
async def test_a_spawn_session_is_shown_while_open_then_recorded_by_agent_and_mode_and_logged(
    tmp_path: Path, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    log = tmp_path / "spawns.jsonl"
    with anyio.fail_after(BOUND_S):
        async with serving(settings_for(tmp_path, log), telemetry) as (gateway, base), admin(gateway, base) as api:
            spawn = (await api.post("/spawns", json={"task": "echo it", "agent": "searcher"})).json()
            async with agent(spawn["url"], spawn["token"]) as client:
                await search_session(client)
            shown = (await api.get(f"/spawns/{spawn['id']}")).json()["session"]
            assert not log.exists()  # nothing is logged while the spawn is open
            closed = (await api.delete(f"/spawns/{spawn['id']}")).json()["session"]
    # Rounds: four batches (miss, hit, expand, the two calls) and the answer.
    expected = {"mode": "search", "rounds": 5, "searches": 2, "misses": 1, "expands": 1, "calls": 2, "errors": 0}
    assert {key: shown[key] for key in expected} == expected and closed == shown
    assert closed["full_mode"]["rounds"] == 2  # full mode: the calls' round and the answer
    assert closed["needed_tools"] == ["basic__add", "basic__echo"]  # expanded in one round: by name
    assert closed["saved_tokens"] == closed["counterfactual_tokens"] - closed["tokens"]

    [line] = log.read_text(encoding="utf-8").splitlines()
    logged = SpawnRecord.from_json(json.loads(line))
    assert (logged.id, logged.agent, logged.mode, logged.ended) == (spawn["id"], "searcher", "search", "closed")
    assert logged.session == closed and logged.lists == 1  # the agent's own listing; calls list nothing
    assert session_cost(logged.basis, logged.batches).to_dict() == closed  # the line is enough to recompute

    attributes = {"agent": "searcher", "mode": "search"}
    [rounds] = metric_points(reader, SESSION_ROUNDS)
    assert dict(rounds.attributes) == attributes and (rounds.count, rounds.sum) == (1, 5)
    [sent] = metric_points(reader, SESSION_TOKENS_SENT)
    [counterfactual] = metric_points(reader, SESSION_TOKENS_COUNTERFACTUAL)
    assert (sent.sum, counterfactual.sum) == (closed["tokens"], closed["counterfactual_tokens"])
    actions = {point.attributes["action"]: point.value for point in metric_points(reader, SESSION_ACTIONS)}
    assert actions == {"hit": 1, "miss": 1, "expand": 1, "call": 2}
    for name in (SESSION_ROUNDS, SESSION_TOKENS_SENT, SESSION_TOKENS_COUNTERFACTUAL, SESSION_ACTIONS):
        for point in metric_points(reader, name):  # no series with an empty agent, mode or action
            assert all(value != "" for value in point.attributes.values()), (name, point.attributes)


@pytest.mark.anyio
async def test_a_full_mode_session_is_priced_in_search_mode_and_open_spawns_are_logged_when_the_gateway_stops(
    tmp_path: Path, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    log = tmp_path / "spawns.jsonl"
    with anyio.fail_after(BOUND_S):
        async with serving(settings_for(tmp_path, log), telemetry) as (gateway, base):
            async with admin(gateway, base) as api:
                spawn = (await api.post("/spawns", json={"task": "add", "agent": "fuller"})).json()
            async with agent(spawn["url"], spawn["token"]) as client:
                await client.list_tools()
                assert not (await client.call_tool("basic__add", {"a": 1, "b": 2})).is_error
                await anyio.sleep(THINK_S)
                assert (await client.call_tool("basic__fail", {"message": "no"})).is_error
            assert gateway.open_spawns == 1
    # The gateway stopped with the spawn open: its session was still recorded and logged.
    [line] = log.read_text(encoding="utf-8").splitlines()
    logged = json.loads(line)
    assert (logged["mode"], logged["ended"]) == ("full", "gateway_stopped")
    session = logged["session"]
    assert (session["rounds"], session["calls"], session["errors"], session["searches"]) == (3, 2, 1, 0)
    # Search mode would have searched and expanded before each of the two new tools: 4 more rounds.
    assert session["search_mode"]["rounds"] == 7
    assert session["search_mode"]["search_result_tokens"] == 2 * DEFAULT_SEARCH_RESULT_TOKENS
    assert session["tokens"] == 3 * logged["basis"]["full_tokens"]
    [point] = metric_points(reader, SESSION_ROUNDS)
    assert dict(point.attributes) == {"agent": "fuller", "mode": "full"}


@pytest.mark.anyio
async def test_without_a_spawn_log_sessions_are_still_measured_and_the_default_endpoint_keeps_none(
    tmp_path: Path, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    with anyio.fail_after(BOUND_S):
        async with serving(settings_for(tmp_path), telemetry) as (gateway, base):
            assert gateway.sessions.spawn_log is None
            async with agent(f"{base}/mcp", gateway.credentials.admin_secret) as client:
                await client.call_tool("tool_search", {"query": "echo"})
            handle = await gateway.run_sync(gateway.open_spawn, "t", "searcher")
            stats = await gateway.run_sync(gateway.close_spawn, handle.id)
    assert stats["session"]["rounds"] == 1  # opened and closed without a call: the answer round only
    assert [point.sum for point in metric_points(reader, SESSION_ROUNDS)] == [1]  # the /mcp searches: no session
