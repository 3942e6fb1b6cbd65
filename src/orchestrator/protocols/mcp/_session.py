"""One session with an MCP server: a single live connection, from connecting to its end.

The server's supervisor (`_connection.ServerConnection`) creates a `Session` for each try and drives it;
the session owns the `mcp.Client` context, so calls from any task go through the same live connection:

1. `open` connects (spawns the stdio process with its stderr on a pipe whose tail is kept, or opens the
   HTTP/SSE connection), negotiates the protocol, and opens a `subscriptions/listen` stream on
   2026-07-28 servers that announce `tools.listChanged`, before the first listing so no change is missed;
2. `list_tools` lists every page; each tool is checked on the way in (`_schemas.tool_problem` and the
   SDK's own model) and one that cannot be used is dropped with its reason while the others stay;
3. `serve` follows changes: an event on the listen stream or a `notifications/tools/list_changed`
   message (older protocol versions, through `message_handler`) triggers a full re-list, handed to the
   supervisor. Calls (`call_tool`, `request`) go through the client and their failures become the
   project's errors; a server's log message goes to the caller of the one call in flight;
4. it ends when the transport closes (the process died, the socket closed), a call or a re-list finds
   the connection broken, or the supervisor marks it lost (probes unanswered): `mark_lost`.

Skipped stdout lines and other non-MCP output are counted and explained here. The session reports to its
supervisor only through `SessionOwner`, so it never imports the supervisor.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

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

from ..._config import ServerConfig
from ..._errors import ServerError, ToolCallTimeout, ToolExecutionError, TransportError
from ..._urls import redacted_url
from ..._version import __version__
from ._normalization import one_line
from ._schemas import SchemaLimits, tool_problem
from ._status import ERROR_LIMIT, DroppedTool
from ._transports import TOO_LONG_MARKER, StdoutLineFault, TransportFactory, WatchedTransport

__all__ = ["NO_ANSWER", "LineFaults", "LogSink", "Session", "SessionOwner", "describe"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
LogSink = Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]
"""Where a call's caller wants the server's log messages (the gateway relays them to its client)."""

MAX_RELIST_SPACING_S = 30.0
"""The longest pause after a re-list before the next (each waits as long as the last listing took)."""
MAX_LIST_PAGES = 1000
"""Most `tools/list` pages followed in one listing: a paginator that never ends cannot hang a re-list."""
RELISTEN_DELAY_S = 0.2
"""Pause before re-opening a `subscriptions/listen` stream that dropped while the connection stays up."""
MAX_RELISTENS = 5
"""Drops in a row (with no event in between) after which a server's change stream is given up."""
STDERR_TAIL_BYTES = 8192
"""How much of a stdio server's latest stderr is kept (in memory) to explain why it died."""
LINE_FAULT_LOG_INTERVAL_S = 60.0
"""A server's skipped stdout lines are logged at most once per this many seconds (with a count of the
ones in between), so a server printing a line per request cannot flood the log."""
CLIENT_INFO = types.Implementation(name="orchestrator", version=__version__)

NO_ANSWER = "no answer"
"""`Session.probe`'s verdict for a probe that timed out (the connection may still be alive, just not answering)."""

_LINE_FAULT_TEXT = {
    "not_json": "skipped a stdout line that is not JSON: {fault.excerpt}",
    "not_jsonrpc": "skipped a stdout line that is not a JSON-RPC message: {fault.excerpt}",
    "too_long": "dropped a stdout line longer than max_message_bytes ({fault.size} bytes read): {fault.excerpt}",
    "too_deep": "skipped a stdout line nested too deeply to parse: {fault.excerpt}",
    "invalid_utf8": "replaced invalid UTF-8 in a stdout line: {fault.excerpt}",
}
"""How each `StdoutLineFault` reason is logged."""


class SessionOwner(Protocol):
    """What a session tells the supervisor that created it."""

    async def publish(self, tools: list[dict[str, Any]], dropped: tuple[DroppedTool, ...]) -> None:
        """A re-list after a change finished: offer this list."""

    def set_degraded(self, cause: str, problem: str | None) -> None:
        """Record (or clear, with None) one reason the connected server is degraded."""

    def session_lost(self, session: Session, reason: str) -> None:
        """`session` broke and is ending (heard once per session)."""

    def call_timed_out(self, session: Session) -> None:
        """A call on `session` ran past `call_timeout_s`: check that the connection still answers."""


class LineFaults:
    """A server's skipped (or repaired) stdout lines, counted by reason since the manager started; it
    outlives the sessions, each of which reports its lines here."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.counts: Counter[str] = Counter()
        self._logged_at: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def note(self, fault: StdoutLineFault) -> None:
        """Count one line; log it, at most once per reason and `LINE_FAULT_LOG_INTERVAL_S`, with the count
        of those not logged in between."""
        reason = fault.reason
        self.counts[reason] += 1
        now = anyio.current_time()
        logged_at = self._logged_at.get(reason)
        if logged_at is not None and now - logged_at < LINE_FAULT_LOG_INTERVAL_S:
            self._unlogged[reason] += 1
            return
        unlogged = self._unlogged.pop(reason, 0)
        since = f" ({unlogged} more since the last report)" if unlogged else ""
        self._logged_at[reason] = now
        level = logging.WARNING if fault.reason in ("too_long", "too_deep") else logging.INFO
        logger.log(level, "server %r: %s%s", self._name, _LINE_FAULT_TEXT[fault.reason].format(fault=fault), since)


class _StderrTail:
    """The last `STDERR_TAIL_BYTES` a stdio server wrote to stderr, read from a pipe during its session."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tail = bytearray()
        self._fd: int | None = None

    async def collect(self, read_fd: int) -> None:
        """Keep the tail of the child's stderr (bounded) until the pipe closes or the session ends."""
        os.set_blocking(read_fd, False)
        self._fd = read_fd
        try:
            while self.drain():
                await anyio.wait_readable(read_fd)
        finally:
            self._fd = None
            os.close(read_fd)

    def drain(self) -> bool:
        """Read what the child has written to stderr so far; False once the pipe is closed.

        Synchronous and non-blocking, so an error message can include the last words of a server whose
        stdout EOF was noticed before its stderr was read.
        """
        fd = self._fd
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
            self._tail.extend(chunk)
            del self._tail[:-STDERR_TAIL_BYTES]
            logger.debug("server %r stderr: %s", self._name, chunk.decode("utf-8", "replace").rstrip())

    def hint(self) -> str:
        """`; stderr: <its last line>` to append to an error, or "" when it wrote nothing."""
        self.drain()
        tail = self._tail.decode("utf-8", "replace").strip().splitlines()
        return f"; stderr: {one_line(tail[-1], 200)}" if tail else ""


class Session:
    """One connection to a server, from `open` to its end; see the module docstring."""

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        owner: SessionOwner,
        *,
        transport_factory: TransportFactory,
        schema_limits: SchemaLimits,
        line_faults: LineFaults,
    ) -> None:
        self.name = name
        self.config = config
        self.lost_reason: str | None = None
        """Why `mark_lost` ended the session; None while it has not."""
        self._owner = owner
        self._transport_factory = transport_factory
        self._filter = _ListingFilter(schema_limits, config.max_tools)
        self._line_faults = line_faults
        self._client: Client | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._up = False  # from `serve` until `mark_lost`
        self._lost = anyio.Event()
        self._relist = anyio.Event()
        self._stderr = _StderrTail(name)
        self._last_noise: str | None = None
        self._log_sinks: list[LogSink | None] = []  # one per call in flight: where its caller wants log messages

    @property
    def protocol_version(self) -> str | None:
        """The negotiated MCP protocol version, once connected."""
        return None if self._client is None else self._client.protocol_version

    @property
    def serving(self) -> bool:
        """Up (`serve` was called), not lost, and still open."""
        return self._up and self._tasks is not None

    # ------------------------------------------------------------------ connecting

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Connected and following the server's change stream (if it has one) while inside; on exit the
        session's tasks are cancelled and the connection is closed (a stdio server is stopped)."""
        async with anyio.create_task_group() as tasks:
            if self.config.transport == "stdio":
                read_fd, write_fd = os.pipe()
                tasks.start_soon(self._stderr.collect, read_fd)
                errlog = os.fdopen(write_fd, "w", closefd=True)
            else:
                errlog = None
            try:
                async with self._client_for(errlog) as client:
                    if errlog is not None:
                        errlog.close()  # the child holds its own copy; EOF on the pipe then means it exited
                        errlog = None
                    self._client = client
                    self._filter.version = client.protocol_version
                    async with anyio.create_task_group() as serving:
                        self._tasks = serving
                        if self._announces_changes(client):
                            await serving.start(self._follow_subscription, client)
                        try:
                            yield
                        finally:
                            self._tasks = None
                            serving.cancel_scope.cancel()
            finally:
                if errlog is not None:
                    errlog.close()
                tasks.cancel_scope.cancel()

    @contextlib.asynccontextmanager
    async def _client_for(self, errlog: Any) -> AsyncIterator[Client]:
        """An entered `mcp.Client` over this server's transport, watching for the transport's end and
        checking each tool of every `tools/list` answer on its way to the SDK."""
        inner = self._transport_factory(self.name, self.config, errlog)
        client = Client(
            WatchedTransport(inner, self._transport_closed, self._filter),
            message_handler=self._on_message,
            logging_callback=self._on_log,
            client_info=CLIENT_INFO,
        )
        async with client:
            yield client

    @property
    def _live_client(self) -> Client:
        assert self._client is not None, "the session is not open"
        return self._client

    def _transport_closed(self) -> None:
        when = "" if self._up else " during startup"
        if self.config.transport == "stdio":
            self.mark_lost(f"server process exited{when}" + self._stderr.hint())
        else:
            self.mark_lost(f"the server closed the connection{when}")

    # ------------------------------------------------------------------ lifetime

    def serve(self) -> None:
        """The first listing is published: calls may come, and changes trigger re-lists from now on."""
        assert self._tasks is not None, "the session is not open"
        self._up = True
        self._tasks.start_soon(self._relist_loop)

    def start_soon(self, func: Callable[[Session], Coroutine[Any, Any, None]]) -> None:
        """Run `func(this session)` in the background while it is open (the supervisor's probes)."""
        assert self._tasks is not None, "the session is not open"
        self._tasks.start_soon(func, self)

    async def wait_lost(self) -> None:
        """Return once `mark_lost` has been called."""
        await self._lost.wait()

    def mark_lost(self, reason: str) -> None:
        """End the session for `reason` (the first reason given is kept); the supervisor hears of it."""
        if self._lost.is_set():
            return
        self.lost_reason = reason
        self._up = False
        self._lost.set()
        self._owner.session_lost(self, reason)

    async def probe(self) -> str | None:
        """One round trip within `health_timeout_s`: None when the server answered (even with an error),
        `NO_ANSWER`, or why the connection is broken. `server/discover` on 2026-07-28 sessions (which
        dropped `ping`), `ping` on older ones."""
        client = self._live_client
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
                    return NO_ANSWER
                return None  # an error answer is still an answer
            except Exception as exc:  # boundary: a broken transport is a reason, not a crash
                return describe(exc)
            return None
        return NO_ANSWER

    # ------------------------------------------------------------------ listing and changes

    async def list_tools(self) -> tuple[list[dict[str, Any]], tuple[DroppedTool, ...]]:
        """Every usable tool, following `nextCursor` to the end, in wire shape (absent keys omitted), and
        the tools dropped on the way in (`_ListingFilter`)."""
        client = self._live_client
        self._filter.start()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(await anyio.to_thread.run_sync(_wire_shapes, page.tools))  # many tools: off the loop
            cursor = page.next_cursor
            if not cursor:
                return tools, self._filter.dropped()
            if self._filter.full:  # max_tools kept: the pages after are not even read
                return tools, self._filter.dropped(unread=True)
            if cursor in seen:
                raise _ListingError(f"tools/list repeated cursor {cursor!r}")
            seen.add(cursor)
        raise _ListingError(f"tools/list did not end within {MAX_LIST_PAGES} pages")

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
                    self.mark_lost("the server closed the connection")
                else:
                    logger.info("server %r: no change subscription: %s", self.name, describe(exc))
                if not started:
                    task_status.started()
                return
            if not started:
                started = True
                task_status.started()
            drops += 1
            if drops >= MAX_RELISTENS:
                logger.warning("server %r: change stream keeps dropping; tool changes are not followed", self.name)
                self._owner.set_degraded("changes", "tool changes are not followed: the change stream keeps dropping")
                return
            await anyio.sleep(RELISTEN_DELAY_S)

    async def _on_message(self, message: Any) -> None:
        """Incoming notifications (older protocol versions) and unusable output from the server."""
        if isinstance(message, types.ToolListChangedNotification):
            self._request_relist()
        elif isinstance(message, StdoutLineFault):
            if message.reason != "invalid_utf8":
                self._last_noise = message.excerpt
            self._line_faults.note(message)
        elif isinstance(message, Exception):
            self._last_noise = _noise_text(message)
            logger.debug("server %r wrote non-MCP output: %s", self.name, self._last_noise)

    def _request_relist(self) -> None:
        self._relist.set()

    async def _relist_loop(self) -> None:
        while True:
            await self._relist.wait()
            self._relist = anyio.Event()
            started = anyio.current_time()
            try:
                with anyio.fail_after(self.config.call_timeout_s):
                    tools, dropped = await self.list_tools()
            except TimeoutError:
                logger.warning("server %r: re-listing tools took over %g s", self.name, self.config.call_timeout_s)
                continue
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self.mark_lost("the server closed the connection")
                    return
                logger.warning("server %r: re-listing tools failed: %s", self.name, describe(exc))
                continue
            except (ValidationError, _ListingError) as exc:
                logger.warning("server %r: re-listing tools failed: %s", self.name, describe(exc))
                continue
            except Exception as exc:  # boundary: transport failures end the session, not the manager
                self.mark_lost(f"re-listing tools failed: {describe(exc)}")
                return
            await self._owner.publish(tools, dropped)
            # Spaced by as long as the listing took: a server announcing changes faster than its listing can
            # be read (a storm over many tools) gets at most about half of the time, not all of it.
            await anyio.sleep(min(MAX_RELIST_SPACING_S, anyio.current_time() - started))

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
        client = self._live_client
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
            self._owner.call_timed_out(self)
            raise ToolCallTimeout(
                self.name, tool, f"no answer within call_timeout_s={self.config.call_timeout_s:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                reason = self.lost_reason or "the connection closed during the call"
                self.mark_lost(reason)
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
            reason = self.lost_reason or describe(exc)
            self.mark_lost(reason)
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
            ServerError: no answer within `call_timeout_s` (`what` names it).
            MCPError: the server answered with a JSON-RPC error.
        """
        client = self._live_client
        # In flight like a call, wanting no log messages: a server's log about this read or prompt must not
        # be relayed to the one call in flight, which may be another spawn's.
        self._log_sinks.append(None)
        try:
            with anyio.move_on_after(self.config.call_timeout_s) as scope:
                return await func(client)
        finally:
            self._log_sinks.remove(None)
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

    # ------------------------------------------------------------------ explanations

    def timeout_reason(self, timeout: float) -> str:
        """Why a start that ran out of `startup_timeout_s` failed, with what the server wrote meanwhile."""
        reason = f"no answer within startup_timeout_s={timeout:g} s"
        if self._last_noise:
            reason += f"; it wrote non-MCP output on stdout: {self._last_noise}"
        return reason + self._stderr.hint()

    def explain(self, exc: BaseException, *, started: bool) -> str:
        """One line saying why the session ended, from its exception."""
        leaf = _leaf(exc)
        config = self.config
        if isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED:
            what = "server process exited" if config.transport == "stdio" else "the server closed the connection"
            return (what if started else f"{what} during startup") + self._stderr.hint()
        if isinstance(leaf, OSError) and config.transport == "stdio" and not started:
            if config.cwd and not os.path.isdir(config.cwd):
                return f"cannot start {config.command!r}: working directory {config.cwd!r} does not exist"
            return f"cannot start {config.command!r}: {leaf.strerror or leaf}"
        if isinstance(leaf, httpx2.HTTPStatusError):
            return f"HTTP {leaf.response.status_code} from {redacted_url(str(leaf.request.url))}"
        if isinstance(leaf, httpx2.HTTPError):
            return f"cannot reach {redacted_url(config.url or '')}: {describe(leaf)}"
        if isinstance(leaf, _ListingError):
            return str(leaf)
        if isinstance(leaf, MCPError):
            return f"initialization failed: {describe(leaf)}" if not started else describe(leaf)
        return describe(leaf) + (self._stderr.hint() if config.transport == "stdio" else "")


def _wire_shapes(tools: list[Any]) -> list[dict[str, Any]]:
    """The SDK's tools in wire shape (absent keys omitted)."""
    return [tool.model_dump(by_alias=True, mode="json", exclude_unset=True) for tool in tools]


class _ListingError(Exception):
    """The server's tools/list pagination misbehaved."""


class _ListingFilter:
    """Checks each tool of every `tools/list` page on its way to the SDK (`WatchedTransport` calls it with
    the raw result) and remembers the ones it drops, with their reasons, for the listing under way."""

    def __init__(self, limits: SchemaLimits, max_tools: int) -> None:
        self._limits = limits
        self._max_tools = max_tools
        self.version: str | None = None
        """The negotiated protocol version, whose model of a tool the SDK will apply."""
        self._drops: dict[str, str] = {}
        self._seen = self._past = 0
        """Tools listed so far in the listing under way, and how many of them were past `max_tools`."""

    def start(self) -> None:
        """A new listing begins: forget the previous one's drops."""
        self._drops = {}
        self._seen = self._past = 0

    @property
    def full(self) -> bool:
        """`max_tools` tools are read: any further one is dropped unread."""
        return self._seen >= self._max_tools

    def dropped(self, *, unread: bool = False) -> tuple[DroppedTool, ...]:
        """The tools dropped since `start`, in listing order; the tools past `max_tools` as one entry named
        by the position of the first (`#10000+`). `unread`: pages after the last one read were left."""
        drops = [DroppedTool(name, reason) for name, reason in self._drops.items()]
        if self._past or unread:
            more = ", and the pages after it were not read" if unread else ""
            drops.append(
                DroppedTool(
                    f"#{self._max_tools}+",
                    f"{self._past:,} tool(s) past max_tools ({self._max_tools:,}) not read{more}",
                )
            )
        return tuple(drops)

    def __call__(self, result: dict[str, Any]) -> dict[str, Any]:
        """One `tools/list` page as the server sent it -> the page with only usable tools.

        Runs on the raw result before the SDK parses it, so one broken tool (a string for `inputSchema`, a
        recursive `$ref`) no longer fails the whole listing; each dropped tool is remembered with its reason.
        """
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result  # not a page of tools: the SDK names the problem
        version = self.version
        rest = {key: value for key, value in result.items() if key != "tools"}
        kept: list[Any] = []
        room = max(0, self._max_tools - self._seen)
        self._seen += len(tools)
        if len(tools) > room:  # the rest is neither checked nor parsed by the SDK
            self._past += len(tools) - room
            tools = tools[:room]
        for index, tool in enumerate(tools):
            tool = _with_object_type(tool)
            reason = tool_problem(tool, self._limits) or _wire_problem(tool, rest, version)
            if reason is None:
                kept.append(tool)
            else:
                name = tool.get("name") if isinstance(tool, Mapping) else None
                label = name if isinstance(name, str) and name else f"#{index}"
                self._drops[label] = one_line(reason, ERROR_LIMIT)
        return {**rest, "tools": kept}


def _with_object_type(tool: Any) -> Any:
    """The tool with `"type": "object"` added to an `inputSchema` that has no `type` (MCP requires it; some
    published servers leave it out, and `tools/call` arguments are an object anyway)."""
    if isinstance(tool, Mapping) and isinstance(tool.get("inputSchema"), Mapping) and "type" not in tool["inputSchema"]:
        return {**tool, "inputSchema": {"type": "object", **tool["inputSchema"]}}
    return tool


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


def _leaf(exc: BaseException) -> BaseException:
    """The first non-cancellation leaf of an exception group (task groups wrap the real cause)."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def describe(exc: BaseException) -> str:
    """An exception (the real cause inside a task group's) as one line: its message and type or code."""
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
