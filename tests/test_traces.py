"""Search traces: redaction before storing, the trace store's bounds (per spawn, per tool, in total, by age),
forgetting, and the JSON lines format."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from orchestrator import Trace, TraceRecorder, TraceSettings, TraceStore, parse_trace, redact
from orchestrator._events import Caller, CallEvent, RankedTool, SearchEvent
from orchestrator._store import FileStore, MemoryStore
from orchestrator._task_memory import TaskMemory

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("My username is JaneSmith and my password is hunter2.", "hunter2"),
        ("connect with token=abc123xyz please", "abc123xyz"),
        ('set api_key: "k-1234"', "k-1234"),
        ("the client secret is s3cr3t!", "s3cr3t!"),
        ("clone https://bob:pa55word@git.example.com/x/y.git", "pa55word"),
        ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
        ("use sk-ant-REDACTEDqwertyuiop0987654321 for the model", "sk-ant-"),
        ("push with ghp_0123456789abcdefghijABCDEFGHIJ", "ghp_0123"),
        ("aws key AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("slack xoxb-1234567890-abcdefghij", "xoxb-"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlc2ln here", "eyJ"),
        ("digest 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "9f86d0818"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA"),
        ("my signing_key is 0123456789abcdef0123456789abcdef", "0123456789abcdef"),
        # Structured forms, found by red-teaming: a quoted name, a longer name, a flag, curl's -u.
        ('config {"password": "hunter2"}', "hunter2"),
        ("{'api_key': 'Xy7short'}", "Xy7short"),
        ("DB_PASSWORD=hunter2 ./run", "hunter2"),
        ("export GITHUB_TOKEN=hunter2xyz", "hunter2xyz"),
        ("MYSQL_PWD=hunter2 mysql -u root", "hunter2"),
        ("mysql -u root --password hunter2", "hunter2"),
        ("curl -u admin:hunter2 https://host/api", "hunter2"),
    ],
)
def test_obvious_secrets_are_redacted(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert "***" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "reset the password for the admin account",
        "create a GitHub token for CI",
        "GetUserToken then AddAlarm",
        "search files matching *.txt in the repo",
        "current time in Europe/Paris",
        "fetch https://example.com/docs/getting-started",
    ],
)
def test_ordinary_requests_are_kept_as_they_are(text: str) -> None:
    assert redact(text) == text


def test_a_spawn_counts_once_per_tool_its_latest_trace_kept() -> None:
    clock = Clock()
    store = TraceStore(MemoryStore(), clock=clock)
    store.record([Trace("weather in Paris", "w", "forecast", "s1", clock.now - 10)])
    store.record([Trace("forecast for Rome", "w", "forecast", "s1", clock.now - 5)])
    store.record([Trace("forecast for Oslo", "w", "forecast", "s2", clock.now)])
    assert [(t.spawn, t.query) for t in store.load()] == [("s1", "forecast for Rome"), ("s2", "forecast for Oslo")]


def test_a_spawn_sending_new_long_queries_does_not_grow_the_recorders_memory() -> None:
    """Found by red-teaming: a spawn's listener remembered every (tool, whole query) it stored, so an agent
    alternating new 8,000-character searches with one call grew the gateway by its queries for the spawn's
    life. It keeps short digests now, and only the newest ones."""
    hear = TraceRecorder(TraceStore(MemoryStore())).listener()
    caller = Caller(agent="searcher", spawn="s1")
    hit = RankedTool("time__now", "time", "now", 1, 1.0)

    def pairs(start: int, count: int) -> None:
        for n in range(start, start + count):
            hear(SearchEvent(caller=caller, outcome="hit", query=f"{n} " + "q" * 8_000, hits=(hit,)))
            hear(CallEvent(caller=caller, outcome="ok", name="time__now", tool=("time__now", 10), server="time"))

    pairs(0, 100)  # the searches remembered fill up first
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    pairs(100, 2_000)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 1_000_000  # was 16 MB: every query kept whole


def test_request_text_is_redacted_before_it_is_stored(tmp_path: Path) -> None:
    store = TraceStore(FileStore(tmp_path))
    store.record([Trace("log in as bob, password: hunter2", "auth", "login", "s1", time.time())])
    files = list((tmp_path / "traces").iterdir())
    assert len(files) == 1 and "hunter2" not in files[0].read_text()
    assert [t.query for t in TraceStore(FileStore(tmp_path)).load()] == ["log in as bob, password: ***"]


def test_failed_calls_and_empty_requests_are_never_stored() -> None:
    store = TraceStore(MemoryStore())
    kept = store.record([Trace("q", "s", "t", "a", 1.0e9, ok=False), Trace("  ", "s", "t", "b", 1.0e9)])
    assert kept == 0 and store.load() == []


def test_each_tool_keeps_its_newest_traces_up_to_max_per_tool() -> None:
    clock = Clock()
    store = TraceStore(MemoryStore(), TraceSettings(max_per_tool=3), clock=clock)
    kept = store.record([Trace(f"q{i}", "s", "t", f"spawn{i}", clock.now - 100 + i) for i in range(10)])
    assert [t.spawn for t in store.load()] == ["spawn7", "spawn8", "spawn9"] and kept == 3


def test_traces_past_retention_are_gone() -> None:
    clock = Clock()
    store = TraceStore(MemoryStore(), TraceSettings(retention_days=10), clock=clock)
    kept = store.record(
        [Trace("old", "s", "t", "a", clock.now - 11 * DAY), Trace("new", "s", "t", "b", clock.now - DAY)]
    )
    assert [t.query for t in store.load()] == ["new"]
    assert kept == 1  # what `traces import` reports: "imported 2" counted the one retention dropped at once
    clock.now += 10 * DAY
    assert store.load() == []


def test_prune_forgets_departed_tools_and_keeps_the_newest_within_max_total() -> None:
    clock = Clock()
    store = TraceStore(MemoryStore(), TraceSettings(max_total=3), clock=clock)
    store.record([Trace("q", "s", "gone", "a", clock.now - 1)])
    store.record([Trace(f"q{i}", "s", "kept", f"x{i}", clock.now - 10 + i) for i in range(4)])
    dropped = store.prune(lambda server, tool: tool != "gone")
    assert dropped == 2  # the departed tool's trace and the oldest beyond max_total
    assert [(t.tool, t.spawn) for t in store.load()] == [("kept", "x1"), ("kept", "x2"), ("kept", "x3")]


def test_clear_deletes_every_trace_and_stats_count_them() -> None:
    clock = Clock()
    store = TraceStore(MemoryStore(), clock=clock)
    store.record([Trace("a", "s", "t1", "x", clock.now - 5, rank=1), Trace("b", "s", "t2", "x", clock.now, rank=7)])
    store.record([Trace("c", "s", "t2", "y", clock.now - 1)])
    stats = store.stats()
    assert (stats.traces, stats.tools, stats.spawns) == (3, 2, 2)
    assert stats.oldest == clock.now - 5 and stats.newest == clock.now
    assert stats.found_at == {"1": 1, "6-10": 1, "not_found": 1}
    assert store.clear() == 3 and store.load() == []
    store.store.put("traces/junk", {"server": 1})  # damaged: no trace to count, still deleted
    assert store.clear() == 0 and store.store.scan("traces") == {}


def test_a_damaged_record_counts_as_absent() -> None:
    memory = MemoryStore()
    memory.put("traces/junk", {"server": 1, "traces": "no"})
    memory.put("traces/partial", {"server": "s", "tool": "t", "traces": [{"query": 3}, "x"]})
    assert TraceStore(memory).load() == []


def test_the_jsonl_format_round_trips() -> None:
    line = '{"query": "q", "server": "s", "tool": "t", "spawn": "p", "ok": true, "at": "2026-12-01T10:00:00Z"}'
    trace = parse_trace(json.loads(line), now=1_800_000_000.0)
    assert trace == Trace("q", "s", "t", "p", 1_796_119_200.0)
    assert trace.to_json() == json.loads(line)
    assert parse_trace({"query": "q", "server": "s", "tool": "t", "spawn": "p"}, now=5.0).at == 5.0


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "expected a JSON object"),
        ({"query": "q", "server": "s", "tool": "t"}, "'spawn' must be a non-empty string"),
        ({"query": "q", "server": "s", "tool": "t", "spawn": "p", "ok": "yes"}, "'ok' must be true or false"),
        ({"query": "q", "server": "s", "tool": "t", "spawn": "p", "at": "yesterday"}, "'at' 'yesterday' is not"),
    ],
)
def test_a_bad_line_names_what_is_wrong(data: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_trace(data, now=0.0)


def test_task_memory_offers_what_similar_tasks_called_once_min_spawns_called_it() -> None:
    clock = Clock()
    memory = TaskMemory(MemoryStore(), clock=clock)
    memory.learn("t1", "deploy the web service to staging", "s1", ["ci__deploy", "git__status"])
    assert memory.similar_tools("deploy the web service to production") == []  # one spawn steers nobody
    memory.learn("t2", "deploy the web service to the canary", "s2", ["ci__deploy"])
    assert memory.similar_tools("deploy the web service to production") == ["ci__deploy"]
    assert memory.similar_tools("deploy the web service to production", exclude="t2") == []
    assert memory.similar_tools("water the office plants") == []
    clock.now += 91 * DAY  # past retention
    assert memory.similar_tools("deploy the web service to production") == []


def test_task_memory_keeps_task_text_redacted() -> None:
    store = MemoryStore()
    TaskMemory(store).learn("t1", "log in with password: hunter2 and deploy", "s1", ["ci__deploy"])
    assert "hunter2" not in json.dumps(store.get("taskmemory/index"))


@pytest.mark.parametrize(
    ("at", "problem"),
    [
        ("2999-01-01T00:00:00Z", "is before 1970 or in the future"),
        (1e999, "is not a Unix time between 1970 and now"),
        (10**400, "is not a Unix time between 1970 and now"),
        (float("nan"), "is not a Unix time between 1970 and now"),
    ],
)
def test_an_import_line_from_the_future_or_past_a_floats_range_is_refused(at: object, problem: str) -> None:
    """Found by red-teaming: a trace dated 2999 outlived every real one (retention keeps the newest) and
    `1e999` or a 400-digit integer ended the import in a traceback."""
    with pytest.raises(ValueError, match=problem):
        parse_trace({"query": "q", "server": "s", "tool": "t", "spawn": "p", "at": at}, now=1_800_000_000.0)


def test_records_with_times_no_trace_can_have_are_skipped_not_fatal(tmp_path: Path) -> None:
    """Found by red-teaming: one record another process wrote with `at` = 10**400 or 1e300 made `traces
    stats`, `export` and `clear` fail with a traceback, hiding every good record."""
    clock = Clock()
    store = TraceStore(FileStore(tmp_path), clock=clock)
    store.record([Trace("what time is it", "time", "now", "s1", clock.now - 5, rank=1)])
    for name, at in (("huge", 10**400), ("far", 1e300), ("nan", float("nan"))):
        record = {"server": "s", "tool": name, "traces": [{"query": "q", "spawn": "x", "at": at}]}
        store.store.put(f"traces/{name}", record)
    assert [trace.tool for trace in store.load()] == ["now"]
    assert store.stats().traces == 1 and [line["tool"] for line in map(Trace.to_json, store.load())] == ["now"]
