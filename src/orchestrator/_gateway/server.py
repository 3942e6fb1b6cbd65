"""The gateway's MCP server: agent views, the spawn registry, the handlers, list_changed fan-out, warm-up.

An agent connects to the gateway as to any MCP server. In full mode it lists every tool its profile may
see, proxied under the qualified name; in search mode it lists `tool_search`, `expand_tools`, `call_tool`
and its pinned tools. Every call goes through `MetaTools` (validation, profile checks, routing through
the manager), so a short-lived agent reuses the gateway's live server connections instead of starting
every server again. A tool-list change in the manager reaches connected clients: `subscriptions/listen`
streams (protocol 2026-07-28) and, for older clients, `notifications/tools/list_changed` on their session.

The event loop stays free: ranking (BM25 and the query embedding), expand, argument checks, planning and
the task-history files run in one bounded worker pool per gateway (`gateway.workers` threads, `run_sync`),
so one slow search never holds up another agent's request. HTTP lives in `app.py`.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .._config import Settings
from .._errors import OrchestratorError
from .._formats import to_mcp_tool
from .._history import TaskHistory
from .._meta_tools import META_TOOL_NAMES, MetaTools
from .._planning import ProfileFilter, SpawnPlan, SpawnPlanner, effective_tool_search, task_key
from .._telemetry import Telemetry
from ..protocols.mcp._catalog import ToolCatalog
from ..protocols.mcp._embedding import EmbeddingRuntime
from ..protocols.mcp._search import ToolSearchEngine
from .app import SCOPE_KEY, SERVER_NAME, mcp_config, serve

log = logging.getLogger(__name__)

__all__ = ["Gateway", "SpawnHandle"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

SPAWN_ID_BYTES = 8
TOKEN_BYTES = 24
# 192-bit bearer tokens: unguessable, and short enough for a header.
MAX_LEGACY_SESSIONS = 1024
# Handshake-era sessions remembered per endpoint for list_changed; a gone session is only noticed by
# eviction (sending to it never fails), so the oldest is dropped past this many.


@dataclass(frozen=True)
class SpawnHandle:
    """What a spawn needs to reach its endpoint, and the plan it will see there."""

    id: str
    token: str
    url: str
    agent: str
    task_id: str
    plan: SpawnPlan

    def mcp_config(self) -> dict[str, Any]:
        return mcp_config(self.url, self.token)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "url": self.url,
            "agent": self.agent,
            "task_id": self.task_id,
            "mcp_config": self.mcp_config(),
            "plan": self.plan.to_json(tools=False),
        }


class _AgentView:
    """One agent profile over the live catalog: its visible tools and a search index over them."""

    def __init__(self, gateway: Gateway, agent: str) -> None:
        self.agent = agent
        profile = gateway.settings.agent(agent)
        self.rules = ProfileFilter.from_profile(profile)
        self.search_settings = effective_tool_search(gateway.settings.mcp.tool_search, profile)
        self._gateway = gateway
        self._visible: tuple[str, ToolCatalog] | None = None
        self.engine = ToolSearchEngine(
            self.visible, self.search_settings, embeddings=gateway.embeddings, telemetry=gateway.telemetry
        )

    def visible(self) -> ToolCatalog:
        full = self._gateway.catalog()
        cached = self._visible
        if cached is None or cached[0] != full.version:
            cached = self._visible = (full.version, self.rules.apply(full))
        return cached[1]


@dataclass
class _Context:
    """One endpoint's state: a spawn (or the gateway's own profile), its plan and its meta-tool counts."""

    id: str | None
    token: str | None
    task: str
    task_id: str
    view: _AgentView
    meta: MetaTools
    recent: list[str]
    plan: SpawnPlan | None = None
    listed: tuple[str, list[types.Tool]] | None = None
    legacy_sessions: dict[str, Any] = field(default_factory=dict)
    opened: float = field(default_factory=time.monotonic)


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
    """The gateway over a running manager.

    Args:
        settings: the configuration (agent profiles, tool search, gateway host/port/token/workers).
        manager: a started `MCPManager` (anything with `version`, `catalog()`, `status()`, `is_ready()`,
            `call_tool()` and `add_listener()`).
        agent: the profile served at `/mcp` and over stdio.
        history: where tasks' recently called tools are kept (default: in memory only).
        telemetry: where searches, spawns and catalog sizes are recorded (default: OpenTelemetry's
            global providers).
        embeddings: the embedding runtime shared by every profile's search. Default: one built from
            `settings` (`mcp.embedding`), owned by the gateway and closed by `close()`.
    """

    def __init__(
        self,
        settings: Settings,
        manager: Any,
        *,
        agent: str = "default",
        history: TaskHistory | None = None,
        telemetry: Telemetry | None = None,
        embeddings: EmbeddingRuntime | None = None,
    ) -> None:
        settings.agent(agent)  # unknown profile -> ConfigError now, not at the first request
        self.settings = settings
        self.manager = manager
        self.agent = agent
        self.history = history if history is not None else TaskHistory()
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self._owned_embeddings = EmbeddingRuntime.from_settings(settings) if embeddings is None else None
        self.embeddings = embeddings if embeddings is not None else self._owned_embeddings
        self.planner = SpawnPlanner(settings, telemetry=self.telemetry)
        self.base_url: str | None = None
        workers = settings.gateway.workers
        self._limiter = anyio.CapacityLimiter(workers) if workers > 0 else None
        self._http_done = anyio.Event()
        self._lock = threading.Lock()  # views and the catalog-size record: both reached from worker threads
        self._sizes_recorded: str | None = None
        self._views: dict[str, _AgentView] = {}
        self._spawns: dict[str, _Context] = {}
        self._bus = InMemorySubscriptionBus()
        self._notified_version: str | None = None
        self.server = _GatewayServer(
            SERVER_NAME,
            version=_package_version(),
            instructions="Tools of the orchestrator's MCP servers. In search mode: tool_search, then "
            "expand_tools, then call_tool.",
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )
        self._default = self._new_context(None, None, "", "", agent, recent=[])
        self._unsubscribe: Callable[[], None] | None = manager.add_listener(self._on_manager_change)

    # ------------------------------------------------------------------ the worker pool

    async def run_sync(self, func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """Run CPU-bound or blocking `func(*args)` in the gateway's worker pool, at most `gateway.workers`
        at a time, so the event loop keeps serving other agents meanwhile. With `workers: 0` it runs
        inline on the event loop (the behaviour before the pool, kept for measuring the difference)."""
        if self._limiter is None:
            return func(*args)
        return await anyio.to_thread.run_sync(func, *args, limiter=self._limiter)

    def workers(self) -> dict[str, int]:
        """The pool's size, the threads busy now and the calls waiting for one (shown by `/health`)."""
        if self._limiter is None:
            return {"threads": 0, "busy": 0, "waiting": 0}
        stats = self._limiter.statistics()
        return {"threads": int(stats.total_tokens), "busy": stats.borrowed_tokens, "waiting": stats.tasks_waiting}

    # ------------------------------------------------------------------ catalog and views

    def catalog(self) -> ToolCatalog:
        """Every tool the manager knows (`manager.catalog()`: rebuilt only when the manager's version
        moves), its per-server sizes recorded once per catalog version."""
        catalog: ToolCatalog = self.manager.catalog()
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

    def _view(self, agent: str) -> _AgentView:
        with self._lock:
            view = self._views.get(agent)
            if view is None:
                view = self._views[agent] = _AgentView(self, agent)
            return view

    def _new_context(
        self, spawn_id: str | None, token: str | None, task: str, task_id: str, agent: str, recent: list[str]
    ) -> _Context:
        view = self._view(agent)

        def record(name: str) -> None:  # runs in a worker thread: the history file is written here
            self.history.record(task_id, [name])

        meta = MetaTools(
            view.engine,
            self.manager,
            full_catalog=self.catalog,
            visibility=view.rules,
            agent=agent,
            on_called=record if spawn_id is not None else None,
            offload=self.run_sync,
        )
        return _Context(spawn_id, token, task, task_id, view, meta, recent)

    def _plan(self, context: _Context) -> SpawnPlan:
        """The context's plan for the current catalog (re-planned only when its visible tools change)."""
        visible = context.view.visible()
        plan = context.plan
        if plan is None or plan.catalog_version != visible.version:
            first = plan is None and context.id is not None
            plan = context.plan = self.planner.plan(
                context.task,
                context.view.agent,
                self.catalog(),
                recent_tools=context.recent,
                task_id=context.task_id or None,
                record=first,  # one telemetry event per spawn, not per re-plan
            )
        return plan

    def _tools(self, context: _Context) -> list[types.Tool]:
        plan = self._plan(context)
        listed = context.listed
        if listed is not None and listed[0] == plan.fingerprint:
            return listed[1]
        visible = context.view.visible()
        if plan.mode == "full":
            tools = [to_mcp_tool(entry) for entry in visible]
        else:
            tools = []
            for definition in plan.tools:
                entry = visible.get(definition["name"])
                tools.append(to_mcp_tool(entry if entry is not None else definition))
        context.listed = (plan.fingerprint, tools)
        return tools

    # ------------------------------------------------------------------ spawns

    def open_spawn(self, task: str, agent: str | None = None, *, task_id: str | None = None) -> SpawnHandle:
        """Register one spawn: its endpoint, bearer token and plan (counted once in telemetry).

        Plans the spawn and reads its task's history file: from async code, `await gateway.run_sync(...)`.

        Raises:
            ConfigError: unknown agent profile.
            OrchestratorError: the gateway is not serving HTTP yet (no URL to hand out).
        """
        base_url = self.base_url
        if base_url is None:
            raise OrchestratorError("gateway: not serving HTTP, so a spawn has no endpoint (start it first)")
        agent = agent or self.agent
        self.settings.agent(agent)
        task_id = task_id or task_key(task)
        spawn_id = secrets.token_hex(SPAWN_ID_BYTES)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        context = self._new_context(spawn_id, token, task, task_id, agent, self.history.recent(task_id))
        plan = self._plan(context)
        self._spawns[spawn_id] = context
        url = f"{base_url}/spawn/{spawn_id}/mcp"
        return SpawnHandle(spawn_id, token, url, agent, task_id, plan)

    def spawn_token(self, spawn_id: str) -> str | None:
        """The bearer token of an open spawn, None when there is no such spawn (the router's check)."""
        context = self._spawns.get(spawn_id)
        return context.token if context is not None else None

    def spawn_stats(self, spawn_id: str) -> dict[str, Any]:
        """The spawn's plan figures and meta-tool counts.

        Raises:
            OrchestratorError: no such spawn.
        """
        context = self._spawns.get(spawn_id)
        if context is None:
            raise OrchestratorError(f"gateway: no open spawn {spawn_id!r}")
        plan = self._plan(context)
        return {
            "id": spawn_id,
            "agent": context.view.agent,
            "task_id": context.task_id,
            "mode": plan.mode,
            "tokens_sent": plan.prompt_tokens,
            "tokens_saved": plan.tokens_saved,
            "fingerprint": plan.fingerprint,
            **context.meta.stats.as_dict(),
            "open_s": round(time.monotonic() - context.opened, 3),
        }

    def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        """Final counts of a spawn; its endpoint stops answering."""
        stats = self.spawn_stats(spawn_id)
        self._spawns.pop(spawn_id, None)
        return stats

    @property
    def open_spawns(self) -> int:
        return len(self._spawns)

    # ------------------------------------------------------------------ MCP handlers

    def _context_for(self, ctx: Any) -> _Context | None:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        spawn_id = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
        if spawn_id is None:
            return self._default
        return self._spawns.get(spawn_id)

    async def _on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListToolsResult(tools=[])
        self._track_legacy_session(context, ctx)
        return types.ListToolsResult(tools=await self.run_sync(self._tools, context))

    async def _on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        context = self._context_for(ctx)
        if context is None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="this spawn has ended; no tools can be called")],
                is_error=True,
            )
        self._track_legacy_session(context, ctx)
        arguments = params.arguments
        if params.name in META_TOOL_NAMES:
            return await context.meta.dispatch(params.name, arguments if arguments is not None else {})
        return await context.meta.call_tool(params.name, arguments)

    def _track_legacy_session(self, context: _Context, ctx: Any) -> None:
        """Remember handshake-era sessions: they learn of tool-list changes by notification, not by listen."""
        if getattr(ctx, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
            return
        request = getattr(ctx, "request", None)
        key = request.headers.get("mcp-session-id", "") if request is not None else "stdio"
        if key and key not in context.legacy_sessions:
            if len(context.legacy_sessions) >= MAX_LEGACY_SESSIONS:
                context.legacy_sessions.pop(next(iter(context.legacy_sessions)))
            context.legacy_sessions[key] = ctx.session

    # ------------------------------------------------------------------ warm-up and catalog changes

    def warm_search(self, timeout: float | None = 0) -> int:
        """Get each profile's tool search ready before its agents ask; returns how many profiles were warmed.

        For every profile whose tools go out in search mode with hybrid ranking, the index is built and
        the catalog's uncached tools are handed to the background embedding, so the first searches of
        the first spawns are ranked by meaning instead of answering lexically while it warms. Full-mode
        profiles never search, so nothing is embedded for them. Waits up to `timeout` seconds for the
        vectors (0: returns at once; None: until they are embedded, as a benchmark wants). The first call
        loads the model (about 0.5 s): run it off the event loop.
        """
        warmed = 0
        with self._lock:
            views = list(self._views.values())
        for view in views:
            if view.engine.ranking_used != "hybrid":
                continue
            if self.planner.plan_tools(view.visible(), view.search_settings).mode != "search":
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
        for context in [self._default, *self._spawns.values()]:
            for key, session in list(context.legacy_sessions.items()):
                try:
                    await session.send_tool_list_changed()
                except Exception:  # boundary: a gone session must not stop the others hearing of it
                    context.legacy_sessions.pop(key, None)
        await self._warm_search()

    def close(self) -> None:
        """Stop listening to the manager, and close the embedding runtime the gateway built for itself."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._owned_embeddings is not None:
            self._owned_embeddings.close()

    # ------------------------------------------------------------------ transports

    async def serve_stdio(self) -> None:
        """Serve the gateway's own profile over stdin/stdout until the client goes away."""
        async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as tg:
            tg.start_soon(self._warm_search)
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    async def serve_http(self, host: str, port: int) -> None:
        """Serve streamable HTTP on `host:port` until cancelled (the CLI cancels on SIGINT and SIGTERM)."""
        async with self.running(host, port):
            await self._http_done.wait()

    @contextlib.asynccontextmanager
    async def running(self, host: str | None = None, port: int | None = None) -> AsyncIterator[str]:
        """Serve HTTP for the duration of the block; yields the base URL (`port` 0: any free port).

        Raises:
            ConfigError: a non-loopback host without a token, or the address cannot be bound.
        """
        host = self.settings.gateway.host if host is None else host
        port = self.settings.gateway.port if port is None else port
        try:
            async with serve(self, host, port) as (base_url, stopped), anyio.create_task_group() as tg:
                self.base_url, self._http_done = base_url, stopped
                tg.start_soon(self._warm_search)
                yield base_url
        finally:
            self.base_url = None

    def health(self) -> dict[str, Any]:
        """Catalog, server states, open spawns and the worker pool (`GET /health`)."""
        catalog = self.catalog()
        return {
            "status": "ok",
            "agent": self.agent,
            "catalog_version": catalog.version,
            "tools": len(catalog),
            "servers": [
                {"name": s.name, "state": str(s.state), "tools": s.tools, "error": s.error}
                for s in self.manager.status()
            ],
            "spawns": len(self._spawns),
            "workers": self.workers(),
        }


def _package_version() -> str:
    from .. import __version__

    return __version__
