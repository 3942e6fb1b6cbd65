"""The project's OpenTelemetry instruments: one `Telemetry` object records search, expand, spawn and calls.

A `Telemetry` is passed to each component that records (`ToolSearchEngine`, `MCPManager`,
`SpawnPlanner`, `Gateway`), each event recorded once where it happens, so a search through the CLI,
the gateway or the Python API counts the same way. `Telemetry()` over no arguments uses OpenTelemetry's
global API providers: a no-op unless the application embedding orchestrator configured OpenTelemetry,
which is the library convention. `setup_telemetry(settings)` (exporters.py) builds one from
`telemetry:` in bernstein.yaml; tests build one over a `MeterProvider` with an `InMemoryMetricReader`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from wsgiref.simple_server import WSGIServer

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import Span

__all__ = [
    "CALL_RANKS",
    "CALL_RESULTS",
    "CATALOG_TOKENS",
    "CATALOG_TOOLS",
    "CLIENT_OPERATION_DURATION",
    "FALLBACK_KINDS",
    "HELD_KINDS",
    "METER_NAME",
    "RANKINGS",
    "SEARCH_CALL_RANK",
    "SEARCH_DURATION",
    "SEARCH_EXPANDED_TOOLS",
    "SEARCH_INVOCATIONS",
    "SEARCH_OUTCOMES",
    "SEARCH_RESULTS",
    "SERVER_STATE",
    "SERVER_STATES",
    "SESSION_ACTIONS",
    "SESSION_ACTION_KINDS",
    "SESSION_ROUNDS",
    "SESSION_TOKENS_COUNTERFACTUAL",
    "SESSION_TOKENS_SENT",
    "SPAWNS",
    "SPAWN_MODES",
    "SPAWN_TOKENS_SAVED",
    "SPAWN_TOKENS_SENT",
    "TOOLS_HELD",
    "TOOL_CALLS",
    "TOOL_CHANGES",
    "TOOL_CHANGE_ACTIONS",
    "CallResult",
    "SearchOutcome",
    "SpawnMode",
    "Telemetry",
]

_log = logging.getLogger(__name__)

SearchOutcome = Literal["hit", "miss"]
CallResult = Literal["ok", "tool_error", "timeout", "transport_error"]
SpawnMode = Literal["full", "search"]

SEARCH_OUTCOMES: tuple[str, ...] = ("hit", "miss", "expand")
CALL_RESULTS: tuple[str, ...] = ("ok", "tool_error", "timeout", "transport_error")
SPAWN_MODES: tuple[str, ...] = ("full", "search")
SESSION_ACTION_KINDS: tuple[str, ...] = ("hit", "miss", "expand", "call")
"""What one session did (`action` attribute of `orchestrator_session_actions`): searches that returned
tools (`hit`) or none (`miss`), expand_tools calls, tool calls."""
SERVER_STATES: tuple[str, ...] = ("starting", "ready", "degraded", "restarting", "failed", "stopped")
"""The states of `ServerState` (`state` attribute of `mcp_server_state`)."""
RANKINGS: tuple[str, ...] = ("lexical", "hybrid")
HELD_KINDS: tuple[str, ...] = ("changed", "new", "flagged")
"""Why a tool is held back (`kind` attribute of `mcp_tools_held`): its definition changed since it was
pinned, it is new on a pinned server, or its text reads as instructions to the model."""
TOOL_CHANGE_ACTIONS: tuple[str, ...] = ("held", "accepted")
"""What happened to a changed, new or flagged tool (`action` attribute of `mcp_tool_changes`)."""
"""The ranking that answered a search (`ranking` attribute of the search metrics)."""
FALLBACK_KINDS: tuple[str, ...] = (
    "disabled",
    "missing_extra",
    "hash_mismatch",
    "load_failed",
    "embed_failed",
    "slow_query",
    "warming",
    "blend_failed",
)
"""Why hybrid ranking was asked for but a search was answered lexically (`fallback` attribute): the
`SemanticUnavailable` kinds, `warming` while the catalog's vectors are computed, `blend_failed` for a
custom ScoreBlend that raised."""

CALL_RANKS: tuple[str, ...] = ("1", "2", "3", "4", "5", "6-10", "11+", "not_found", "unsearched")
"""Where the tool a search-mode agent called stood in its latest `tool_search` (`rank` attribute of
`mcp_tool_search_call_rank`): its rank, `not_found` when that search did not return it, `unsearched` when the
agent had not searched yet (a pinned tool). hit@k on live traffic, without labels."""

METER_NAME = "orchestrator"
"""Instrumentation scope of every project metric and span."""

# Instrument names. Prometheus adds `_total` to counters and the unit (`_seconds`) to timed histograms.
SEARCH_INVOCATIONS = "mcp_tool_search_invocations"
SEARCH_DURATION = "mcp_tool_search_duration"
SEARCH_RESULTS = "mcp_tool_search_results"
SEARCH_EXPANDED_TOOLS = "mcp_tool_search_expanded_tools"
SEARCH_CALL_RANK = "mcp_tool_search_call_rank"
SPAWNS = "orchestrator_spawns"
SPAWN_TOKENS_SENT = "orchestrator_spawn_tokens_sent"
SPAWN_TOKENS_SAVED = "orchestrator_spawn_tokens_saved"
TOOL_CALLS = "mcp_tool_calls"
CLIENT_OPERATION_DURATION = "mcp.client.operation.duration"
"""Named by the OpenTelemetry MCP semantic conventions (histogram, seconds)."""
CATALOG_TOOLS = "mcp_catalog_tools"
CATALOG_TOKENS = "mcp_catalog_tokens"
SERVER_STATE = "mcp_server_state"
TOOLS_HELD = "mcp_tools_held"
TOOL_CHANGES = "mcp_tool_changes"
SESSION_ROUNDS = "orchestrator_session_rounds"
SESSION_ACTIONS = "orchestrator_session_actions"
SESSION_TOKENS_SENT = "orchestrator_session_tokens_sent"
SESSION_TOKENS_COUNTERFACTUAL = "orchestrator_session_tokens_counterfactual"

# Bucket boundaries (advisory, so a user's Views still win).
# The MCP semantic conventions prescribe these for mcp.client.operation.duration.
_CALL_DURATION_BUCKETS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# A BM25 search over a few thousand tools takes about a millisecond; a slow hybrid one up to the
# embedding timeout (250 ms by default), so the buckets span 0.1 ms .. 1 s.
_SEARCH_DURATION_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
# Around the default threshold_tokens (6000) with room for catalogs of hundreds of tools.
_TOKEN_BUCKETS = (0, 250, 500, 1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 64000, 128000)
# A session pays its tools every round: up to a few dozen rounds times catalogs of up to ~200k tokens.
_SESSION_TOKEN_BUCKETS = (0, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 512000, 1024000, 4096000)
# Model rounds of one agent session: a one-shot call takes 2, a long task dozens.
_ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
# search_limit is at most 100.
_RESULT_BUCKETS = (0, 1, 2, 3, 5, 8, 10, 15, 20, 50, 100)

# Bound on flushing exporters at shutdown, so a dead collector cannot hang a command on exit.
_SHUTDOWN_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class _SearchInstruments:
    """tool_search and expand_tools."""

    invocations: metrics.Counter
    duration: metrics.Histogram
    results: metrics.Histogram
    expanded_tools: metrics.Counter
    call_rank: metrics.Counter

    @classmethod
    def create(cls, meter: metrics.Meter) -> _SearchInstruments:
        return cls(
            invocations=meter.create_counter(
                SEARCH_INVOCATIONS,
                unit="{invocation}",
                description="tool_search calls that returned tools (hit) or none (miss), and expand_tools calls (expand)",
            ),
            duration=meter.create_histogram(
                SEARCH_DURATION,
                unit="s",
                description="Time to rank the catalog for one tool_search",
                explicit_bucket_boundaries_advisory=_SEARCH_DURATION_BUCKETS_S,
            ),
            results=meter.create_histogram(
                SEARCH_RESULTS,
                unit="{tool}",
                description="Tools returned by one tool_search",
                explicit_bucket_boundaries_advisory=_RESULT_BUCKETS,
            ),
            expanded_tools=meter.create_counter(
                SEARCH_EXPANDED_TOOLS,
                unit="{tool}",
                description="Full schemas handed over by expand_tools",
            ),
            call_rank=meter.create_counter(
                SEARCH_CALL_RANK,
                unit="{call}",
                description="Tool calls in search mode, by the called tool's rank in the agent's latest tool_search",
            ),
        )

    def start_outcomes_at_zero(self) -> None:
        """Every outcome series exists from the start (at 0), so rates and the miss ratio are defined
        before the first miss and dashboards show every series. Hits and misses always carry the
        ranking that answered, so they start at 0 for both rankings (never with an empty label)."""
        for ranking in RANKINGS:
            for outcome in ("hit", "miss"):
                self.invocations.add(0, {"outcome": outcome, "ranking": ranking})
        self.invocations.add(0, {"outcome": "expand"})
        for rank in CALL_RANKS:
            self.call_rank.add(0, {"rank": rank})


@dataclass(frozen=True)
class _SpawnInstruments:
    """Spawns planned and the tokens each sent and saved."""

    spawns: metrics.Counter
    tokens_sent: metrics.Histogram
    tokens_saved: metrics.Histogram

    @classmethod
    def create(cls, meter: metrics.Meter) -> _SpawnInstruments:
        return cls(
            spawns=meter.create_counter(
                SPAWNS,
                unit="{spawn}",
                description="Agents spawned, by tool mode (full catalog or search) and agent profile",
            ),
            tokens_sent=meter.create_histogram(
                SPAWN_TOKENS_SENT,
                unit="{token}",
                description="Tokens of tool definitions and tools prompt sent to one spawned agent",
                explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
            ),
            tokens_saved=meter.create_histogram(
                SPAWN_TOKENS_SAVED,
                unit="{token}",
                description="Tokens one spawn saved against shipping the full catalog (0 in full mode)",
                explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
            ),
        )


@dataclass(frozen=True)
class _CallInstruments:
    """tools/call requests routed to servers."""

    tool_calls: metrics.Counter
    duration: metrics.Histogram

    @classmethod
    def create(cls, meter: metrics.Meter) -> _CallInstruments:
        return cls(
            tool_calls=meter.create_counter(
                TOOL_CALLS,
                unit="{call}",
                description="tools/call requests routed to a server, by result",
            ),
            duration=meter.create_histogram(
                CLIENT_OPERATION_DURATION,
                unit="s",
                description="Duration of the MCP request as observed on the client (tools/call)",
                explicit_bucket_boundaries_advisory=_CALL_DURATION_BUCKETS_S,
            ),
        )


@dataclass(frozen=True)
class _ServerInstruments:
    """Each server's catalog size and state (gauges)."""

    # The API exports its synchronous gauge as `_Gauge` (listed in its __all__) while it is in development.
    catalog_tools: metrics._Gauge
    catalog_tokens: metrics._Gauge
    state: metrics._Gauge
    held: metrics._Gauge
    changes: metrics.Counter

    @classmethod
    def create(cls, meter: metrics.Meter) -> _ServerInstruments:
        return cls(
            catalog_tools=meter.create_gauge(
                CATALOG_TOOLS, unit="{tool}", description="Tools a server currently offers"
            ),
            catalog_tokens=meter.create_gauge(
                CATALOG_TOKENS, unit="{token}", description="Tokens of the full definitions of a server's tools"
            ),
            state=meter.create_gauge(
                SERVER_STATE, unit="{state}", description="1 for the state a server is in, 0 for its other states"
            ),
            held=meter.create_gauge(
                TOOLS_HELD, unit="{tool}", description="Tools of a server held back from agents, by why (kind)"
            ),
            changes=meter.create_counter(
                TOOL_CHANGES,
                unit="{tool}",
                description="Changed, new or flagged tools of pinned servers, by what happened (held or accepted)",
            ),
        )


@dataclass(frozen=True)
class _SessionInstruments:
    """Finished spawn sessions: rounds, actions and the tool tokens paid in each mode."""

    rounds: metrics.Histogram
    actions: metrics.Counter
    tokens_sent: metrics.Histogram
    tokens_counterfactual: metrics.Histogram

    @classmethod
    def create(cls, meter: metrics.Meter) -> _SessionInstruments:
        return cls(
            rounds=meter.create_histogram(
                SESSION_ROUNDS,
                unit="{round}",
                description="Model rounds of one finished spawn session (estimated from its MCP requests)",
                explicit_bucket_boundaries_advisory=_ROUND_BUCKETS,
            ),
            actions=meter.create_counter(
                SESSION_ACTIONS,
                unit="{request}",
                description="Searches (hit, miss), expands and tool calls of finished spawn sessions",
            ),
            tokens_sent=meter.create_histogram(
                SESSION_TOKENS_SENT,
                unit="{token}",
                description="Tool tokens one finished spawn session paid over all its rounds, in its mode",
                explicit_bucket_boundaries_advisory=_SESSION_TOKEN_BUCKETS,
            ),
            tokens_counterfactual=meter.create_histogram(
                SESSION_TOKENS_COUNTERFACTUAL,
                unit="{token}",
                description="Tool tokens the same session would have paid in the other mode",
                explicit_bucket_boundaries_advisory=_SESSION_TOKEN_BUCKETS,
            ),
        )


class Telemetry:
    """A meter's instruments (and optionally a tracer) plus what to stop at shutdown.

    Build one with `setup_telemetry(settings)`, or directly over any OpenTelemetry API providers, and
    pass it to the components that record.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        owned_meter_provider: SDKMeterProvider | None = None,
        owned_span_processor: SpanProcessor | None = None,
        prometheus_server: WSGIServer | None = None,
        prometheus_thread: threading.Thread | None = None,
    ) -> None:
        """Create the instruments.

        Args:
            meter_provider: where metrics go; None means the global API provider (no-op until set).
            tracer_provider: where project spans go; None means the global API provider.
            owned_meter_provider: shut down by `shutdown()` (providers passed by a caller are not).
            owned_span_processor: shut down by `shutdown()`.
            prometheus_server: the scrape endpoint to stop at shutdown.
            prometheus_thread: the thread serving it.
        """
        # The API's proxy tracer follows a global provider installed later, so caching it is safe.
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(METER_NAME)
        self._owned_meter_provider = owned_meter_provider
        self._owned_span_processor = owned_span_processor
        self._prometheus_server = prometheus_server
        self._prometheus_thread = prometheus_thread
        self._closed = False
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(METER_NAME)
        self._search = _SearchInstruments.create(meter)
        self._spawn = _SpawnInstruments.create(meter)
        self._calls = _CallInstruments.create(meter)
        self._servers = _ServerInstruments.create(meter)
        self._sessions = _SessionInstruments.create(meter)
        self._search.start_outcomes_at_zero()

    # ------------------------------------------------------------------ recording

    def record_search(
        self,
        outcome: SearchOutcome,
        duration_s: float,
        hits: int,
        *,
        ranking: str,
        fallback: str | None = None,
    ) -> None:
        """One tool_search that returned tools (`hit`) or none (`miss`), its ranking time and hit count.

        `ranking` is the ranking that answered (`lexical` or `hybrid`); `fallback` why hybrid ranking was
        asked for but lexical answered (one of FALLBACK_KINDS). Never pass the query: attributes stay
        low-cardinality.
        """
        _check(outcome, ("hit", "miss"), "search outcome")
        _check(ranking, RANKINGS, "search ranking")
        attributes = {"outcome": outcome, "ranking": ranking}
        if fallback is not None:
            _check(fallback, FALLBACK_KINDS, "ranking fallback")
            attributes["fallback"] = fallback
        self._search.invocations.add(1, attributes)
        self._search.duration.record(max(0.0, duration_s), attributes)
        self._search.results.record(max(0, hits))

    def record_expand(self, count: int) -> None:
        """One expand_tools call that handed over `count` schemas (counted as outcome `expand`)."""
        self._search.invocations.add(1, {"outcome": "expand"})
        self._search.expanded_tools.add(max(0, count))

    def record_call_rank(self, rank: str) -> None:
        """One tool call in search mode, by where the tool stood in the agent's latest search (one of
        CALL_RANKS: "1".."5", "6-10", "11+", "not_found", "unsearched")."""
        _check(rank, CALL_RANKS, "call rank")
        self._search.call_rank.add(1, {"rank": rank})

    def record_spawn(self, mode: str, agent: str, tokens_sent: int, tokens_saved: int) -> None:
        """One spawn planned in `mode` for agent profile `agent`, with the tokens it sent and saved."""
        _check(mode, SPAWN_MODES, "spawn mode")
        attributes = {"mode": mode, "agent": agent}
        self._spawn.spawns.add(1, attributes)
        self._spawn.tokens_sent.record(max(0, tokens_sent), attributes)
        # Histograms take no negative values; a plan that cost more than the full catalog saved 0.
        self._spawn.tokens_saved.record(max(0, tokens_saved), attributes)

    def record_tool_call(self, server: str, tool: str, result: CallResult, duration_s: float) -> None:
        """One tools/call routed to `server` for its tool `tool` (the server's own name), with its result."""
        _check(result, CALL_RESULTS, "tool call result")
        self._calls.tool_calls.add(1, {"server": server, "result": result})
        attributes = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "server": server,
        }
        if result != "ok":
            # semconv: error.type only when the operation failed; "tool_error" for isError results.
            attributes["error.type"] = result
        self._calls.duration.record(max(0.0, duration_s), attributes)

    def record_catalog(self, server: str, tools: int, tokens: int) -> None:
        """Current catalog size of one server: tool count and tokens of its full definitions (gauges)."""
        attributes = {"server": server}
        self._servers.catalog_tools.set(tools, attributes)
        self._servers.catalog_tokens.set(tokens, attributes)

    def record_server_state(self, server: str, state: str) -> None:
        """`server` is now in `state` (one of SERVER_STATES): its series for that state is 1, the others 0, so
        `mcp_server_state{state="failed"} == 1` selects the failed servers and no old state lingers."""
        _check(state, SERVER_STATES, "server state")
        for each in SERVER_STATES:
            self._servers.state.set(1 if each == state else 0, {"server": server, "state": each})

    def record_held(self, server: str, counts: dict[str, int]) -> None:
        """How many of `server`'s tools are held back now, by kind (one of HELD_KINDS; 0 for the others)."""
        for kind in HELD_KINDS:
            self._servers.held.set(max(0, counts.get(kind, 0)), {"server": server, "kind": kind})

    def record_tool_change(self, server: str, action: str) -> None:
        """One changed, new or flagged tool of `server` was held back or accepted (TOOL_CHANGE_ACTIONS)."""
        _check(action, TOOL_CHANGE_ACTIONS, "tool change action")
        self._servers.changes.add(1, {"server": server, "action": action})

    def record_session(
        self,
        mode: str,
        agent: str,
        *,
        rounds: int,
        hits: int,
        misses: int,
        expands: int,
        calls: int,
        tokens_sent: int,
        tokens_counterfactual: int,
    ) -> None:
        """One finished spawn session of agent profile `agent` in `mode` (`_accounting.SessionCost`): its
        rounds, what it did, the tool tokens it paid and what the other mode would have paid.

        Saved tokens (counterfactual - sent) can be negative, which no OpenTelemetry histogram or counter
        takes, so they are derived from the two `_sum`s (docs/metrics.md). Every action series of this
        agent and mode is touched (at 0 when it did not happen), so per-session ratios never miss a term.
        """
        _check(mode, SPAWN_MODES, "session mode")
        attributes = {"mode": mode, "agent": agent}
        self._sessions.rounds.record(max(0, rounds), attributes)
        for action, count in zip(SESSION_ACTION_KINDS, (hits, misses, expands, calls), strict=True):
            self._sessions.actions.add(max(0, count), {**attributes, "action": action})
        self._sessions.tokens_sent.record(max(0, tokens_sent), attributes)
        self._sessions.tokens_counterfactual.record(max(0, tokens_counterfactual), attributes)

    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Span]:
        """A span around project work, parent of the `mcp` SDK spans inside it; None attributes are left
        out (never pass query text or tool arguments)."""
        clean = {key: _attribute_value(value) for key, value in attributes.items() if value is not None}
        with self._tracer.start_as_current_span(name, attributes=clean) as current:
            yield current

    # ------------------------------------------------------------------ lifecycle

    @property
    def prometheus_address(self) -> tuple[str, int] | None:
        """(host, port) the Prometheus endpoint listens on, or None; port 0 in settings becomes real here."""
        if self._prometheus_server is None:
            return None
        host, port = self._prometheus_server.server_address[:2]
        return str(host), int(port)

    @property
    def prometheus_url(self) -> str | None:
        """The scrape URL, e.g. `http://127.0.0.1:9464/metrics`, or None."""
        address = self.prometheus_address
        if address is None:
            return None
        host, port = address
        return f"http://{_url_host(host)}:{port}/metrics"

    def shutdown(self) -> None:
        """Flush and stop what this object owns (exporters, span processor, Prometheus server). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owned_span_processor is not None:
            self._owned_span_processor.force_flush(_SHUTDOWN_TIMEOUT_MS)
            self._owned_span_processor.shutdown()
        if self._owned_meter_provider is not None:
            # Flushes periodic readers (console, OTLP) and unregisters the Prometheus collector.
            self._owned_meter_provider.shutdown(timeout_millis=_SHUTDOWN_TIMEOUT_MS)
        if self._prometheus_server is not None:
            self._prometheus_server.shutdown()
            self._prometheus_server.server_close()
            if self._prometheus_thread is not None:
                self._prometheus_thread.join(_SHUTDOWN_TIMEOUT_MS / 1000)


def _check(value: str, allowed: Sequence[str], what: str) -> None:
    """Attribute values come from a closed set: a stray value would add a series, so refuse it."""
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


def _attribute_value(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(item, (str, bool, int, float)) for item in value):
        return list(value)
    return str(value)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
