"""One MCP server's connection lifecycle: start, list, follow changes, route calls, restart, stop.

A `ServerConnection` is driven by one long-lived task (`run`) that owns the `mcp.Client` context of
the current session, so calls from any task go through the same live connection. Each session:

1. connects (spawns the stdio process, or opens the HTTP/SSE connection) and negotiates the protocol,
   opens a `subscriptions/listen` stream on 2026-07-28 servers that announce `tools.listChanged`,
   and lists every page of tools, all within `startup_timeout_s`;
2. serves: a change event (listen stream) or a `notifications/tools/list_changed` message (older
   protocol versions, through `message_handler`) triggers a full re-list;
3. ends when the transport closes (the process died, the socket closed), a call finds the connection
   broken, or the manager closes. The supervisor then restarts with doubling backoff, up to
   `max_restarts` consecutive tries, and marks the server `failed` after that.

A first start that fails is not retried: the server is `failed` with its reason at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from ... import __version__
from ..._config import ServerConfig
from ..._errors import ServerError, ToolCallTimeout, ToolExecutionError, TransportError
from ._cache import ToolListCache
from ._transports import TransportFactory, default_transport
from ._normalization import one_line

__all__ = ["ServerConnection", "ServerState", "ServerStatus"]

logger = logging.getLogger(__name__)

STABLE_UPTIME_S = 30.0
"""A session that stayed up this long before it died starts a fresh restart budget; a server that dies
sooner after each restart uses up `max_restarts` and ends `failed` instead of flapping forever."""
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
CLIENT_INFO = types.Implementation(name="orchestrator", version=__version__)


class ServerState(StrEnum):
    STARTING = "starting"
    """Connecting, listing, or waiting to restart; cached or last known tools are still offered."""
    READY = "ready"
    """Connected and listed: calls are routed."""
    FAILED = "failed"
    """Could not start, or died and used up its restarts; `error` says why."""
    STOPPED = "stopped"
    """Closed by the manager, or disabled in the config."""


@dataclass(frozen=True)
class ServerStatus:
    """A snapshot of one server, for `orchestrator servers` and health checks."""

    name: str
    transport: str
    state: ServerState
    tools: int
    """Tools currently offered (live, or cached while starting); 0 when failed or stopped."""
    error: str | None
    """The last error (why it failed, or why it is restarting); None when all is well."""
    listed_at: datetime | None
    """When the tool list was last fetched (or, for a cached list, written); UTC."""
    from_cache: bool
    """True while the tool list comes from the warm-start cache rather than the live server."""
    restarts: int = 0
    """Consecutive restarts so far (the count starts again after a session that stayed up 30 s)."""
    protocol_version: str | None = None
    """Negotiated MCP protocol version of the current session."""


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
    ) -> None:
        self.name = name
        self.config = config
        self.state = ServerState.STARTING
        self.error: str | None = None
        self.restarts = 0
        self.protocol_version: str | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._listed_at: datetime | None = None
        self._from_cache = False
        self._published: list[dict[str, Any]] | None = None
        self._on_change = on_change
        self._cache = cache
        self._transport_factory = transport_factory
        self._client: Client | None = None
        self._first_attempt = True
        self._lost_reason: str | None = None
        self._stderr = bytearray()
        self._stderr_fd: int | None = None
        self._timed_out = False
        self._last_noise: str | None = None
        # Created in `run` (anyio primitives need a running event loop).
        self._settled: anyio.Event | None = None
        self._state_changed: anyio.Event | None = None
        self._lost: anyio.Event | None = None
        self._relist: anyio.Event | None = None
        if cache is not None:
            self._seed_from_cache(cache)

    # ------------------------------------------------------------------ views

    def visible_tools(self) -> list[dict[str, Any]] | None:
        """Tools offered to the catalog: live when ready, cached/last known while starting, else None."""
        if self.state in (ServerState.READY, ServerState.STARTING):
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
            protocol_version=self.protocol_version if self.state is ServerState.READY else None,
        )

    async def wait_settled(self) -> None:
        """Return once the first start has ended, ready or failed."""
        assert self._settled is not None, "run() has not started"
        await self._settled.wait()

    # ------------------------------------------------------------------ supervisor

    def prepare(self) -> None:
        """Create the anyio primitives; call from the event loop before `run` and before any call."""
        self._settled = anyio.Event()
        self._state_changed = anyio.Event()
        self._relist = anyio.Event()

    async def run(self) -> None:
        """Start, serve, and restart with backoff until failed or cancelled (by the manager closing)."""
        if self._settled is None:
            self.prepare()
        try:
            await self._supervise()
        except Exception as exc:  # boundary: a bug here must not cancel the manager's other servers
            logger.exception("server %r: supervisor crashed", self.name)
            self._set_failed(f"internal error: {_describe(exc)}")

    async def _supervise(self) -> None:
        consecutive = 0
        while True:
            end = await self._session()
            now = anyio.current_time()
            if self._first_attempt and end.ready_at is None:
                self._set_failed(end.reason)
                return
            self._first_attempt = False
            if end.ready_at is not None and now - end.ready_at >= STABLE_UPTIME_S:
                consecutive = 0
            if consecutive >= self.config.max_restarts:
                tries = f"after {consecutive} restart(s)" if consecutive else "(max_restarts is 0)"
                self._set_failed(f"{end.reason}; gave up {tries}")
                return
            consecutive += 1
            self.restarts = consecutive
            delay = self.config.restart_backoff_s * 2 ** (consecutive - 1)
            attempt = f"{consecutive}/{self.config.max_restarts}"
            logger.info("server %r: %s; restart %s in %g s", self.name, end.reason, attempt, delay)
            self._set_state(ServerState.STARTING, f"{end.reason}; restarting ({attempt})")
            await anyio.sleep(delay)

    async def _session(self) -> _SessionEnd:
        """One connection from start to its end; never raises except on cancellation."""
        end = _SessionEnd()
        self._lost = anyio.Event()
        self._relist = anyio.Event()
        self._lost_reason = None
        self._timed_out = False
        self._stderr.clear()
        self._last_noise = None
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
            self.protocol_version = None
        return end

    async def _startup_watchdog(
        self, startup: anyio.CancelScope, timeout: float, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]
    ) -> None:
        """Cancel the start after `timeout`; a first start is marked failed before the slow cleanup."""
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            await anyio.sleep(timeout)
            self._timed_out = True
            if self._first_attempt:
                self._set_failed(self._timeout_reason(timeout))
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
        self.protocol_version = client.protocol_version
        async with anyio.create_task_group() as tasks:
            if self._announces_changes(client):
                await tasks.start(self._follow_subscription, client)
            tools = await self._list_all(client)
            if self._timed_out:
                return  # the watchdog fired as the listing finished: this start has already failed
            watchdog.cancel()
            end.ready_at = anyio.current_time()
            self._client = client
            self._publish(tools, ServerState.READY)
            tasks.start_soon(self._relist_loop, client)
            await self._lost.wait()
            tasks.cancel_scope.cancel()

    # ------------------------------------------------------------------ transports

    @contextlib.asynccontextmanager
    async def _client_for(self, errlog: Any) -> AsyncIterator[Client]:
        """An entered `mcp.Client` over this server's transport, watching for the transport's end."""
        inner = self._transport_factory(self.name, self.config, errlog)
        client = Client(
            _WatchedTransport(inner, self._transport_closed),
            message_handler=self._on_message,
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
        closing its streams cannot cause a re-list storm; its changes are then not followed.
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
                return
            await anyio.sleep(RELISTEN_DELAY_S)

    async def _on_message(self, message: Any) -> None:
        """Incoming notifications (older protocol versions) and unparseable output from the server."""
        if isinstance(message, types.ToolListChangedNotification):
            self._request_relist()
        elif isinstance(message, Exception):
            self._last_noise = _noise_text(message)
            logger.debug("server %r wrote non-MCP output: %s", self.name, self._last_noise)

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
                    tools = await self._list_all(client)
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
            self._publish(tools, ServerState.READY)

    async def _list_all(self, client: Client) -> list[dict[str, Any]]:
        """Every tool, following `nextCursor` to the end, in wire shape (absent keys omitted)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_unset=True) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
            if cursor in seen:
                raise _ListingError(f"tools/list repeated cursor {cursor!r}")
            seen.add(cursor)
        raise _ListingError(f"tools/list did not end within {MAX_LIST_PAGES} pages")

    # ------------------------------------------------------------------ calls

    async def call_tool(self, tool: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Route one call; see `MCPManager.call_tool` for the errors."""
        client = await self._ready_client()
        try:
            with anyio.fail_after(self.config.call_timeout_s):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            raise ToolCallTimeout(
                self.name, tool, f"no answer within call_timeout_s={self.config.call_timeout_s:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                reason = self._lost_reason or "the connection closed during the call"
                self._mark_lost(reason)
                raise TransportError(self.name, tool, reason) from None
            message = f"server answered with error {exc.code}: {one_line(exc.message, ERROR_LIMIT)}"
            raise ToolExecutionError(self.name, tool, message, result=_error_result(message)) from None
        except ValidationError as exc:
            message = f"server sent an invalid result: {one_line(str(exc), ERROR_LIMIT)}"
            raise ToolExecutionError(self.name, tool, message, result=_error_result(message)) from None
        except Exception as exc:  # boundary: broken streams, sockets, HTTP errors
            reason = self._lost_reason or _describe(exc)
            self._mark_lost(reason)
            raise TransportError(self.name, tool, reason) from None
        if result.is_error:
            message = f"the tool reported an error: {_result_text(result)}"
            raise ToolExecutionError(self.name, tool, message, result=result)
        return result

    async def _ready_client(self) -> Client:
        """The live client; waits (up to `startup_timeout_s` plus the backoff) while (re)starting."""
        assert self._state_changed is not None, "the manager has not started"
        bound = self.config.startup_timeout_s + self.config.restart_backoff_s * 2 ** max(self.restarts, 0)
        with anyio.move_on_after(bound):
            while self.state is ServerState.STARTING or (self.state is ServerState.READY and self._client is None):
                await self._state_changed.wait()
        client = self._client
        if self.state is ServerState.READY and client is not None:
            return client
        if self.state is ServerState.FAILED:
            raise ServerError(self.name, f"failed: {self.error}")
        if self.state is ServerState.STOPPED:
            raise ServerError(self.name, "stopped")
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

    def _publish(self, tools: list[dict[str, Any]], state: ServerState) -> None:
        self._tools = tools
        self._listed_at = datetime.now(UTC)
        self._from_cache = False
        self._set_state(state, None)
        if self._cache is not None:
            try:
                self._cache.store(self.name, self.config, tools, written_at=self._listed_at)
            except OSError as exc:
                where = self._cache.directory
                logger.warning("server %r: cannot write the tool cache in %s: %s", self.name, where, exc)

    def _set_state(self, state: ServerState, error: str | None) -> None:
        self.state = state
        self.error = None if error is None else one_line(error, ERROR_LIMIT)
        if state in (ServerState.READY, ServerState.FAILED) and self._settled is not None:
            self._settled.set()
        if self._state_changed is not None:
            event, self._state_changed = self._state_changed, anyio.Event()
            event.set()
        visible = self.visible_tools()
        if visible != self._published and state is not ServerState.STOPPED:
            self._published = visible
            self._on_change()

    def _set_failed(self, reason: str) -> None:
        if self.state is not ServerState.FAILED:
            logger.info("server %r failed: %s", self.name, reason)
        self._set_state(ServerState.FAILED, reason)

    def set_stopped(self) -> None:
        """Mark the server stopped (the manager closed); keeps the last error for the record."""
        self._client = None
        self._set_state(ServerState.STOPPED, self.error if self.state is ServerState.FAILED else None)

    def _mark_lost(self, reason: str) -> None:
        if self._lost is None or self._lost.is_set():
            return
        self._lost_reason = reason
        self._client = None  # new calls wait for the restart instead of hitting the dying session
        self._lost.set()

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
        if isinstance(leaf, MCPError):
            return f"initialization failed: {_describe(leaf)}" if not started else _describe(leaf)
        return _describe(leaf) + (self._stderr_hint() if config.transport == "stdio" else "")


class _ListingError(Exception):
    """The server's tools/list pagination misbehaved."""


class _WatchedTransport:
    """Wraps a transport so the end of its read stream (EOF: process exited, socket closed) is noticed.

    Without this a dead server with no request in flight would go unnoticed until the next call.
    """

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def __aenter__(self) -> tuple[Any, Any]:
        read_stream, write_stream = await self._inner.__aenter__()
        return _WatchedReadStream(read_stream, self._on_end), write_stream

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._inner.__aexit__(*exc_info)


class _WatchedReadStream:
    """A read stream that calls `on_end` once when it reaches its end or is closed under the reader."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


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
