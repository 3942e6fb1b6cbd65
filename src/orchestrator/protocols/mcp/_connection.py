"""One MCP server's connection lifecycle: start, list, follow changes, route calls, restart, stop.

A `ServerConnection` is driven by one long-lived task (`run`, the supervisor) that owns the `mcp.Client`
context of the current session, so calls from any task go through the same live connection. Each session:

1. connects (spawns the stdio process, or opens the HTTP/SSE connection) and negotiates the protocol,
   opens a `subscriptions/listen` stream on 2026-07-28 servers that announce `tools.listChanged`,
   and lists every page of tools, all within `startup_timeout_s`; each tool is checked on the way in
   (`_schemas.tool_problem` and the SDK's own model) and one that cannot be used is dropped with its
   reason while the others stay;
2. serves: a change event (listen stream) or a `notifications/tools/list_changed` message (older
   protocol versions, through `message_handler`) triggers a full re-list; HTTP/SSE connections are
   probed every `health_interval_s`, and a call that times out is followed by a probe;
3. ends when the transport closes (the process died, the socket closed), a call finds the connection
   broken, probes go unanswered, or the manager closes.

The supervisor never gives up: after a session ends it restarts with exponential backoff and jitter,
forever. While the circuit is closed (a server that was up died, fewer than `max_restarts` failures in a
row) the server is `restarting`, keeps its tools in the catalog and calls wait for it. After that, or when
a server has never come up, the circuit is open: the server is `failed` with its reason and the time of
the next try, calls fail at once saying when, and each try is a half-open probe that closes the circuit
when it succeeds. docs/servers.md draws the state machine.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import find_invalid_x_mcp_header
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from mcp_types import methods as wire_methods
from pydantic import ValidationError

from ... import __version__
from ..._config import ServerConfig
from ..._errors import ServerError, ToolCallTimeout, ToolExecutionError, TransportError
from ..._telemetry import Telemetry
from ._cache import ToolListCache
from ._normalization import one_line
from ._schemas import SchemaLimits, tool_problem
from ._status import SERVING, Circuit, DroppedTool, ServerState, ServerStatus
from ._transports import TOO_LONG_MARKER, StdoutLineFault, TransportFactory, WatchedTransport, default_transport

__all__ = ["ServerConnection"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
LogSink = Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]
"""Where a call's caller wants the server's log messages (the gateway relays them to its client)."""

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
MAX_LIST_PAGES = 1000
"""Most `tools/list` pages followed in one listing: a paginator that never ends cannot hang a re-list."""
RELISTEN_DELAY_S = 0.2
"""Pause before re-opening a `subscriptions/listen` stream that dropped while the connection stays up."""
MAX_RELISTENS = 5
"""Drops in a row (with no event in between) after which a server's change stream is given up."""
STDERR_TAIL_BYTES = 8192
"""How much of a stdio server's latest stderr is kept (in memory) to explain why it died."""
ERROR_LIMIT = 400
"""Longest error message kept per server, one line."""
DROPPED_IN_ERROR = 3
"""Dropped tools named in a degraded server's `error` line; `dropped_tools` lists them all."""
LINE_FAULT_LOG_INTERVAL_S = 60.0
"""A server's skipped stdout lines are logged at most once per this many seconds (with a count of the
ones in between), so a server printing a line per request cannot flood the log."""
CLIENT_INFO = types.Implementation(name="orchestrator", version=__version__)


@dataclass
class _SessionEnd:
    ready_at: float | None = None
    reason: str = "connection closed"


class ServerConnection:
    """The connection to one configured server; see the module docstring for the lifecycle."""

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
        self._next_retry_at: datetime | None = None
        self._next_retry_time: float | None = None  # the same moment on the event loop's clock
        self._ever_ready = False
        self._degraded: dict[str, str] = {}
        self._dropped: tuple[DroppedTool, ...] = ()
        self._listing_drops: dict[str, str] = {}
        self._line_faults: Counter[str] = Counter()
        self._line_fault_logged_at: dict[str, float] = {}
        self._line_faults_unlogged: Counter[str] = Counter()
        self._tools: list[dict[str, Any]] | None = None
        self._listed_at: datetime | None = None
        self._from_cache = False
        self._published: list[dict[str, Any]] | None = None
        self._on_change = on_change
        self._cache = cache
        self._transport_factory = transport_factory
        self._telemetry = telemetry
        self._limits = schema_limits or SchemaLimits()
        self._random = random.Random()
        self._client: Client | None = None
        self._session_version: str | None = None
        self._session_tasks: anyio.abc.TaskGroup | None = None
        self._checking_liveness = False
        self._lost_reason: str | None = None
        self._stderr = bytearray()
        self._stderr_fd: int | None = None
        self._timed_out = False
        self._last_noise: str | None = None
        self._log_sinks: list[LogSink | None] = []  # one per call in flight: where its caller wants log messages
        # Created in `prepare` (anyio primitives need a running event loop).
        self._settled: anyio.Event | None = None
        self._state_changed: anyio.Event | None = None
        self._lost: anyio.Event | None = None
        self._relist: anyio.Event | None = None
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
            next_retry_at=self._next_retry_at,
            dropped_tools=self._dropped,
            line_faults=dict(self._line_faults),
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
        self._relist = anyio.Event()
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
            self._set_failed(f"internal error: {_describe(exc)}")

    async def _supervise(self) -> None:
        while True:
            end = await self._session()
            now = anyio.current_time()
            if end.ready_at is not None and now - end.ready_at >= STABLE_UPTIME_S:
                self.restarts = 0
            self.restarts += 1
            delay = self._backoff(self.restarts)
            self._next_retry_time = now + delay
            self._next_retry_at = datetime.now(UTC) + timedelta(seconds=delay)
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
            self._next_retry_time = self._next_retry_at = None
            if self._circuit is Circuit.OPEN:
                self._circuit = Circuit.HALF_OPEN
                self._notify_state()

    def _backoff(self, failures: int) -> float:
        """Exponential (`restart_backoff_s` doubling per failure in a row), capped, with downward jitter."""
        base = max(self.config.restart_backoff_s, RESTART_DELAY_FLOOR_S)
        delay = min(self.config.restart_backoff_max_s, base * 2.0 ** min(failures - 1, 40))
        return max(RESTART_DELAY_FLOOR_S, delay * self._random.uniform(1 - BACKOFF_JITTER, 1.0))

    async def _session(self) -> _SessionEnd:
        """One connection from start to its end; never raises except on cancellation."""
        end = _SessionEnd()
        self._lost = anyio.Event()
        self._relist = anyio.Event()
        self._lost_reason = None
        self._timed_out = False
        self._stderr.clear()
        self._last_noise = None
        self._degraded.pop("probe", None)
        self._degraded.pop("changes", None)
        timeout = self.config.startup_timeout_s
        try:
            async with anyio.create_task_group() as guard:
                startup = anyio.CancelScope()
                watchdog = await guard.start(self._startup_watchdog, startup, timeout)
                try:
                    with startup:
                        await self._connect_and_serve(end, watchdog)
                finally:
                    watchdog.cancel()
        except Exception as exc:  # boundary: anything that ends a session becomes its reason
            if self._timed_out and end.ready_at is None:
                end.reason = self._timeout_reason(timeout)
            else:
                end.reason = self._lost_reason or self._explain(exc, started=end.ready_at is not None)
        else:
            if self._timed_out and end.ready_at is None:
                end.reason = self._timeout_reason(timeout)
            else:
                end.reason = self._lost_reason or "connection closed"
        finally:
            self._client = None
            self._session_tasks = None
            self._session_version = None
            self.protocol_version = None
        return end

    async def _startup_watchdog(
        self, startup: anyio.CancelScope, limit_s: float, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]
    ) -> None:
        """Cancel the start after `limit_s`; a first start is marked failed before the slow cleanup."""
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            await anyio.sleep(limit_s)
            self._timed_out = True
            if self.state is ServerState.STARTING:
                self._circuit = Circuit.OPEN
                self._set_failed(self._timeout_reason(limit_s))
            startup.cancel()

    async def _connect_and_serve(self, end: _SessionEnd, watchdog: anyio.CancelScope) -> None:
        async with anyio.create_task_group() as tasks:
            if self.config.transport == "stdio":
                read_fd, write_fd = os.pipe()
                tasks.start_soon(self._collect_stderr, read_fd)
                errlog = os.fdopen(write_fd, "w", closefd=True)
            else:
                errlog = None
            try:
                async with self._client_for(errlog) as client:
                    if errlog is not None:
                        errlog.close()  # the child holds its own copy; EOF on the pipe then means it exited
                        errlog = None
                    await self._serve(client, end, watchdog)
            finally:
                if errlog is not None:
                    errlog.close()
                tasks.cancel_scope.cancel()

    async def _serve(self, client: Client, end: _SessionEnd, watchdog: anyio.CancelScope) -> None:
        assert self._lost is not None
        self.protocol_version = self._session_version = client.protocol_version
        async with anyio.create_task_group() as tasks:
            if self._announces_changes(client):
                await tasks.start(self._follow_subscription, client)
            tools, dropped = await self._list_all(client)
            if self._timed_out:
                return  # the watchdog fired as the listing finished: this start has already failed
            watchdog.cancel()
            end.ready_at = anyio.current_time()
            self._client = client
            self._session_tasks = tasks
            self._publish(tools, dropped)
            tasks.start_soon(self._relist_loop, client)
            if self.config.transport != "stdio" and self.config.health_interval_s > 0:
                tasks.start_soon(self._health_loop, client)
            await self._lost.wait()
            tasks.cancel_scope.cancel()

    # ------------------------------------------------------------------ transports

    @contextlib.asynccontextmanager
    async def _client_for(self, errlog: Any) -> AsyncIterator[Client]:
        """An entered `mcp.Client` over this server's transport, watching for the transport's end and
        checking each tool of every `tools/list` answer on its way to the SDK."""
        inner = self._transport_factory(self.name, self.config, errlog)
        client = Client(
            WatchedTransport(inner, self._transport_closed, self._filter_listing),
            message_handler=self._on_message,
            logging_callback=self._on_log,
            client_info=CLIENT_INFO,
        )
        async with client:
            yield client

    def _transport_closed(self) -> None:
        when = "" if self._client is not None else " during startup"
        if self.config.transport == "stdio":
            self._mark_lost(f"server process exited{when}" + self._stderr_hint())
        else:
            self._mark_lost(f"the server closed the connection{when}")

    async def _collect_stderr(self, read_fd: int) -> None:
        """Keep the tail of the child's stderr (bounded) until the pipe closes or the session ends."""
        os.set_blocking(read_fd, False)
        self._stderr_fd = read_fd
        try:
            while self._drain_stderr():
                await anyio.wait_readable(read_fd)
        finally:
            self._stderr_fd = None
            os.close(read_fd)

    def _drain_stderr(self) -> bool:
        """Read what the child has written to stderr so far; False once the pipe is closed.

        Synchronous and non-blocking, so an error message can include the last words of a server whose
        stdout EOF was noticed before its stderr was read.
        """
        fd = self._stderr_fd
        if fd is None:
            return False
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._stderr.extend(chunk)
            del self._stderr[:-STDERR_TAIL_BYTES]
            logger.debug("server %r stderr: %s", self.name, chunk.decode("utf-8", "replace").rstrip())

    # ------------------------------------------------------------------ health

    async def _health_loop(self, client: Client) -> None:
        """Probe an idle HTTP/SSE connection every `health_interval_s`: a dead or frozen server is noticed
        without waiting for a call. One miss degrades it; `HEALTH_MISSES_TO_RESTART` in a row restart it."""
        misses = 0
        timeout = self.config.health_timeout_s
        while True:
            await anyio.sleep(self.config.health_interval_s)
            problem = await self._probe(client)
            if problem is None:
                misses = 0
                self._set_degraded("probe", None)
            elif problem == _NO_ANSWER:
                misses += 1
                if misses >= HEALTH_MISSES_TO_RESTART:
                    self._mark_lost(
                        f"{misses} health probes in a row got no answer within health_timeout_s={timeout:g} s"
                    )
                    return
                self._set_degraded("probe", f"a health probe got no answer within health_timeout_s={timeout:g} s")
            else:
                self._mark_lost(f"health probe failed: {problem}")
                return

    async def _probe(self, client: Client) -> str | None:
        """One round trip within `health_timeout_s`: None when the server answered (even with an error),
        `_NO_ANSWER`, or why the connection is broken. `server/discover` on 2026-07-28 sessions (which
        dropped `ping`), `ping` on older ones."""
        with anyio.move_on_after(self.config.health_timeout_s):
            try:
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    await client.session.send_discover(client.protocol_version)
                else:
                    await client.session.send_ping()
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    return "the connection closed"
                if exc.code == types.REQUEST_TIMEOUT:
                    return _NO_ANSWER
                return None  # an error answer is still an answer
            except Exception as exc:  # boundary: a broken transport is a reason, not a crash
                return _describe(exc)
            return None
        return _NO_ANSWER

    def _check_liveness(self, client: Client) -> None:
        """After a call timed out: probe in the background, and restart a connection that stopped answering
        altogether (a server that no longer reads its input, a wedged socket)."""
        tasks = self._session_tasks
        if tasks is None or client is not self._client or self._checking_liveness:
            return
        self._checking_liveness = True
        tasks.start_soon(self._liveness, client)

    async def _liveness(self, client: Client) -> None:
        try:
            problem = await self._probe(client)
        finally:
            self._checking_liveness = False
        if problem is not None and client is self._client:
            timeout = self.config.health_timeout_s
            detail = f"no answer within health_timeout_s={timeout:g} s" if problem == _NO_ANSWER else problem
            self._mark_lost(f"the connection stopped answering: a call timed out, then a health probe got {detail}")

    # ------------------------------------------------------------------ listing and changes

    def _announces_changes(self, client: Client) -> bool:
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False  # older servers send notifications/tools/list_changed to `_on_message`
        tools = client.server_capabilities.tools
        return bool(tools and tools.list_changed)

    async def _follow_subscription(
        self, client: Client, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold a `subscriptions/listen` stream for tool changes; re-open it (and re-list) if it drops.

        Gives up after `MAX_RELISTENS` drops in a row that delivered no event, so a server that keeps
        closing its streams cannot cause a re-list storm; its changes are then not followed (`degraded`).
        """
        started = False
        drops = 0
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    if started:
                        self._request_relist()  # no replay: changes while it was down are unknown
                    else:
                        started = True
                        task_status.started()
                    async for _event in subscription:
                        drops = 0
                        self._request_relist()
            except SubscriptionLost as exc:
                logger.debug("server %r: listen stream dropped: %s", self.name, exc)
            except (MCPError, ListenNotSupportedError) as exc:
                if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
                    self._mark_lost("the server closed the connection")
                else:
                    logger.info("server %r: no change subscription: %s", self.name, _describe(exc))
                if not started:
                    task_status.started()
                return
            if not started:
                started = True
                task_status.started()
            drops += 1
            if drops >= MAX_RELISTENS:
                logger.warning("server %r: change stream keeps dropping; tool changes are not followed", self.name)
                self._set_degraded("changes", "tool changes are not followed: the change stream keeps dropping")
                return
            await anyio.sleep(RELISTEN_DELAY_S)

    async def _on_message(self, message: Any) -> None:
        """Incoming notifications (older protocol versions) and unusable output from the server."""
        if isinstance(message, types.ToolListChangedNotification):
            self._request_relist()
        elif isinstance(message, StdoutLineFault):
            self._note_line_fault(message)
        elif isinstance(message, Exception):
            self._last_noise = _noise_text(message)
            logger.debug("server %r wrote non-MCP output: %s", self.name, self._last_noise)

    def _note_line_fault(self, fault: StdoutLineFault) -> None:
        """Count a skipped (or repaired) stdout line; log it, at most once per reason and
        `LINE_FAULT_LOG_INTERVAL_S`, with the count of those not logged in between."""
        reason = fault.reason
        self._line_faults[reason] += 1
        if reason != "invalid_utf8":
            self._last_noise = fault.excerpt
        now = anyio.current_time()
        logged_at = self._line_fault_logged_at.get(reason)
        if logged_at is not None and now - logged_at < LINE_FAULT_LOG_INTERVAL_S:
            self._line_faults_unlogged[reason] += 1
            return
        unlogged = self._line_faults_unlogged.pop(reason, 0)
        since = f" ({unlogged} more since the last report)" if unlogged else ""
        self._line_fault_logged_at[reason] = now
        level = logging.WARNING if fault.reason in ("too_long", "too_deep") else logging.INFO
        logger.log(level, "server %r: %s%s", self.name, _LINE_FAULT_TEXT[fault.reason].format(fault=fault), since)

    def _request_relist(self) -> None:
        if self._relist is not None:
            self._relist.set()

    async def _relist_loop(self, client: Client) -> None:
        assert self._relist is not None
        while True:
            await self._relist.wait()
            self._relist = anyio.Event()
            try:
                with anyio.fail_after(self.config.call_timeout_s):
                    tools, dropped = await self._list_all(client)
            except TimeoutError:
                logger.warning("server %r: re-listing tools took over %g s", self.name, self.config.call_timeout_s)
                continue
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self._mark_lost("the server closed the connection")
                    return
                logger.warning("server %r: re-listing tools failed: %s", self.name, _describe(exc))
                continue
            except (ValidationError, _ListingError) as exc:
                logger.warning("server %r: re-listing tools failed: %s", self.name, _describe(exc))
                continue
            except Exception as exc:  # boundary: transport failures end the session, not the manager
                self._mark_lost(f"re-listing tools failed: {_describe(exc)}")
                return
            self._publish(tools, dropped)

    async def _list_all(self, client: Client) -> tuple[list[dict[str, Any]], tuple[DroppedTool, ...]]:
        """Every usable tool, following `nextCursor` to the end, in wire shape (absent keys omitted), and
        the tools dropped on the way in (`_filter_listing`)."""
        self._listing_drops = {}
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_unset=True) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                dropped = tuple(DroppedTool(name, reason) for name, reason in self._listing_drops.items())
                return tools, dropped
            if cursor in seen:
                raise _ListingError(f"tools/list repeated cursor {cursor!r}")
            seen.add(cursor)
        raise _ListingError(f"tools/list did not end within {MAX_LIST_PAGES} pages")

    def _filter_listing(self, result: dict[str, Any]) -> dict[str, Any]:
        """One `tools/list` page as the server sent it -> the page with only usable tools.

        Runs on the raw result before the SDK parses it, so one broken tool (a string for `inputSchema`, a
        recursive `$ref`) no longer fails the whole listing; each dropped tool is remembered with its reason.
        """
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result  # not a page of tools: the SDK names the problem
        version = self._session_version
        rest = {key: value for key, value in result.items() if key != "tools"}
        kept: list[Any] = []
        for index, tool in enumerate(tools):
            tool = _with_object_type(tool)
            reason = tool_problem(tool, self._limits) or self._wire_problem(tool, rest, version)
            if reason is None:
                kept.append(tool)
            else:
                name = tool.get("name") if isinstance(tool, Mapping) else None
                label = name if isinstance(name, str) and name else f"#{index}"
                self._listing_drops[label] = one_line(reason, ERROR_LIMIT)
        return {**rest, "tools": kept}

    @staticmethod
    def _wire_problem(tool: Mapping[str, Any], rest: Mapping[str, Any], version: str | None) -> str | None:
        """What the SDK itself would refuse in this tool at the negotiated version (its own models, and at
        2026-07-28 its `x-mcp-header` rule), as one line; None when it accepts it."""
        if version is None:
            return None
        if version in MODERN_PROTOCOL_VERSIONS:
            invalid = find_invalid_x_mcp_header(dict(tool["inputSchema"]))
            if invalid is not None:
                return f"inputSchema has an invalid x-mcp-header: {invalid}"
        try:
            wire_methods.validate_server_result("tools/list", version, {**rest, "tools": [tool]})
        except ValidationError as exc:
            for error in exc.errors():
                location = error["loc"]
                if location[:2] == ("tools", 0) and len(location) > 2:
                    where = ".".join(str(part) for part in location[2:])
                    return f"{where}: {error['msg']}"
        except (KeyError, ValueError):  # an unknown method/version pair: the SDK does not check it either
            return None
        return None

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
        client = await self._ready_client()
        self._log_sinks.append(on_log)
        try:
            with anyio.fail_after(self.config.call_timeout_s):
                result = await client.call_tool(
                    tool,
                    arguments,
                    progress_callback=progress_callback,
                    meta=meta,  # type: ignore[arg-type]
                )
        except TimeoutError:
            self._check_liveness(client)
            raise ToolCallTimeout(
                self.name, tool, f"no answer within call_timeout_s={self.config.call_timeout_s:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                reason = self._lost_reason or "the connection closed during the call"
                self._mark_lost(reason)
                raise TransportError(self.name, tool, reason) from None
            if exc.error.data == TOO_LONG_MARKER:
                message = one_line(exc.message, ERROR_LIMIT)
            else:
                message = f"server answered with error {exc.code}: {one_line(exc.message, ERROR_LIMIT)}"
            raise ToolExecutionError(self.name, tool, message, result=_error_result(message)) from None
        except (ValidationError, RuntimeError, RecursionError) as exc:
            # The answer arrived but cannot be used (wrong shape, structured content that misses the
            # output schema, nested too deep): a problem of this result, not of the connection.
            message = f"server sent an invalid result: {one_line(str(exc) or type(exc).__name__, ERROR_LIMIT)}"
            raise ToolExecutionError(self.name, tool, message, result=_error_result(message)) from None
        except Exception as exc:  # boundary: broken streams, sockets, HTTP errors
            reason = self._lost_reason or _describe(exc)
            self._mark_lost(reason)
            raise TransportError(self.name, tool, reason) from None
        finally:
            self._log_sinks.remove(on_log)
        if result.is_error:
            message = f"the tool reported an error: {_result_text(result)}"
            raise ToolExecutionError(self.name, tool, message, result=result)
        return result

    async def request(self, what: str, func: Callable[[Client], Awaitable[T]]) -> T:
        """`func(live client)` within `call_timeout_s`: resources and prompts, which the gateway passes on.

        Raises:
            ServerError: not ready (as for calls), or no answer within `call_timeout_s` (`what` names it).
            MCPError: the server answered with a JSON-RPC error.
        """
        client = await self._ready_client()
        with anyio.move_on_after(self.config.call_timeout_s) as scope:
            return await func(client)
        assert scope.cancelled_caught
        raise ServerError(self.name, f"{what}: no answer within call_timeout_s={self.config.call_timeout_s:g} s")

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """A log message from the server goes to the caller of the call it belongs to. The protocol does
        not say which call that is once the message reaches the client, so it is delivered only while
        exactly one call is in flight (and its caller wants log messages); with several, it could be any."""
        sink = self._log_sinks[0] if len(self._log_sinks) == 1 else None
        if sink is not None:
            try:
                await sink(params)
            except Exception:  # boundary: the caller may be gone; the server's session must go on
                logger.debug("server %r: relaying a log message failed", self.name, exc_info=True)
        else:
            logger.debug("server %r log (%s): %s", self.name, params.level, str(params.data)[:200])

    async def _ready_client(self) -> Client:
        """The live client. While the first start or a quick restart is under way, waits for it (up to
        `startup_timeout_s` plus the backoff still to run); a failed server (circuit open) answers at once."""
        assert self._state_changed is not None, "the manager has not started"
        bound = self.config.startup_timeout_s + self._retry_in()
        deadline = anyio.current_time() + bound
        while True:
            client = self._client
            if self.state in SERVING and client is not None:
                return client
            if self.state is ServerState.FAILED:
                raise ServerError(self.name, f"failed: {self.error}; {self._retry_hint()}")
            if self.state is ServerState.STOPPED:
                raise ServerError(self.name, "stopped")
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                break
            with anyio.move_on_after(remaining):
                await self._state_changed.wait()
        if self.state is ServerState.RESTARTING:
            raise ServerError(self.name, f"restarting ({self.error}); {self._retry_hint()}")
        raise ServerError(self.name, f"not ready after {bound:g} s (still starting: {self.error or 'connecting'})")

    def _retry_in(self) -> float:
        if self._next_retry_time is None:
            return 0.0
        return max(0.0, self._next_retry_time - anyio.current_time())

    def _retry_hint(self) -> str:
        if self._next_retry_time is None:
            return "retrying now"
        return f"retry in {max(1, math.ceil(self._retry_in()))} s"

    # ------------------------------------------------------------------ state

    def _seed_from_cache(self, cache: ToolListCache) -> None:
        entry = cache.load(self.name, self.config)
        if entry is None:
            return
        self._tools = entry.tools
        self._listed_at = entry.written_at
        self._from_cache = True
        self._published = entry.tools

    def _publish(self, tools: list[dict[str, Any]], dropped: tuple[DroppedTool, ...]) -> None:
        for tool in [tool for tool in dropped if tool not in self._dropped]:  # once, not on every re-list
            logger.info("server %r: tool %r dropped: %s", self.name, tool.name, tool.reason)
        self._tools = tools
        self._dropped = dropped
        self._listed_at = datetime.now(UTC)
        self._from_cache = False
        self._ever_ready = True
        self._circuit = Circuit.CLOSED
        self._next_retry_time = self._next_retry_at = None
        self._degraded.pop("tools", None)
        if dropped:
            named = "; ".join(f"{tool.name} ({tool.reason})" for tool in dropped[:DROPPED_IN_ERROR])
            more = f"; and {len(dropped) - DROPPED_IN_ERROR} more" if len(dropped) > DROPPED_IN_ERROR else ""
            self._degraded["tools"] = f"{len(dropped)} tool(s) dropped: {named}{more}"
        self._set_serving()
        if self._cache is not None:
            try:
                self._cache.store(self.name, self.config, tools, written_at=self._listed_at)
            except OSError as exc:
                where = self._cache.directory
                logger.warning("server %r: cannot write the tool cache in %s: %s", self.name, where, exc)

    def _set_degraded(self, cause: str, problem: str | None) -> None:
        """Record (or clear, with None) one reason the connected server is degraded."""
        if problem is None:
            if self._degraded.pop(cause, None) is None:
                return
        elif self._degraded.get(cause) == problem:
            return
        else:
            self._degraded[cause] = problem
        self._set_serving()

    def _set_serving(self) -> None:
        if self._client is None or self.state is ServerState.STOPPED:
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
        self._client = None
        self._next_retry_time = self._next_retry_at = None
        self._set_state(ServerState.STOPPED, self.error if self.state is ServerState.FAILED else None)

    def _mark_lost(self, reason: str) -> None:
        if self._lost is None or self._lost.is_set():
            return
        self._lost_reason = reason
        self._client = None  # new calls wait for the restart instead of hitting the dying session
        self._lost.set()
        if self.state in SERVING:  # say so now: closing the old session may take a moment
            self._set_state(ServerState.RESTARTING, reason)

    # ------------------------------------------------------------------ explanations

    def _timeout_reason(self, timeout: float) -> str:
        reason = f"no answer within startup_timeout_s={timeout:g} s"
        if self._last_noise:
            reason += f"; it wrote non-MCP output on stdout: {self._last_noise}"
        return reason + self._stderr_hint()

    def _stderr_hint(self) -> str:
        self._drain_stderr()
        tail = self._stderr.decode("utf-8", "replace").strip().splitlines()
        return f"; stderr: {one_line(tail[-1], 200)}" if tail else ""

    def _explain(self, exc: BaseException, *, started: bool) -> str:
        """One line saying why a session ended, from its exception."""
        leaf = _leaf(exc)
        config = self.config
        if isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED:
            what = "server process exited" if config.transport == "stdio" else "the server closed the connection"
            return (what if started else f"{what} during startup") + self._stderr_hint()
        if isinstance(leaf, OSError) and config.transport == "stdio" and not started:
            if config.cwd and not os.path.isdir(config.cwd):
                return f"cannot start {config.command!r}: working directory {config.cwd!r} does not exist"
            return f"cannot start {config.command!r}: {leaf.strerror or leaf}"
        if isinstance(leaf, httpx2.HTTPStatusError):
            return f"HTTP {leaf.response.status_code} from {leaf.request.url}"
        if isinstance(leaf, httpx2.HTTPError):
            return f"cannot reach {config.url}: {_describe(leaf)}"
        if isinstance(leaf, _ListingError):
            return str(leaf)
        if isinstance(leaf, MCPError):
            return f"initialization failed: {_describe(leaf)}" if not started else _describe(leaf)
        return _describe(leaf) + (self._stderr_hint() if config.transport == "stdio" else "")


_NO_ANSWER = "no answer"
"""`_probe`'s verdict for a probe that timed out (the connection may still be alive, just not answering)."""

_LINE_FAULT_TEXT = {
    "not_json": "skipped a stdout line that is not JSON: {fault.excerpt}",
    "not_jsonrpc": "skipped a stdout line that is not a JSON-RPC message: {fault.excerpt}",
    "too_long": "dropped a stdout line longer than max_message_bytes ({fault.size} bytes read): {fault.excerpt}",
    "too_deep": "skipped a stdout line nested too deeply to parse: {fault.excerpt}",
    "invalid_utf8": "replaced invalid UTF-8 in a stdout line: {fault.excerpt}",
}
"""How each `StdoutLineFault` reason is logged."""


def _with_object_type(tool: Any) -> Any:
    """The tool with `"type": "object"` added to an `inputSchema` that has no `type` (MCP requires it; some
    published servers leave it out, and `tools/call` arguments are an object anyway)."""
    if isinstance(tool, Mapping) and isinstance(tool.get("inputSchema"), Mapping) and "type" not in tool["inputSchema"]:
        return {**tool, "inputSchema": {"type": "object", **tool["inputSchema"]}}
    return tool


class _ListingError(Exception):
    """The server's tools/list pagination misbehaved."""


def _leaf(exc: BaseException) -> BaseException:
    """The first non-cancellation leaf of an exception group (task groups wrap the real cause)."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        text = f"{leaf.message} (error {leaf.code})"
    else:
        text = str(leaf) or type(leaf).__name__
        if type(leaf).__name__ not in text:
            text = f"{type(leaf).__name__}: {text}"
    return one_line(text, ERROR_LIMIT)


def _noise_text(exc: Exception) -> str:
    """The offending line of a stdout parse failure, quoted, or the error text."""
    if isinstance(exc, ValidationError):
        for error in exc.errors():
            if isinstance(error.get("input"), str):
                return repr(one_line(error["input"], 80))
    return one_line(str(exc), 120)


def _error_result(message: str) -> types.CallToolResult:
    """An isError result standing in for a protocol-level error, so `ToolExecutionError.result` is always set."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def _result_text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return one_line(" ".join(texts), ERROR_LIMIT) or "(no text)"
