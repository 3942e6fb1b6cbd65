"""The MCP manager: live connections to every configured server, the only part that talks to them.

    async with MCPManager(settings) as manager:       # every enabled server ready or failed
        manager.tool_lists()                           # server -> tools (tools/list wire shape)
        await manager.call_tool("time", "get_current_time", {"timezone": "UTC"})

Each server runs in its own long-lived task (`_connection.ServerConnection`, its supervisor, which runs
one `_session.Session` at a time) inside the manager's task group: servers start concurrently, one that
hangs or crashes never holds up the others, and closing the manager (normally, on an error, or on
Ctrl-C/cancellation) cancels that group, which stops every child process it started. Enter and exit the
manager in the same task.

`version` rises whenever any server's offered tool list changes (a re-list after `list_changed`, a
server coming up, a server that never came up failing, a held-back tool approved); listeners registered
with `add_listener` hear every new version. What is offered passes the `ToolGuard` (`_pins.py`): a tool
that changed since its server's first listing, or reads as instructions to the model, is held back. A server that dies is restarted with backoff, forever, and keeps its tools in the
catalog meanwhile, so names and plans do not flap (docs/servers.md: states, backoff, circuit breaker).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import mcp.types as types
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT

from ..._config import MCPSettings, Settings
from ..._errors import ServerError, ToolCallError, ToolCallTimeout, ToolExecutionError, TransportError
from ..._store import MemoryStore, Store
from ..._telemetry import CallResult, Telemetry
from ._cache import ToolListCache
from ._catalog import ToolCatalog
from ._connection import ServerConnection
from ._pins import HeldTool, ToolGuard
from ._schemas import SchemaLimits
from ._session import LogSink
from ._status import SERVING, Circuit, DroppedTool, ServerState, ServerStatus
from ._transports import TransportFactory, default_transport

__all__ = ["Circuit", "DroppedTool", "Listener", "MCPManager", "ServerState", "ServerStatus"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

PIN_POLL_S = 2.0
"""While tools are held back, how often the store is asked whether one was approved elsewhere (the CLI, a
replica): an approval reaches every running manager within about this long."""

Listener = Callable[[int], Awaitable[None] | None]
"""Called with the new `version` after every tool-list change; may be sync or async."""


class MCPManager:
    """Connections to the configured MCP servers; use as `async with MCPManager(settings) as manager`."""

    def __init__(
        self,
        settings: Settings | MCPSettings,
        *,
        servers: Iterable[str] | None = None,
        wait: bool = True,
        transport_factory: TransportFactory = default_transport,
        telemetry: Telemetry | None = None,
        store: Store | None = None,
    ) -> None:
        """
        Args:
            settings: the whole `Settings` or just its `mcp` part.
            servers: only these server names (default: every configured server).
            wait: True: entering returns once every enabled server is ready or failed (each bounded by
                its `startup_timeout_s`). False: entering returns at once; tool lists come from the
                warm-start cache until each server is up, and calls wait for their server to start.
            transport_factory: opens each session's transport (default: what the config says; tests
                pass the SDK's in-memory transport to in-process servers).
            telemetry: where calls are counted (default: OpenTelemetry's global providers).
            store: where tool definitions are pinned (default: in memory, this manager only: the first
                listing it sees is trusted). `open_store(settings)` shares pins with the CLI and replicas.

        Raises:
            ServerError: a name in `servers` is not configured.
        """
        mcp_settings = settings.mcp if isinstance(settings, Settings) else settings
        configured = mcp_settings.servers
        names = sorted(configured) if servers is None else sorted(set(servers))
        for name in names:
            if name not in configured:
                raise ServerError(name, f"not configured (no mcp.servers.{name}); known: {_known(configured)}")
        self._configs = {name: configured[name] for name in names}
        self._replicas = mcp_settings.replica_groups()
        self._description_limit = mcp_settings.max_description_chars
        self._wait = wait
        self._cache = ToolListCache(mcp_settings.tool_cache_dir()) if mcp_settings.warm_start else None
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.guard = ToolGuard(self._configs, store if store is not None else MemoryStore(), self.telemetry)
        """Pinned definitions and held-back tools (`_pins.py`)."""
        self._catalog: tuple[int, ToolCatalog, dict[str, list[dict[str, Any]]]] | None = None
        """(version, catalog, the lists it was built from): a new version re-normalizes only the servers
        whose list object changed."""
        self._catalog_lock = threading.Lock()
        self.schema_limits = SchemaLimits(
            max_depth=mcp_settings.schema_max_depth, max_bytes=mcp_settings.schema_max_bytes
        )
        """The configured bounds on a schema (and, in MetaTools, on call arguments)."""
        self._connections = {
            name: ServerConnection(
                name,
                config,
                on_change=self._bump,
                cache=self._cache,
                transport_factory=transport_factory,
                telemetry=self.telemetry,
                schema_limits=self.schema_limits,
            )
            for name, config in self._configs.items()
            if config.enabled
        }
        self._version = 0
        self._listeners: list[Listener] = []
        self._changed: anyio.Event | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MCPManager:
        if self._entered:
            raise RuntimeError("MCPManager is already entered; cannot reenter")
        self._entered = True
        self._changed = anyio.Event()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            for name in self._configs:
                if name not in self._connections:
                    self.telemetry.record_server_state(name, str(ServerState.STOPPED))  # disabled
            for connection in self._connections.values():
                connection.prepare()
                task_group.start_soon(connection.run, name=f"mcp-server:{connection.name}")
            task_group.start_soon(self._watch_pins, name="mcp-pins")
            if self._wait:
                for connection in self._connections.values():
                    await connection.wait_settled()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        if self._closed or self._task_group is None:
            return None
        self._closed = True
        task_group, self._task_group = self._task_group, None
        task_group.cancel_scope.cancel()
        try:
            # Each stdio server's shutdown is shielded: its stdin is closed, then everything it started gets
            # SIGTERM and SIGKILL (_transports, _processes), all concurrently, even while we are cancelled.
            # The body's own exception is not handed to the task group, which would wrap it in an
            # ExceptionGroup; it propagates unchanged once the children are gone.
            await task_group.__aexit__(None, None, None)
        finally:
            for connection in self._connections.values():
                connection.set_stopped()
        return None

    # ------------------------------------------------------------------ tools and state

    @property
    def version(self) -> int:
        """Rises by one whenever any server's offered tool list changes."""
        return self._version

    def tool_lists(self) -> dict[str, list[dict[str, Any]]]:
        """Server name -> its tools in `tools/list` wire shape, untouched; sorted by server name.

        Ready and degraded servers give their live list; a server starting for the first time its cached
        list; a server restarting, or failed after having been up, its last known list (calls to it fail
        with the time of the next try); servers that never came up, stopped and disabled ones are absent.
        """
        return {name: [dict(tool) for tool in tools] for name, tools in self._live_lists().items()}

    def held_tools(self, server: str | None = None) -> list[HeldTool]:
        """Tools held back from agents (and tools offered although flagged, `held` False), by name: a
        definition that changed since it was pinned, a new tool of a pinned server, or one the detector
        flagged. `tools audit` lists them; `approve` lets them through."""
        self.catalog()  # decides every current listing (once per version)
        return self.guard.held(server)

    def approve(self, tools: list[HeldTool]) -> list[HeldTool]:
        """Pin these held-back definitions as reviewed, in the store (every replica sees it), and offer
        them: the catalog's version rises."""
        approved = self.guard.approve(tools)
        if approved:
            self._bump()
        return approved

    async def _watch_pins(self) -> None:
        """While anything is held back, notice an approval made elsewhere (the store's pin epoch moved) and
        re-decide the listings."""
        await anyio.to_thread.run_sync(self.guard.refresh)
        while True:
            await anyio.sleep(PIN_POLL_S)
            if not self.guard.has_held():
                continue
            try:
                changed = await anyio.to_thread.run_sync(self.guard.refresh)
            except Exception:  # boundary: a store that cannot be read leaves the tools held, never the manager down
                logger.warning("reading tool pins failed; held-back tools stay held", exc_info=True)
                continue
            if changed:
                self._bump()

    def catalog(self) -> ToolCatalog:
        """The normalized catalog of every offered tool, updated only when `version` has moved, and then
        only for the servers whose tool list changed (`ToolCatalog.updated`)."""
        current = self._catalog
        if current is not None and current[0] == self._version:
            return current[1]
        with self._catalog_lock:
            current = self._catalog
            version = self._version
            if current is not None and current[0] == version:
                return current[1]
            lists = self._live_lists()
            limit = self._description_limit
            if current is None:
                catalog = ToolCatalog.from_lists(lists, self._replicas, description_limit=limit)
            else:
                before = current[2]
                changed = {name for name in before.keys() | lists.keys() if before.get(name) is not lists.get(name)}
                catalog = current[1].updated(lists, changed, self._replicas, description_limit=limit)
            self._catalog = (version, catalog, lists)
            return catalog

    def _live_lists(self) -> dict[str, list[dict[str, Any]]]:
        """Server -> the list object its connection offers now, held-back tools left out (not copied: read
        only, never changed; the same object while neither the listing nor the pins change)."""
        lists = {}
        for name in sorted(self._connections):
            tools = self._connections[name].visible_tools()
            if tools is not None:
                lists[name] = self.guard.offered(name, tools)
            else:
                self.guard.forget(name)
        return lists

    def status(self) -> list[ServerStatus]:
        """One snapshot per selected server (disabled ones as `stopped`), sorted by name."""
        statuses = []
        held: dict[str, list[HeldTool]] = {}
        for tool in self.held_tools():
            if tool.held:
                held.setdefault(tool.server, []).append(tool)
        for name, config in self._configs.items():
            connection = self._connections.get(name)
            if connection is not None:
                statuses.append(dataclasses.replace(connection.status(), held_tools=tuple(held.get(name, ()))))
            else:
                statuses.append(
                    ServerStatus(
                        name=name,
                        transport=config.transport,
                        state=ServerState.STOPPED,
                        tools=0,
                        error=f"disabled (mcp.servers.{name}.enabled: false)",
                        listed_at=None,
                        from_cache=False,
                    )
                )
        return statuses

    async def wait_for_state(self, server: str, *states: ServerState, timeout: float) -> ServerStatus:  # noqa: ASYNC109
        """Wait until `server` is in one of `states` and return its status (at once if it already is).

        Raises:
            ServerError: `server` is not a running server of this manager.
            TimeoutError: it did not get there within `timeout` seconds.
        """
        connection = self._connection(server)
        with anyio.fail_after(timeout):
            while connection.state not in states:
                await connection.wait_state_change()
        return connection.status()

    def is_ready(self, server: str) -> bool:
        """Whether calls to `server` are routed now (`ready`, or `degraded`: connected with a problem)."""
        connection = self._connections.get(server)
        return connection is not None and connection.state in SERVING

    # ------------------------------------------------------------------ calls

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        progress_callback: ProgressFnT | None = None,
        meta: dict[str, Any] | None = None,
        on_log: LogSink | None = None,
    ) -> types.CallToolResult:
        """Call `tool` on `server` within its `call_timeout_s`; waits for a server that is starting or
        restarting quickly; a failed server (circuit open) answers at once with the time of its next try.

        `progress_callback` hears the server's progress for this call; `meta` goes in the request's
        `_meta` (e.g. the log-level opt-in); `on_log` hears the server's log messages while this is the
        only call in flight on that server (the gateway relays both to its own caller).

        Returns:
            The result (never one with `is_error`: that raises `ToolExecutionError`).

        Raises:
            ServerError: the server is unknown, disabled, stopped, failed (`failed: <reason>; retry in N s`),
                or not up within its `startup_timeout_s` (`restarting (<reason>); retry in N s`).
            ToolCallError: the tool is held back (its definition changed, or it reads as instructions).
            ToolCallTimeout: no answer within `call_timeout_s`; a probe then checks the connection and
                restarts it if it no longer answers at all.
            ToolExecutionError: the tool reported an error (`.result` holds the isError result), or the
                server answered the request with a JSON-RPC error.
            TransportError: the connection broke during the call (for example the process died); the
                manager restarts the server in the background.
        """
        connection = self._connection(server)
        listed = connection.visible_tools()
        if listed is not None:
            self.guard.offered(server, listed)  # its listing decided (once per list), before any catalog is built
        held = self.guard.held_reason(server, tool)
        if held is not None:
            raise ToolCallError(server, tool, f"held back: {held} (orchestrator tools approve)")
        started = time.perf_counter()

        def record(result: CallResult) -> None:
            self.telemetry.record_tool_call(server, tool, result, time.perf_counter() - started)

        try:
            result = await connection.call_tool(
                tool, arguments, progress_callback=progress_callback, meta=meta, on_log=on_log
            )
        except ToolExecutionError:
            record("tool_error")
            raise
        except ToolCallTimeout:
            record("timeout")
            raise
        except (TransportError, ServerError):
            record("transport_error")
            raise
        record("ok")  # a call cancelled by its caller is not recorded: it has no result
        return result

    async def request(self, server: str, what: str, func: Callable[[Client], Awaitable[T]]) -> T:
        """`func(client)` on `server`'s live `mcp.Client` within its `call_timeout_s` (resources and prompts).

        Raises:
            ServerError: as for `call_tool`, or no answer in time (`what` names the request).
            MCPError: the server answered with a JSON-RPC error.
        """
        return await self._connection(server).request(what, func)

    def _connection(self, server: str) -> ServerConnection:
        connection = self._connections.get(server)
        if connection is not None:
            if self._task_group is None:
                raise ServerError(server, "the manager is not running (use `async with MCPManager(...)`)")
            return connection
        if server in self._configs:
            raise ServerError(server, f"disabled (mcp.servers.{server}.enabled: false)")
        raise ServerError(server, f"unknown server; known: {_known(self._configs)}")

    # ------------------------------------------------------------------ change notification

    def add_listener(self, callback: Listener) -> Callable[[], None]:
        """Call `callback(version)` after every tool-list change; returns a function that unsubscribes."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    async def wait_for_version(self, above: int, timeout: float) -> int:  # noqa: ASYNC109
        """Wait until `version > above` and return it.

        Raises:
            TimeoutError: the version did not rise within `timeout` seconds.
        """
        with anyio.fail_after(timeout):
            while self._version <= above:
                assert self._changed is not None, "the manager is not running"
                await self._changed.wait()
        return self._version

    def _bump(self) -> None:
        self._version += 1
        version = self._version
        if self._changed is not None:
            event, self._changed = self._changed, anyio.Event()
            event.set()
        for callback in list(self._listeners):
            try:
                pending = callback(version)
            except Exception:  # boundary: one faulty listener must not stop the others or the server
                logger.exception("tool-list listener %r failed", callback)
                continue
            if inspect.isawaitable(pending):
                if self._task_group is None:
                    _close_awaitable(pending)
                    continue
                self._task_group.start_soon(_await_listener, callback, pending)


async def _await_listener(callback: Listener, pending: Awaitable[None]) -> None:
    try:
        await pending
    except Exception:  # boundary: a listener's failure is logged, never propagated into the manager
        logger.exception("tool-list listener %r failed", callback)


def _close_awaitable(pending: Awaitable[Any]) -> None:
    close = getattr(pending, "close", None)
    if callable(close):
        close()


def _known(configs: Iterable[str]) -> str:
    return ", ".join(sorted(configs)) or "(none configured)"
