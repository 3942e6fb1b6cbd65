"""Search traces: what each spawn searched for before the tools it called, kept in the store.

    Trace                        one call without error after a search: the search's text, the tool (its
                                 server and its own name there), the spawn, when, and the tool's rank
    TraceStore(store, settings)  one record per tool, `traces/<key>`: its latest trace from each spawn,
                                 bounded per tool, in total and by age; read by every replica
    TraceRecorder(traces)        `listener(...)`: an event listener per spawn (the gateway attaches one to
                                 every spawn; an in-process `MetaTools` takes one in `listeners`)

A trace is made from the meta-tool events (`_events.py`), never from the JSON handed to the agent: each
`tool_search` of a spawn is remembered with its ranked hits; when the spawn then calls a tool and the call
succeeds (outcome `ok`), the latest search that returned that tool (else the spawn's latest search) becomes
a trace for it. Calls without any search before them (pinned or listed tools) teach nothing, and failed
calls are never stored. Request text is redacted (`_redaction.py`) before anything is stored.

Each spawn counts once per tool: its latest trace replaces its earlier ones. The JSON lines format of
`orchestrator traces export|import` is one trace a line:
`{"query": "...", "server": "...", "tool": "...", "spawn": "...", "ok": true, "at": "2026-12-01T10:00:00Z"}`
(`at` optional; `rank` too).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._config import TraceSettings
from ._events import CallEvent, EventListener, MetaEvent, SearchEvent, rank_label
from ._redaction import redact
from ._store import Store, StoreError

__all__ = [
    "MAX_QUERY_CHARS",
    "NAMESPACE",
    "Trace",
    "TraceRecorder",
    "TraceStats",
    "TraceStore",
    "parse_trace",
]

log = logging.getLogger(__name__)

NAMESPACE = "traces"
"""The store namespace: one record per tool."""
MAX_QUERY_CHARS = 2000
"""Request text kept per trace: the words that find a tool come first; a pasted page does not need
keeping whole."""
SEARCHES_REMEMBERED = 16
"""Searches a spawn's listener keeps to match a later call against: an agent searches, expands, then
calls within a few requests."""
RECORDED_REMEMBERED = 1024
"""(tool, query) pairs a spawn's listener remembers having stored, as 16-byte digests, to skip storing one
again; the oldest are forgotten past this (the store keeps one trace per spawn and tool anyway). Unbounded,
an agent sending new long queries grew the gateway's memory by its queries' size for the spawn's life."""
DAY_S = 86_400.0


@dataclass(frozen=True)
class Trace:
    """One call without error of `server`'s `tool` after a search for `query`, by spawn `spawn`."""

    query: str
    server: str
    tool: str
    """The tool's own name on `server` (as in the retrieval sets' gold pairs): traces survive renaming."""
    spawn: str
    at: float
    """Unix time of the call."""
    ok: bool = True
    rank: int | None = None
    """The tool's rank in that search (1 first), None when the search did not return it."""

    def to_json(self) -> dict[str, Any]:
        """The export line (`at` as UTC ISO 8601)."""
        line: dict[str, Any] = {
            "query": self.query,
            "server": self.server,
            "tool": self.tool,
            "spawn": self.spawn,
            "ok": self.ok,
            "at": datetime.datetime.fromtimestamp(self.at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self.rank is not None:
            line["rank"] = self.rank
        return line


def parse_trace(data: Any, now: float) -> Trace:
    """One import line's object as a Trace (`at` missing: `now`).

    Raises:
        ValueError: naming the field that is missing or wrong.
    """
    if not isinstance(data, Mapping):
        raise ValueError("expected a JSON object")
    for key in ("query", "server", "tool", "spawn"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"{key!r} must be a non-empty string")
    ok = data.get("ok", True)
    if not isinstance(ok, bool):
        raise ValueError("'ok' must be true or false")
    rank = data.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ValueError("'rank' must be a positive integer")
    return Trace(data["query"], data["server"], data["tool"], data["spawn"], _time(data.get("at"), now), ok, rank)


def _time(value: Any, now: float) -> float:
    if value is None:
        return now
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("'at' must be an ISO 8601 time such as 2026-12-01T10:00:00Z")
    if isinstance(value, int | float):
        at = _valid_time(value, now)
        if at is None:
            raise ValueError(f"'at' {str(value)[:40]} is not a Unix time between 1970 and now")
        return at
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"'at' {value[:40]!r} is not an ISO 8601 time such as 2026-12-01T10:00:00Z") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    at = _valid_time(parsed.timestamp(), now)
    if at is None:  # a trace from the future would outlive every real one (retention keeps the newest)
        raise ValueError(f"'at' {value[:40]!r} is before 1970 or in the future")
    return at


CLOCK_SKEW_S = 86_400.0
"""How far in the future a trace's time may be (another replica's or machine's clock): later ones are refused,
as they would outlive every real trace (retention keeps the newest)."""


def _valid_time(value: Any, now: float) -> float | None:
    """`value` as a Unix time if it is one a trace can have (a finite number from 1970 to `now` plus
    CLOCK_SKEW_S), else None: records and import lines come from other processes and machines."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        at = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return at if 0 <= at <= now + CLOCK_SKEW_S else None  # NaN fails both comparisons


@dataclass(frozen=True)
class TraceStats:
    """What the store holds (`orchestrator traces stats`)."""

    traces: int
    tools: int
    spawns: int
    oldest: float | None
    newest: float | None
    found_at: dict[str, int]
    """Calls by the rank their tool had in the search before them: "1".."5", "6-10", "11+", "not_found"."""


class TraceStore:
    """Traces in a `Store`: per tool one record with its latest trace from each spawn.

    Args:
        store: files under the cache root, or Redis for replicas on several machines.
        settings: `mcp.tool_search.traces` (retention, caps).
        clock: Unix time now (tests move it).

    A record is replaced whole (read, changed, written): two replicas recording the same tool in the same
    instant may lose one trace, which evidence, counted over many spawns, does not notice. Within a process
    writes are serialised. Thread-safe; every call may block (files or the network).
    """

    def __init__(
        self, store: Store, settings: TraceSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings or TraceSettings()
        self._clock = clock
        self._lock = threading.Lock()

    @property
    def retention_s(self) -> float:
        return self.settings.retention_days * DAY_S

    def record(self, traces: Iterable[Trace]) -> int:
        """Store successful traces (redacted, cut to MAX_QUERY_CHARS); returns how many were kept. A spawn's
        newer trace of a tool replaces its older one; each tool keeps its `max_per_tool` newest."""
        by_tool: dict[tuple[str, str], list[Trace]] = {}
        for trace in traces:
            if trace.ok and trace.query.strip():
                by_tool.setdefault((trace.server, trace.tool), []).append(trace)
        kept = 0
        with self._lock:
            for (server, tool), group in by_tool.items():
                key = _key(server, tool)
                entries = {entry["spawn"]: entry for entry in self._entries(self.store.get(key))}
                new: list[dict[str, Any]] = []
                for trace in sorted(group, key=lambda item: item.at):
                    entries[trace.spawn] = {
                        "query": redact(trace.query[:MAX_QUERY_CHARS]),
                        "spawn": trace.spawn,
                        "at": trace.at,
                        **({"rank": trace.rank} if trace.rank is not None else {}),
                    }
                    new.append(entries[trace.spawn])
                written = self._write(key, server, tool, list(entries.values()))
                # What retention and max_per_tool let through (a trace past retention is never kept).
                kept += sum(1 for entry in new if any(entry is live for live in written))
        return kept

    def load(self) -> list[Trace]:
        """Every live trace (within retention), oldest first."""
        found: list[Trace] = []
        for record in self.store.scan(NAMESPACE).values():
            found.extend(self._traces(record))
        found.sort(key=lambda trace: trace.at)
        return found

    def prune(self, keep: Callable[[str, str], bool] | None = None) -> int:
        """Drop traces past retention, of tools `keep(server, tool)` rejects (they left the catalog), and the
        oldest beyond `max_total`; returns how many were dropped."""
        records = {name: self._traces(record) for name, record in self.store.scan(NAMESPACE).items()}
        kept = {
            name: traces if keep is None or not traces or keep(traces[0].server, traces[0].tool) else []
            for name, traces in records.items()
        }
        newest_first = sorted((trace.at for traces in kept.values() for trace in traces), reverse=True)
        limit = self.settings.max_total
        cutoff = newest_first[limit - 1] if len(newest_first) > limit else None
        dropped = 0
        with self._lock:
            for name, traces in records.items():
                survivors = [trace for trace in kept[name] if cutoff is None or trace.at >= cutoff]
                if not survivors:
                    self.store.delete(f"{NAMESPACE}/{name}")
                elif len(survivors) < len(traces):
                    entries = [self._entry(trace) for trace in survivors]
                    self._write(f"{NAMESPACE}/{name}", traces[0].server, traces[0].tool, entries)
                dropped += len(traces) - len(survivors)
        return dropped

    def clear(self) -> int:
        """Delete every trace, and every damaged record among them; returns how many traces there were."""
        count = sum(len(self._traces(record)) for record in self.store.scan(NAMESPACE).values())
        with self._lock:
            self.store.clear(NAMESPACE)
        return count

    def stats(self) -> TraceStats:
        traces = self.load()
        found: dict[str, int] = {}
        for trace in traces:
            bucket = rank_label(trace.rank)
            found[bucket] = found.get(bucket, 0) + 1
        return TraceStats(
            traces=len(traces),
            tools=len({(trace.server, trace.tool) for trace in traces}),
            spawns=len({trace.spawn for trace in traces}),
            oldest=traces[0].at if traces else None,
            newest=traces[-1].at if traces else None,
            found_at=found,
        )

    # ------------------------------------------------------------------ records

    def _write(self, key: str, server: str, tool: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Store the tool's entries that retention and `max_per_tool` keep; returns them."""
        now = self._clock()
        live = [entry for entry in entries if now - float(entry["at"]) < self.retention_s]
        live.sort(key=lambda entry: float(entry["at"]))
        live = live[-self.settings.max_per_tool :]
        if not live:
            self.store.delete(key)
            return live
        # The record lives as long as its newest trace may.
        ttl = self.retention_s - (now - float(live[-1]["at"]))
        self.store.put(key, {"server": server, "tool": tool, "traces": live}, ttl_s=max(ttl, 1.0))
        return live

    def _entries(self, record: Any) -> list[dict[str, Any]]:
        return [self._entry(trace) for trace in self._traces(record)]

    @staticmethod
    def _entry(trace: Trace) -> dict[str, Any]:
        entry: dict[str, Any] = {"query": trace.query, "spawn": trace.spawn, "at": trace.at}
        if trace.rank is not None:
            entry["rank"] = trace.rank
        return entry

    def _traces(self, record: Any) -> list[Trace]:
        """A record's live traces, oldest first; [] for anything malformed (a record from a newer version
        or a damaged file counts as absent)."""
        if not isinstance(record, dict):
            return []
        server, tool, entries = record.get("server"), record.get("tool"), record.get("traces")
        if not isinstance(server, str) or not isinstance(tool, str) or not isinstance(entries, list):
            return []
        now = self._clock()
        found = []
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            query, spawn, rank = entry.get("query"), entry.get("spawn"), entry.get("rank")
            at = _valid_time(entry.get("at"), now)
            if not isinstance(query, str) or not isinstance(spawn, str) or at is None:
                continue
            if now - at >= self.retention_s:
                continue
            rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 1 else None
            found.append(Trace(query, server, tool, spawn, at, True, rank))
        found.sort(key=lambda trace: trace.at)
        return found


def _key(server: str, tool: str) -> str:
    """A tool's record key: a digest, so any server and tool name makes one safe, distinct file name."""
    digest = hashlib.sha256(f"{server}\x00{tool}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{NAMESPACE}/{digest}"


# --------------------------------------------------------------------------- recording from events


@dataclass(frozen=True)
class _Search:
    query: str
    found: dict[str, tuple[int, str, str]]
    """Qualified name -> (rank, server, tool) of each hit."""


class TraceRecorder:
    """Turns a spawn's meta-tool events into traces in a `TraceStore`.

    `listener(resolve)` gives one spawn's listener: it remembers the spawn's latest searches and records a
    trace when a call succeeds. `resolve(qualified name)` gives a called tool's (server, own name) when no
    search returned it. A store that fails is logged once and never fails the call.
    """

    def __init__(self, traces: TraceStore, *, clock: Callable[[], float] = time.time) -> None:
        self.traces = traces
        self._clock = clock
        self._warned = False

    def listener(
        self, resolve: Callable[[str], tuple[str, str] | None] | None = None, *, local: str | None = None
    ) -> EventListener:
        """A new spawn's listener. Its spawn id is the events' (`Caller.spawn`); events without one (an
        in-process loop, the gateway's own endpoint) count as the spawn `local` (default: one per listener)."""
        searches: deque[_Search] = deque(maxlen=SEARCHES_REMEMBERED)
        local = local or f"local-{secrets.token_hex(6)}"
        recorded: dict[bytes, None] = {}  # digests of the pairs stored, oldest first

        def hear(event: MetaEvent) -> None:
            if isinstance(event, SearchEvent) and event.error is None and event.query.strip():
                found = {hit.name: (hit.rank, hit.server, hit.tool) for hit in event.hits}
                searches.append(_Search(event.query, found))
            elif isinstance(event, CallEvent) and event.outcome == "ok" and event.tool is not None and searches:
                trace = self._trace(event, searches, resolve, event.caller.spawn or local)
                if trace is None:
                    return
                pair = f"{trace.tool}\x00{trace.query[:MAX_QUERY_CHARS]}".encode("utf-8", "surrogatepass")
                digest = hashlib.sha256(pair).digest()[:16]
                if digest not in recorded:
                    recorded[digest] = None
                    if len(recorded) > RECORDED_REMEMBERED:
                        del recorded[next(iter(recorded))]
                    self._store([trace])

        return hear

    def _trace(
        self,
        event: CallEvent,
        searches: Sequence[_Search],
        resolve: Callable[[str], tuple[str, str] | None] | None,
        spawn: str,
    ) -> Trace | None:
        name = event.tool[0] if event.tool is not None else event.name
        for search in reversed(searches):
            hit = search.found.get(name)
            if hit is not None:
                rank, server, tool = hit
                return Trace(search.query, server, tool, spawn, self._clock(), True, rank)
        own = resolve(name) if resolve is not None else None
        if own is None:
            return None
        return Trace(searches[-1].query, own[0], own[1], spawn, self._clock(), True, None)

    def _store(self, traces: list[Trace]) -> None:
        try:
            self.traces.record(traces)
        except (OSError, StoreError, ValueError):  # boundary: learning must never fail a call
            if not self._warned:
                self._warned = True
                log.warning("recording search traces failed; searches are not learned from", exc_info=True)
