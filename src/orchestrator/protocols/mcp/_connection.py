"""One MCP server's supervisor: runs its sessions, restarts them, and keeps its state for the manager.

A `ServerConnection` is driven by one long-lived task (`run`) that runs one session at a time
(`_session.Session`: connect, list, follow changes, carry calls) and restarts it when it ends. Each try:

1. the session connects and lists every page of tools, all within `startup_timeout_s` (a watchdog ends
   a try that runs out, and marks a first start `failed` at once); the list is then published: offered
   to the catalog (`visible_tools`, `on_change`) and written to the warm-start cache;
2. serving: HTTP/SSE connections are probed every `health_interval_s`, and a call that times out is
   followed by a probe; a re-list after a change is published the same way; calls wait (`_ready_session`)
   for a server that is starting or restarting;
3. it ends when the session does: the transport closes, a call finds the connection broken, probes go
   unanswered, or the manager closes.

The supervisor never gives up: after a session ends it restarts with exponential backoff and jitter,
forever. While the circuit is closed (a server that was up died, fewer than `max_restarts` failures in a
row) the server is `restarting`, keeps its tools in the catalog and calls wait for it. After that, or when
a server has never come up, the circuit is open: the server is `failed` with its reason and the time of
the next try, calls fail at once saying when, and each try is a half-open probe that closes the circuit
when it succeeds. docs/servers.md draws the state machine.
"""

from __future__ import annotations

import functools
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import anyio.abc
import mcp.types as types
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT

from ..._config import ServerConfig
from ..._errors import ServerError
from ..._telemetry import Telemetry
from ._cache import ToolListCache
from ._normalization import one_line
from ._schemas import SchemaLimits
from ._session import NO_ANSWER, LineFaults, LogSink, Session, describe
from ._status import ERROR_LIMIT, SERVING, Circuit, DroppedTool, ServerState, ServerStatus
from ._transports import TransportFactory, default_transport

__all__ = ["ServerConnection"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

STABLE_UPTIME_S = 30.0
"""A session that stayed up this long before it died clears the failure count: its restart is quick
again. A server that dies sooner after each restart climbs the backoff and opens its circuit instead of
flapping at the first delay forever."""
RESTART_DELAY_FLOOR_S = 0.05
"""Smallest delay between tries even with `restart_backoff_s: 0`, so a crash loop cannot spin a core."""
BACKOFF_JITTER = 0.2
"""Each delay is drawn from [80 %, 100 %] of its exponential value, so servers that died together (a
redeploy, a network blip) do not all retry in the same instant; never above `restart_backoff_max_s`."""
HEALTH_MISSES_TO_RESTART = 2
"""Unanswered probes in a row after which an HTTP/SSE connection is restarted; one miss only marks the
server `degraded` (a busy server may be late once)."""
DROPPED_IN_ERROR = 3
"""Dropped tools named in a degraded server's `error` line; `dropped_tools` lists them all."""
DROPPED_LOGGED = 20
"""Newly dropped tools logged one line each per listing; the rest are counted in one line."""


@dataclass
class _SessionEnd:
    ready_at: float | None = None
    reason: str = "connection closed"


class _RetrySchedule:
    """When the next try of a failing server is due: exponential backoff with downward jitter, kept both
    as wall-clock time (for the status) and on the event loop's clock (for waiting calls)."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self._random = random.Random()
        self.at: datetime | None = None
        """When the next try is due (UTC); None while connected or while a try is under way."""
        self._time: float | None = None  # the same moment on the event loop's clock

    def schedule(self, failures: int, now: float) -> float:
        """Set the next try after `failures` in a row, counting from `now` (loop clock); the delay."""
        delay = self._delay(failures)
        self._time = now + delay
        self.at = datetime.now(UTC) + timedelta(seconds=delay)
        return delay

    def clear(self) -> None:
        self._time = self.at = None

    def remaining(self) -> float:
        """Seconds until the next try (0 when none is scheduled)."""
        if self._time is None:
            return 0.0
        return max(0.0, self._time - anyio.current_time())

    def hint(self) -> str:
        """How a failing call says when to try again."""
        if self._time is None:
            return "retrying now"
        return f"retry in {max(1, math.ceil(self.remaining()))} s"

    def _delay(self, failures: int) -> float:
        """Exponential (`restart_backoff_s` doubling per failure in a row), capped, with downward jitter."""
        base = max(self._config.restart_backoff_s, RESTART_DELAY_FLOOR_S)
        delay = min(self._config.restart_backoff_max_s, base * 2.0 ** min(failures - 1, 40))
        return max(RESTART_DELAY_FLOOR_S, delay * self._random.uniform(1 - BACKOFF_JITTER, 1.0))


class ServerConnection:
    """The connection to one configured server across its sessions; see the module docstring."""

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        *,
        on_change: Callable[[], None],
        cache: ToolListCache | None = None,
        transport_factory: TransportFactory = default_transport,
        telemetry: Telemetry | None = None,
        schema_limits: SchemaLimits | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.state = ServerState.STARTING
        self.error: str | None = None
        self.restarts = 0
        self.protocol_version: str | None = None
        self._circuit = Circuit.CLOSED
        self._retry = _RetrySchedule(config)
        self._ever_ready = False
        self._degraded: dict[str, str] = {}
        self._dropped: tuple[DroppedTool, ...] = ()
        self._line_faults = LineFaults(name)
        self._tools: list[dict[str, Any]] | None = None
        self._listed_at: datetime | None = None
        self._from_cache = False
        self._published: list[dict[str, Any]] | None = None
        self._on_change = on_change
        self._cache = cache
        self._transport_factory = transport_factory
        self._telemetry = telemetry
        self._limits = schema_limits or SchemaLimits()
        self._session: Session | None = None  # the session calls go to: published and not lost
        self._checking_liveness = False
        self._timed_out = False
        # Created in `prepare` (anyio primitives need a running event loop).
        self._settled: anyio.Event | None = None
        self._state_changed: anyio.Event | None = None
        if cache is not None:
            self._seed_from_cache(cache)

    # ------------------------------------------------------------------ views

    def visible_tools(self) -> list[dict[str, Any]] | None:
        """Tools offered to the catalog: live when serving; cached while first starting; the last known list
        while restarting or failed, once the server has been up (names do not flap); else None."""
        if self.state in (*SERVING, ServerState.STARTING, ServerState.RESTARTING):
            return self._tools
        if self.state is ServerState.FAILED and self._ever_ready:
            return self._tools
        return None

    def status(self) -> ServerStatus:
        tools = self.visible_tools()
        return ServerStatus(
            name=self.name,
            transport=self.config.transport,
            state=self.state,
            tools=len(tools) if tools is not None else 0,
            error=self.error,
            listed_at=self._listed_at,
            from_cache=self._from_cache and tools is not None,
            restarts=self.restarts,
            protocol_version=self.protocol_version if self.state in SERVING else None,
            circuit=self._circuit,
            next_retry_at=self._retry.at,
            dropped_tools=self._dropped,
            line_faults=dict(self._line_faults.counts),
        )

    async def wait_settled(self) -> None:
        """Return once the first start has ended, ready or failed."""
        assert self._settled is not None, "run() has not started"
        await self._settled.wait()

    async def wait_state_change(self) -> None:
        """Return at the next change of state (or of the circuit)."""
        assert self._state_changed is not None, "run() has not started"
        await self._state_changed.wait()

    # ------------------------------------------------------------------ supervisor

    def prepare(self) -> None:
        """Create the anyio primitives; call from the event loop before `run` and before any call."""
        self._settled = anyio.Event()
        self._state_changed = anyio.Event()
        if self._telemetry is not None:
            self._telemetry.record_server_state(self.name, str(self.state))

    async def run(self) -> None:
        """Start, serve, and restart with backoff until cancelled (by the manager closing)."""
        if self._settled is None:
            self.prepare()
        try:
            await self._supervise()
        except Exception as exc:  # boundary: a bug here must not cancel the manager's other servers
            logger.exception("server %r: supervisor crashed", self.name)
            self._set_failed(f"internal error: {describe(exc)}")

    async def _supervise(self) -> None:
        while True:
            end = await self._run_session()
            now = anyio.current_time()
            if end.ready_at is not None and now - end.ready_at >= STABLE_UPTIME_S:
                self.restarts = 0
            self.restarts += 1
            delay = self._retry.schedule(self.restarts, now)
            if self._ever_ready and self.restarts <= self.config.max_restarts:
                self._circuit = Circuit.CLOSED
                attempt = f"{self.restarts}/{self.config.max_restarts}"
                logger.info("server %r: %s; restart %s in %.2g s", self.name, end.reason, attempt, delay)
                self._set_state(ServerState.RESTARTING, end.reason)
            else:
                self._circuit = Circuit.OPEN
                logger.info("server %r failed: %s; next try in %.2g s", self.name, end.reason, delay)
                self._set_state(ServerState.FAILED, end.reason)
            await anyio.sleep(delay)
            self._retry.clear()
            if self._circuit is Circuit.OPEN:
                self._circuit = Circuit.HALF_OPEN
                self._notify_state()

    async def _run_session(self) -> _SessionEnd:
        """One session from start to its end; never raises except on cancellation."""
        end = _SessionEnd()
        session = Session(
            self.name,
            self.config,
            self,
            transport_factory=self._transport_factory,
            schema_limits=self._limits,
            line_faults=self._line_faults,
        )
        self._timed_out = False
        self._degraded.pop("probe", None)
        self._degraded.pop("changes", None)
        timeout = self.config.startup_timeout_s
        try:
            async with anyio.create_task_group() as guard:
                startup = anyio.CancelScope()
                watchdog = await guard.start(self._startup_watchdog, session, startup, timeout)
                try:
                    with startup:
                        await self._serve(session, end, watchdog)
                finally:
                    watchdog.cancel()
        except Exception as exc:  # boundary: anything that ends a session becomes its reason
            if self._timed_out and end.ready_at is None:
                end.reason = session.timeout_reason(timeout)
            else:
                end.reason = session.lost_reason or session.explain(exc, started=end.ready_at is not None)
        else:
            if self._timed_out and end.ready_at is None:
                end.reason = session.timeout_reason(timeout)
            else:
                end.reason = session.lost_reason or "connection closed"
        finally:
            self._session = None
            self.protocol_version = None
        return end

    async def _startup_watchdog(
        self,
        session: Session,
        startup: anyio.CancelScope,
        limit_s: float,
        *,
        task_status: anyio.abc.TaskStatus[anyio.CancelScope],
    ) -> None:
        """Cancel the start after `limit_s`; a first start is marked failed before the slow cleanup."""
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            await anyio.sleep(limit_s)
            self._timed_out = True
            if self.state is ServerState.STARTING:
                self._circuit = Circuit.OPEN
                self._set_failed(session.timeout_reason(limit_s))
            startup.cancel()

    async def _serve(self, session: Session, end: _SessionEnd, watchdog: anyio.CancelScope) -> None:
        async with session.open():
            self.protocol_version = session.protocol_version
            tools, dropped = await session.list_tools()
            if self._timed_out:
                return  # the watchdog fired as the listing finished: this start has already failed
            watchdog.cancel()
            end.ready_at = anyio.current_time()
            self._session = session
            await self.publish(tools, dropped)
            session.serve()
            if self.config.transport != "stdio" and self.config.health_interval_s > 0:
                session.start_soon(self._health_loop)
            await session.wait_lost()

    # ------------------------------------------------------------------ health

    async def _health_loop(self, session: Session) -> None:
        """Probe an idle HTTP/SSE connection every `health_interval_s`: a dead or frozen server is noticed
        without waiting for a call. One miss degrades it; `HEALTH_MISSES_TO_RESTART` in a row restart it."""
        misses = 0
        timeout = self.config.health_timeout_s
        while True:
            await anyio.sleep(self.config.health_interval_s)
            problem = await session.probe()
            if problem is None:
                misses = 0
                self.set_degraded("probe", None)
            elif problem == NO_ANSWER:
                misses += 1
                if misses >= HEALTH_MISSES_TO_RESTART:
                    session.mark_lost(
                        f"{misses} health probes in a row got no answer within health_timeout_s={timeout:g} s"
                    )
                    return
                self.set_degraded("probe", f"a health probe got no answer within health_timeout_s={timeout:g} s")
            else:
                session.mark_lost(f"health probe failed: {problem}")
                return

    def call_timed_out(self, session: Session) -> None:
        """After a call timed out: probe in the background, and restart a connection that stopped answering
        altogether (a server that no longer reads its input, a wedged socket)."""
        if session is not self._session or not session.serving or self._checking_liveness:
            return
        self._checking_liveness = True
        session.start_soon(self._liveness)

    async def _liveness(self, session: Session) -> None:
        try:
            problem = await session.probe()
        finally:
            self._checking_liveness = False
        if problem is not None and session is self._session:
            timeout = self.config.health_timeout_s
            detail = f"no answer within health_timeout_s={timeout:g} s" if problem == NO_ANSWER else problem
            session.mark_lost(f"the connection stopped answering: a call timed out, then a health probe got {detail}")

    # ------------------------------------------------------------------ calls

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        progress_callback: ProgressFnT | None = None,
        meta: dict[str, Any] | None = None,
        on_log: LogSink | None = None,
    ) -> types.CallToolResult:
        """Route one call; see `MCPManager.call_tool` for the errors and the keyword arguments."""
        session = await self._ready_session()
        return await session.call_tool(tool, arguments, progress_callback=progress_callback, meta=meta, on_log=on_log)

    async def request(self, what: str, func: Callable[[Client], Awaitable[T]]) -> T:
        """`func(live client)` within `call_timeout_s`: resources and prompts, which the gateway passes on.

        Raises:
            ServerError: not ready (as for calls), or no answer within `call_timeout_s` (`what` names it).
            MCPError: the server answered with a JSON-RPC error.
        """
        session = await self._ready_session()
        return await session.request(what, func)

    async def _ready_session(self) -> Session:
        """The live session. While the first start or a quick restart is under way, waits for it (up to
        `startup_timeout_s` plus the backoff still to run); a failed server (circuit open) answers at once."""
        assert self._state_changed is not None, "the manager has not started"
        bound = self.config.startup_timeout_s + self._retry.remaining()
        deadline = anyio.current_time() + bound
        while True:
            session = self._session
            if self.state in SERVING and session is not None:
                return session
            if self.state is ServerState.FAILED:
                raise ServerError(self.name, f"failed: {self.error}; {self._retry.hint()}")
            if self.state is ServerState.STOPPED:
                raise ServerError(self.name, "stopped")
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                break
            with anyio.move_on_after(remaining):
                await self._state_changed.wait()
        if self.state is ServerState.RESTARTING:
            raise ServerError(self.name, f"restarting ({self.error}); {self._retry.hint()}")
        raise ServerError(self.name, f"not ready after {bound:g} s (still starting: {self.error or 'connecting'})")

    # ------------------------------------------------------------------ state

    def _seed_from_cache(self, cache: ToolListCache) -> None:
        entry = cache.load(self.name, self.config)
        if entry is None:
            return
        self._tools = entry.tools
        self._listed_at = entry.written_at
        self._from_cache = True
        self._published = entry.tools

    async def publish(self, tools: list[dict[str, Any]], dropped: tuple[DroppedTool, ...]) -> None:
        """Offer a fresh listing: the cache keeps it, then the catalog hears of it (`on_change`). The cache
        file is written on a worker thread first (a large listing's took the event loop for most of a
        second), so a server is never ready with its listing unwritten."""
        listed_at = datetime.now(UTC)
        if self._cache is not None:
            try:
                store = functools.partial(self._cache.store, self.name, self.config, tools, written_at=listed_at)
                with anyio.CancelScope(shield=True):  # a listing read is kept, even by a manager closing
                    await anyio.to_thread.run_sync(store)
            except OSError as exc:
                where = self._cache.directory
                logger.warning("server %r: cannot write the tool cache in %s: %s", self.name, where, exc)
        known = set(self._dropped)  # a set: a listing of many broken tools was compared with a tuple, O(n^2)
        new = [tool for tool in dropped if tool not in known]  # logged once, not on every re-list
        for tool in new[:DROPPED_LOGGED]:
            logger.info("server %r: tool %r dropped: %s", self.name, tool.name, tool.reason)
        if len(new) > DROPPED_LOGGED:
            logger.info(
                "server %r: %d more tools dropped (orchestrator servers lists them)",
                self.name,
                len(new) - DROPPED_LOGGED,
            )
        self._tools = tools
        self._dropped = dropped
        self._listed_at = listed_at
        self._from_cache = False
        self._ever_ready = True
        self._circuit = Circuit.CLOSED
        self._retry.clear()
        self._degraded.pop("tools", None)
        if dropped:
            named = "; ".join(f"{tool.name} ({tool.reason})" for tool in dropped[:DROPPED_IN_ERROR])
            more = f"; and {len(dropped) - DROPPED_IN_ERROR} more" if len(dropped) > DROPPED_IN_ERROR else ""
            self._degraded["tools"] = f"{len(dropped)} tool(s) dropped: {named}{more}"
        self._set_serving()

    def set_degraded(self, cause: str, problem: str | None) -> None:
        """Record (or clear, with None) one reason the connected server is degraded."""
        if problem is None:
            if self._degraded.pop(cause, None) is None:
                return
        elif self._degraded.get(cause) == problem:
            return
        else:
            self._degraded[cause] = problem
        self._set_serving()

    def session_lost(self, session: Session, reason: str) -> None:
        """A session broke: new calls wait for the restart instead of hitting it, and a serving server says
        so now (closing the old session may take a moment)."""
        if session is not self._session:
            return  # lost during its start: the supervisor decides the state when it ends
        self._session = None
        if self.state in SERVING:
            self._set_state(ServerState.RESTARTING, reason)

    def _set_serving(self) -> None:
        if self._session is None or self.state is ServerState.STOPPED:
            return  # not connected: the supervisor decides the state
        if self._degraded:
            self._set_state(ServerState.DEGRADED, "; ".join(self._degraded.values()))
        else:
            self._set_state(ServerState.READY, None)

    def _set_state(self, state: ServerState, error: str | None) -> None:
        previous = self.state
        self.state = state
        self.error = None if error is None else one_line(error, ERROR_LIMIT)
        if state in (*SERVING, ServerState.FAILED) and self._settled is not None:
            self._settled.set()
        self._notify_state()
        if state is not previous and self._telemetry is not None:
            self._telemetry.record_server_state(self.name, str(state))
        visible = self.visible_tools()
        if visible != self._published and state is not ServerState.STOPPED:
            self._published = visible
            self._on_change()

    def _notify_state(self) -> None:
        """Wake the calls waiting for this server to change state."""
        if self._state_changed is not None:
            event, self._state_changed = self._state_changed, anyio.Event()
            event.set()

    def _set_failed(self, reason: str) -> None:
        if self.state is not ServerState.FAILED:
            logger.info("server %r failed: %s", self.name, reason)
        self._set_state(ServerState.FAILED, reason)

    def set_stopped(self) -> None:
        """Mark the server stopped (the manager closed); keeps the last error for the record."""
        self._session = None
        self._retry.clear()
        self._set_state(ServerState.STOPPED, self.error if self.state is ServerState.FAILED else None)
