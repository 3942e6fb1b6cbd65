"""The gateway: one long-running MCP server that presents each agent's plan over live connections.

An agent connects to the gateway as to any MCP server. In full mode it lists every tool its profile may
see, proxied under the qualified name; in search mode it lists `tool_search`, `expand_tools`, `call_tool`
and its pinned tools. Every call goes through `MetaTools`, so a short-lived agent reuses the gateway's live
server connections instead of starting every server again. `Gateway` wires the parts together:

    views.py     agent views (visible tools, search engine, client names) and endpoint contexts
    spawns.py    the spawn registry: open, verify, count, close; what replicas share in the store
    handlers.py  the MCP handlers: tools, calls and what they relay, resources, prompts
    sessions.py  session accounting of finished spawns (metrics, spawn log)
    app.py       the HTTP side: router, admin endpoints, bind rules, uvicorn

A tool-list change in the manager reaches connected clients: `subscriptions/listen` streams (protocol
2026-07-28) and, for older clients, `notifications/tools/list_changed` on their session. The event loop
stays free: ranking, expand, argument checks, planning, event listeners and the task-history files run in
one bounded worker pool per gateway (`gateway.workers` threads, `run_sync`), so one slow search never
holds up another agent's request.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.to_thread
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning

from .._accounting import SessionRecorder
from .._clients import ClientKind
from .._config import Settings
from .._errors import ConfigError, OrchestratorError
from .._events import Caller, CallEvent, EventListener, MetaEvent
from .._history import TaskHistory
from .._meta_tools import MetaTools, Offload
from .._planning import SpawnPlanner
from .._spawnlog import SpawnLog
from .._store import MemoryStore, Store
from .._telemetry import Telemetry
from .._traces import TraceStore
from .._version import __version__
from ..protocols.mcp._catalog import ToolCatalog
from ..search._embedding import EmbeddingRuntime
from .app import serve
from .auth import Credentials, SpawnClaims
from .handlers import GatewayHandlers
from .learning import GatewayLearning
from .sessions import SessionAccounting
from .spawns import SpawnHandle, SpawnRegistry, counts_listener
from .views import AgentView, SpawnContext, Upstream

log = logging.getLogger(__name__)

__all__ = ["Gateway"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

SPAWN_SHARE = 0.5
"""Share of the worker pool's threads one spawn's work may hold at once (at least one thread)."""

INSTRUCTIONS = (
    "Tools of the orchestrator's MCP servers. In search mode: tool_search, then expand_tools, then call_tool."
)


class _GatewayServer(Server[Any]):
    """The lowlevel server, advertising `tools.listChanged` to handshake-era clients too."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)


class Gateway:
    """The gateway over a running manager; use as `async with Gateway(settings, manager) as gateway:`.

    Args:
        settings: the configuration (agent profiles, tool search, gateway host/port/token/workers).
        manager: a started `MCPManager` (or anything satisfying `Upstream`).
        agent: the profile served at `/mcp` and over stdio.
        history: where tasks' recently called tools are kept (default: in `store`).
        telemetry: where searches, spawns and catalog sizes are recorded (default: OpenTelemetry's
            global providers).
        embeddings: the embedding runtime shared by every profile's search. Default: one built from
            `settings` (`mcp.embedding`), owned by the gateway and closed on exit.
        spawn_log: where finished spawns' sessions are appended. Default: `gateway.spawn_log` (off
            unless set; in `store` when `store.url` is set); closed on exit.
        credentials: the admin secret and the spawn-signing key (default: from `settings`; with no
            `gateway.token` a new secret, with no `gateway.signing_key` a key of this process only).
        store: the open spawns, revocations and per-spawn counts that replicas share (default: in
            memory, one process; `open_store(settings)` for files or Redis).
        traces: where search traces are recorded and read (default: in `store`; none when
            `mcp.tool_search.traces.enabled` is false): every spawn's searches and successful calls
            become evidence in every profile's ranking.

    Raises:
        ConfigError: `agent` names no profile.
    """

    def __init__(
        self,
        settings: Settings,
        manager: Upstream,
        *,
        agent: str = "default",
        history: TaskHistory | None = None,
        telemetry: Telemetry | None = None,
        embeddings: EmbeddingRuntime | None = None,
        spawn_log: SpawnLog | None = None,
        credentials: Credentials | None = None,
        store: Store | None = None,
        traces: TraceStore | None = None,
    ) -> None:
        settings.agent(agent)  # unknown profile -> ConfigError now, not at the first request
        self.settings = settings
        self.manager = manager
        self.agent = agent
        self.credentials = credentials if credentials is not None else Credentials.from_settings(settings)
        self.store: Store = store if store is not None else MemoryStore()
        self.history = history if history is not None else TaskHistory(self.store)
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self._owned_embeddings = EmbeddingRuntime.from_settings(settings) if embeddings is None else None
        self.embeddings = embeddings if embeddings is not None else self._owned_embeddings
        self.planner = SpawnPlanner(settings, telemetry=self.telemetry)
        self.learning = GatewayLearning(
            settings, self.store, embeddings=self.embeddings, planner=self.planner, view=self._view, traces=traces
        )
        self.traces = self.learning.traces
        self.evidence = self.learning.evidence
        self.sessions = SessionAccounting(
            self.planner,
            self.telemetry,
            spawn_log if spawn_log is not None else SpawnLog.from_settings(settings, self.store),
        )
        self.base_url: str | None = None
        workers = settings.gateway.workers
        self._limiter = anyio.CapacityLimiter(workers) if workers > 0 else None
        self._lock = threading.Lock()  # views and the catalog-size record: both reached from worker threads
        self._sizes_recorded: str | None = None
        self._views: dict[tuple[str, ClientKind | None], AgentView] = {}
        self._bus = InMemorySubscriptionBus()
        self._notified_version: str | None = None
        self.spawns = SpawnRegistry(
            settings,
            self.credentials,
            self.store,
            self.history,
            self.sessions,
            self._context,
            learned_pins=self.learning.similar_task_pins,
            visible=self._visible_names,
            finished=self.learning.remember_task,
        )
        default = self._context(None, None, "", "", agent, [])
        self.handlers = GatewayHandlers(default, self.spawns.context, manager, self.run_sync)
        self.server = self._lowlevel_server()
        self._unsubscribe: Callable[[], None] | None = manager.add_listener(self._on_manager_change)

    def _lowlevel_server(self) -> _GatewayServer:
        handlers = self.handlers
        # logging/setLevel is deprecated at 2026-07-28 but is how older clients (TS SDK v1, MCP Inspector)
        # ask for the log messages relayed from upstream servers.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            return _GatewayServer(
                self.settings.gateway.server_name,
                version=__version__,
                instructions=INSTRUCTIONS,
                on_list_tools=handlers.on_list_tools,
                on_call_tool=handlers.on_call_tool,
                get_tool_input_schema=handlers.input_schema,
                on_subscriptions_listen=ListenHandler(self._bus),
                on_list_resources=handlers.on_list_resources,
                on_list_resource_templates=handlers.on_list_resource_templates,
                on_read_resource=handlers.on_read_resource,
                on_list_prompts=handlers.on_list_prompts,
                on_get_prompt=handlers.on_get_prompt,
                on_set_logging_level=handlers.on_set_logging_level,
            )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening to the manager, record the sessions of spawns still open, write the spawn log,
        and close the embedding runtime the gateway built for itself. Idempotent."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.spawns.close_all("gateway_stopped")
        self.sessions.close()
        if self._owned_embeddings is not None:
            self._owned_embeddings.close()

    # ------------------------------------------------------------------ the worker pool

    async def run_sync(self, func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """Run CPU-bound or blocking `func(*args)` in the gateway's worker pool, at most `gateway.workers`
        at a time, so the event loop keeps serving other agents meanwhile. With `workers: 0` it runs
        inline on the event loop (kept for measuring the difference)."""
        if self._limiter is None:
            return func(*args)
        return await anyio.to_thread.run_sync(func, *args, limiter=self._limiter)

    def workers(self) -> dict[str, int]:
        """The pool's size, the threads busy now and the calls waiting for one (shown by `/health`)."""
        if self._limiter is None:
            return {"threads": 0, "busy": 0, "waiting": 0}
        stats = self._limiter.statistics()
        return {"threads": int(stats.total_tokens), "busy": stats.borrowed_tokens, "waiting": stats.tasks_waiting}

    # ------------------------------------------------------------------ catalog, views and contexts

    def catalog(self) -> ToolCatalog:
        """Every tool the manager knows (`manager.catalog()`: rebuilt only when the manager's version
        moves), its per-server sizes recorded once per catalog version."""
        catalog = self.manager.catalog()
        if catalog.version != self._sizes_recorded:
            with self._lock:
                record = catalog.version != self._sizes_recorded
                self._sizes_recorded = catalog.version
            if record:
                self._record_catalog_sizes(catalog)
        return catalog

    def _record_catalog_sizes(self, catalog: ToolCatalog) -> None:
        """Per-server tools and full-definition tokens, once per catalog version (the gauges users watch)."""
        counter = self.planner.counter(self.settings.mcp.tool_search.tokenizer)
        sizes: dict[str, list[int]] = {}
        for entry in catalog:
            size = sizes.setdefault(entry.server, [0, 0])
            size[0] += 1
            size[1] += counter.entry(entry)
        for server, (tools, tokens) in sorted(sizes.items()):
            self.telemetry.record_catalog(server, tools, tokens)

    def forget_departed_tools(self) -> int:
        """Drop the traces of tools that left the catalog (`GatewayLearning.forget_departed_tools`); reads
        and writes the store."""
        return self.learning.forget_departed_tools(self.catalog())

    def _view(self, agent: str, client: ClientKind | None = None) -> AgentView:
        with self._lock:
            view = self._views.get((agent, client))
            if view is None:
                view = self._views[(agent, client)] = AgentView(
                    self.settings,
                    agent,
                    self.catalog,
                    self.planner,
                    embeddings=self.embeddings,
                    telemetry=self.telemetry,
                    held=self.manager.held_tools,
                    client=client,
                    evidence=self.evidence,
                )
            return view

    def _context(
        self,
        spawn_id: str | None,
        expires: float | None,
        task: str,
        task_id: str,
        agent: str,
        recent: list[str],
        client: ClientKind | None = None,
        offload: Offload | None = None,
    ) -> SpawnContext:
        """An endpoint's context: its view, and meta-tools whose events a spawn's history and counts hear;
        `client`: the endpoint as a client of that kind sees it (`SpawnContext.for_client`); `offload`: the
        spawn's share of the worker pool, when a variant shares it (a spawn's own otherwise)."""
        view = self._view(agent, client)
        if offload is None:
            offload = _spawn_share(self.run_sync, self._limiter) if spawn_id is not None else self.run_sync
        listeners: list[EventListener] = []
        recorder = self.learning.listener(view)
        if recorder is not None:
            listeners.append(recorder)
        if spawn_id is not None:
            listeners.append(_history_listener(self.history, task_id))
            if expires is not None:
                listeners.append(counts_listener(self.store, spawn_id, expires))
        meta = MetaTools(
            view.engine,
            self.manager,
            full_catalog=self.catalog,
            visibility=view.rules,
            caller=Caller(agent, spawn_id, task_id or None),
            listeners=listeners,
            telemetry=self.telemetry,
            counter=self.planner.counter(view.search_settings.tokenizer),
            offload=offload,
            search_offered=view.search_mode,
            names=view.qualified,
            schema_limits=self.manager.schema_limits,
            held=view.held,
        )
        context = SpawnContext(spawn_id, expires, task, task_id, view, meta, recent, offload=offload)
        if spawn_id is not None:
            context.session = SessionRecorder()
        context.make_variant = self._variant
        return context

    def _visible_names(self, agent: str, names: list[str]) -> list[str]:
        """The names among `names` that `agent`'s profile may see, in order."""
        visible = self._view(agent).visible()
        return [name for name in names if visible.lookup(name) is not None]

    def _variant(self, base: SpawnContext, client: ClientKind) -> SpawnContext:
        """`base` for a client of another kind: its own view and meta-tools, the spawn's session and counts."""
        variant = self._context(
            base.id, base.expires, base.task, base.task_id, base.view.agent, base.recent, client, base.offload
        )
        variant.session = base.session
        variant.make_variant = None
        return variant

    # ------------------------------------------------------------------ spawns (the admin endpoints)

    def open_spawn(self, task: str, agent: str | None = None, *, task_id: str | None = None) -> SpawnHandle:
        """Open one spawn: its endpoint, its signed credential and its plan (counted once in telemetry).

        The credential carries the spawn's claims (profile, task, pins, expiry), so any replica sharing
        the signing key serves it; the store's list of open spawns counts it against `max_open_spawns`.
        Plans the spawn and reads the store: from async code, `await gateway.run_sync(...)`.

        Raises:
            ConfigError: unknown agent profile.
            SpawnLimitError: `gateway.max_open_spawns` spawns are open.
            OrchestratorError: the gateway is not serving HTTP yet (no URL to hand out).
        """
        base_url = self.base_url
        if base_url is None:
            raise OrchestratorError("gateway: not serving HTTP, so a spawn has no endpoint (start it first)")
        return self.spawns.open(task, agent or self.agent, base_url, task_id=task_id)

    def verify_spawn(self, token: str, spawn_id: str) -> SpawnClaims:
        """The claims of a spawn credential presented at `/spawn/<id>/mcp` (the router's check); reads the
        store: from async code, run it in the worker pool. See `SpawnRegistry.verify` for the errors."""
        return self.spawns.verify(token, spawn_id)

    def spawn_stats(self, spawn_id: str) -> dict[str, Any]:
        """The spawn's plan figures and meta-tool counts, summed over every replica that served it (reads
        the store). Raises OrchestratorError for no such spawn."""
        return self.spawns.stats(spawn_id)

    def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        """Final counts of a spawn; its credential is revoked on every replica, its session recorded.
        Raises OrchestratorError for no such spawn."""
        return self.spawns.close(spawn_id)

    @property
    def open_spawns(self) -> int:
        """Spawns open now on every replica sharing the store (reads the store)."""
        return self.spawns.open_count

    # ------------------------------------------------------------------ warm-up and catalog changes

    def warm_search(self, timeout: float | None = 0) -> int:
        """Get each profile's tool search ready before its agents ask; returns how many profiles were warmed.

        For every configured profile whose tools go out in search mode with hybrid ranking, the index is built and
        the catalog's uncached tools are handed to the background embedding, so the first searches of
        the first spawns are ranked by meaning instead of answering lexically while it warms. Full-mode
        profiles never search, so nothing is embedded for them. Waits up to `timeout` seconds for the
        vectors (0: returns at once; None: until they are embedded, as a benchmark wants). The first call
        loads the model (about 0.5 s): run it off the event loop.
        """
        warmed = 0
        self.learning.refresh(self.catalog())
        for agent in ("default", *self.settings.agents):  # every profile a spawn may ask for, not only seen ones
            try:
                self._view(agent)
            except ConfigError as exc:  # its spawns are refused with this error; the others still warm
                log.warning("not warming tool search for %s", exc)
        with self._lock:
            views = list(self._views.values())
        for view in views:
            if view.engine.ranking_used != "hybrid" or not view.search_mode():
                continue
            view.engine.warm(timeout=timeout)
            warmed += 1
        return warmed

    async def _warm_search(self) -> None:
        """`warm_search` in a worker thread (the pool's, or anyio's default with `workers: 0`: loading the
        model at start-up must not stall the loop in either mode)."""
        try:
            await anyio.to_thread.run_sync(self.warm_search, limiter=self._limiter)
        except Exception:  # boundary: warming is an optimisation; searches answer lexically without it
            log.warning("warming tool search failed; searches answer lexically until it is ready", exc_info=True)

    async def _on_manager_change(self, version: int) -> None:
        """Forward a catalog change to every connected client whose view may have changed, and start
        embedding the changed tools."""
        current = (await self.run_sync(self.catalog)).version  # normalizes and counts the new tools
        if current == self._notified_version:
            return
        self._notified_version = current
        await self._bus.publish(ToolsListChanged())
        await self.handlers.notify_legacy([self.handlers.default, *self.spawns.contexts()])
        await self._warm_search()

    # ------------------------------------------------------------------ transports

    async def serve_stdio(self) -> None:
        """Serve the gateway's own profile over stdin/stdout until the client goes away."""
        async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as tg:
            tg.start_soon(self._warm_search)
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    @contextlib.asynccontextmanager
    async def running(self, host: str | None = None, port: int | None = None) -> AsyncIterator[str]:
        """Serve HTTP for the duration of the block; yields the base URL (`port` 0: any free port).

        Raises:
            ConfigError: a non-loopback host without a token, or the address cannot be bound.
        """
        host = self.settings.gateway.host if host is None else host
        port = self.settings.gateway.port if port is None else port
        try:
            async with serve(self, host, port) as base_url, anyio.create_task_group() as tg:
                self.base_url = base_url
                tg.start_soon(self._warm_search)
                yield base_url
        finally:
            self.base_url = None

    def health(self) -> dict[str, Any]:
        """Catalog, server states (with their held-back tools), open spawns and the worker pool (`GET /health`)."""
        catalog = self.catalog()
        statuses = self.manager.status()
        return {
            "status": "ok",
            "agent": self.agent,
            "catalog_version": catalog.version,
            "tools": len(catalog),
            "servers": [
                {
                    "name": s.name,
                    "state": str(s.state),
                    "tools": s.tools,
                    "error": s.error,
                    "held_tools": [{"name": tool.name, "reason": tool.reason} for tool in s.held_tools],
                }
                for s in statuses
            ],
            "held_tools": sum(len(s.held_tools) for s in statuses),
            "spawns": self.open_spawns,
            "workers": self.workers(),
        }


def _history_listener(history: TaskHistory, task_id: str) -> EventListener:
    """Records each tool a spawn called without error in its task's history (pinned in later spawns)."""

    def record(event: MetaEvent) -> None:
        if isinstance(event, CallEvent) and event.outcome == "ok" and event.tool is not None:
            history.record(task_id, [event.tool[0]])

    return record


def _spawn_share(run_sync: Offload, pool: anyio.CapacityLimiter | None) -> Offload:
    """`run_sync` for one spawn: at most SPAWN_SHARE of the pool's threads at once, so one agent's flood of
    searches, expands and call checks queues behind itself, not in front of every other agent (an agent
    has one spawn; the gateway's own endpoint has no share)."""
    if pool is None:
        return run_sync
    threads = max(1, int(pool.total_tokens * SPAWN_SHARE))
    limiter: anyio.CapacityLimiter | None = None  # made on the event loop, at first use

    async def offload(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        nonlocal limiter
        if limiter is None:
            limiter = anyio.CapacityLimiter(threads)
        async with limiter:
            return await run_sync(func, *args)

    return offload
