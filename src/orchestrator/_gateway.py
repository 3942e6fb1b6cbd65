"""The MCP gateway: one long-running MCP server that presents each agent's plan over live connections.

An agent connects to the gateway as to any MCP server. In full mode it lists every tool its profile may
see, proxied under the qualified name; in search mode it lists `tool_search`, `expand_tools`, `call_tool`
and its pinned tools. Every call goes through `MetaTools` (validation, profile checks, routing through
the manager), so a short-lived agent reuses the gateway's live server connections instead of starting
every server again.

Endpoints (streamable HTTP, `serve_http` / `running`):

    /mcp                  the gateway's own agent profile (`orchestrator serve --agent NAME`)
    /spawn/<id>/mcp       one spawn: its profile, its task's pinned tools, its own counts
    POST /spawns          open a spawn {"task", "agent", "task_id"} -> {"id", "url", "token", "plan", ...}
    GET|DELETE /spawns/<id>   its counts (DELETE also closes it)
    GET /health           catalog and server states

Security: binds 127.0.0.1 by default; a non-loopback host is refused unless `gateway.token` is set, and
with a token every request must carry `Authorization: Bearer <token>`. A spawn endpoint always needs
its own token (or the gateway's), so one spawn cannot act as another. A tool-list change in the manager
reaches connected clients: `subscriptions/listen` streams (protocol 2026-07-28) and, for older clients,
`notifications/tools/list_changed` on their session.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import re
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
import uvicorn
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ._config import Settings
from ._errors import ConfigError, OrchestratorError
from ._formats import to_mcp_tool
from ._meta_tools import META_TOOL_NAMES, MetaTools
from .protocols.mcp._catalog import ToolCatalog
from ._history import TaskHistory
from ._planning import ProfileFilter, SpawnPlan, SpawnPlanner, effective_tool_search, task_key
from ._telemetry import Telemetry
from .protocols.mcp._search import ToolSearchEngine

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_PATH",
    "Gateway",
    "GatewayClient",
    "SpawnHandle",
    "check_bind",
    "client_base_url",
    "is_loopback",
    "mcp_config",
]

DEFAULT_PATH = "/mcp"
SERVER_NAME = "orchestrator"
# The name an agent's MCP config gives the gateway: tools show up as `mcp__orchestrator__<tool>` in Claude Code.
_SPAWN_PATH = re.compile(r"^/spawn/([A-Za-z0-9_-]{1,64})/mcp/?$")
_SPAWN_ADMIN_PATH = re.compile(r"^/spawns/([A-Za-z0-9_-]{1,64})/?$")
_SCOPE_KEY = "orchestrator.spawn"
# Set on the ASGI scope by the router: which spawn (None = the gateway's own profile) a request is for.
SPAWN_ID_BYTES = 8
TOKEN_BYTES = 24
# 192-bit bearer tokens: unguessable, and short enough for a header.
GRACEFUL_SHUTDOWN_S = 2.0
# Bound on waiting for open HTTP streams when the gateway stops; sessions are ended before it anyway.
HEALTH_TIMEOUT_S = 0.5
# How long `orchestrator spawn` waits to learn whether a gateway is up: local, so a refusal is immediate.
ADMIN_TIMEOUT_S = 30.0
MAX_LEGACY_SESSIONS = 1024
# Handshake-era sessions remembered per endpoint for list_changed; a gone session is only noticed by
# eviction (sending to it never fails), so the oldest is dropped past this many.
_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: addresses other machines cannot reach."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a bearer token.

    Raises:
        ConfigError: naming `gateway.host` and `gateway.token`.
    """
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"gateway.host: {host!r} is not a loopback address; set gateway.token (a bearer token every "
            "client must send) before serving beyond this machine"
        )


def client_base_url(host: str, port: int) -> str:
    """Where a local client reaches a gateway bound to `host:port` (a wildcard host means this machine)."""
    if host in ("0.0.0.0", "", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def mcp_config(url: str, token: str | None, name: str = SERVER_NAME) -> dict[str, Any]:
    """An MCP config pointing at the gateway, in the shape Claude Code's `--mcp-config` reads."""
    server: dict[str, Any] = {"type": "http", "url": url}
    if token:
        server["headers"] = {"Authorization": f"Bearer {token}"}
    return {"mcpServers": {name: server}}


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
        if self._visible is None or self._visible[0] != full.version:
            self._visible = (full.version, self.rules.apply(full))
        return self._visible[1]


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

    def create_initialization_options(self, notification_options=None, experimental_capabilities=None, extensions=None):  # type: ignore[no-untyped-def]
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)


class Gateway:
    """The gateway over a running manager.

    Args:
        settings: the configuration (agent profiles, tool search, gateway host/port/token).
        manager: a started `MCPManager` (anything with `version`, `tool_lists()`, `is_ready()`,
            `call_tool()` and `add_listener()`).
        agent: the profile served at `/mcp` and over stdio.
        history: where tasks' recently called tools are kept (default: in memory only).
        telemetry: where searches, spawns and catalog sizes are recorded (default: OpenTelemetry's
            global providers).
        embeddings: the embedding runtime shared by every profile's search (default: each engine's own).
    """

    def __init__(
        self,
        settings: Settings,
        manager: Any,
        *,
        agent: str = "default",
        history: TaskHistory | None = None,
        telemetry: Telemetry | None = None,
        embeddings: Any | None = None,
    ) -> None:
        settings.agent(agent)  # unknown profile -> ConfigError now, not at the first request
        self.settings = settings
        self.manager = manager
        self.agent = agent
        self.history = history if history is not None else TaskHistory()
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.embeddings = embeddings
        self.planner = SpawnPlanner(settings, telemetry=self.telemetry)
        self.base_url: str | None = None
        self._http_done = anyio.Event()
        self._token = settings.gateway.token
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

    # ------------------------------------------------------------------ catalog and views

    def catalog(self) -> ToolCatalog:
        """Every tool the manager knows (`manager.catalog()`: rebuilt only when the manager's version
        moves), its per-server sizes recorded once per catalog version."""
        catalog: ToolCatalog = self.manager.catalog()
        if catalog.version != self._sizes_recorded:
            self._sizes_recorded = catalog.version
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
        view = self._views.get(agent)
        if view is None:
            view = self._views[agent] = _AgentView(self, agent)
        return view

    def _new_context(
        self, spawn_id: str | None, token: str | None, task: str, task_id: str, agent: str, recent: list[str]
    ) -> _Context:
        view = self._view(agent)
        on_called = (lambda name: self.history.record(task_id, [name])) if spawn_id is not None else None
        meta = MetaTools(
            view.engine,
            self.manager,
            full_catalog=self.catalog,
            visibility=view.rules,
            agent=agent,
            on_called=on_called,
        )
        return _Context(spawn_id, token, task, task_id, view, meta, recent)

    def _plan(self, context: _Context) -> SpawnPlan:
        """The context's plan for the current catalog (re-planned only when its visible tools change)."""
        visible = context.view.visible()
        if context.plan is None or context.plan.catalog_version != visible.version:
            first = context.plan is None and context.id is not None
            context.plan = self.planner.plan(
                context.task,
                context.view.agent,
                self.catalog(),
                recent_tools=context.recent,
                task_id=context.task_id or None,
                record=first,  # one telemetry event per spawn, not per re-plan
            )
        return context.plan

    def _tools(self, context: _Context) -> list[types.Tool]:
        plan = self._plan(context)
        if context.listed is not None and context.listed[0] == plan.fingerprint:
            return context.listed[1]
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

        Raises:
            ConfigError: unknown agent profile.
            OrchestratorError: the gateway is not serving HTTP yet (no URL to hand out).
        """
        if self.base_url is None:
            raise OrchestratorError("gateway: not serving HTTP, so a spawn has no endpoint (start it first)")
        agent = agent or self.agent
        self.settings.agent(agent)
        task_id = task_id or task_key(task)
        spawn_id = secrets.token_hex(SPAWN_ID_BYTES)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        context = self._new_context(spawn_id, token, task, task_id, agent, self.history.recent(task_id))
        plan = self._plan(context)
        self._spawns[spawn_id] = context
        url = f"{self.base_url}/spawn/{spawn_id}/mcp"
        return SpawnHandle(spawn_id, token, url, agent, task_id, plan)

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
        spawn_id = scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None
        if spawn_id is None:
            return self._default
        return self._spawns.get(spawn_id)

    async def _on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListToolsResult(tools=[])
        self._track_legacy_session(context, ctx)
        return types.ListToolsResult(tools=self._tools(context))

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

    def warm_search(self) -> int:
        """Get each profile's tool search ready before its agents ask; returns at once.

        For every profile whose tools go out in search mode with hybrid ranking, the index is built and
        the catalog's uncached tools are handed to the background embedding, so the first searches of
        the first spawns are ranked by meaning instead of answering lexically while it warms. Full-mode
        profiles never search, so nothing is embedded for them. The first call loads the model (about
        0.5 s): run it off the event loop (`_warm_search`). Returns how many profiles were warmed.
        """
        warmed = 0
        for view in list(self._views.values()):
            if view.engine.ranking_used != "hybrid":
                continue
            if self.planner.plan_tools(view.visible(), view.search_settings).mode != "search":
                continue
            view.engine.warm(timeout=0)
            warmed += 1
        return warmed

    async def _warm_search(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.warm_search)
        except Exception:  # boundary: warming is an optimisation; searches answer lexically without it
            log.warning("warming tool search failed; searches answer lexically until it is ready", exc_info=True)

    async def _on_manager_change(self, version: int) -> None:
        """Forward a catalog change to every connected client whose view may have changed, and start
        embedding the changed tools."""
        current = self.catalog().version
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
        """Stop listening to the manager."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

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
        check_bind(host, self._token)
        sock = _bind(host, port)
        self.base_url = client_base_url(host, sock.getsockname()[1])
        sessions = StreamableHTTPSessionManager(app=self.server, security_settings=_transport_security(host))
        config = uvicorn.Config(
            _Router(self, sessions),
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        http = _Uvicorn(config)
        self._http_done = anyio.Event()

        async def serve() -> None:
            try:
                await http.serve([sock])
            finally:
                self._http_done.set()

        try:
            async with anyio.create_task_group() as tg:
                async with sessions.run():
                    tg.start_soon(serve)
                    tg.start_soon(self._warm_search)
                    try:
                        yield self.base_url
                    finally:
                        http.should_exit = True
        finally:
            sock.close()
            self.base_url = None

    # ------------------------------------------------------------------ admin (used by the router)

    def _authorized(self, request: Request, spawn: _Context | None = None) -> bool:
        """With a gateway token, it (or the spawn's own token) is required; a spawn always needs one."""
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        value = value.strip() if scheme.lower() == "bearer" else ""
        accepted = [token for token in (self._token, spawn.token if spawn else None) if token]
        if not accepted:
            return True
        return any(hmac.compare_digest(value.encode(), token.encode()) for token in accepted)

    def health(self) -> dict[str, Any]:
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
        }


class _Router:
    """The gateway's ASGI app: MCP endpoints to the session manager, small JSON admin endpoints, auth."""

    def __init__(self, gateway: Gateway, sessions: StreamableHTTPSessionManager) -> None:
        self._gateway = gateway
        self._sessions = sessions

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        gateway = self._gateway
        request = Request(scope, receive)
        path = scope["path"]
        spawn_match = _SPAWN_PATH.match(path)
        if path in (DEFAULT_PATH, DEFAULT_PATH + "/") or spawn_match:
            spawn = None
            if spawn_match:
                spawn = gateway._spawns.get(spawn_match.group(1))
                if spawn is None:
                    await _json({"error": f"no open spawn {spawn_match.group(1)!r}"}, 404)(scope, receive, send)
                    return
            if not gateway._authorized(request, spawn):
                await _unauthorized()(scope, receive, send)
                return
            scope[_SCOPE_KEY] = spawn.id if spawn is not None else None
            await self._sessions.handle_request(scope, receive, send)
            return
        if not gateway._authorized(request):
            await _unauthorized()(scope, receive, send)
            return
        response = await self._admin(request, path)
        await response(scope, receive, send)

    async def _admin(self, request: Request, path: str) -> Response:
        gateway = self._gateway
        method = request.method
        try:
            if path == "/health" and method == "GET":
                return _json(gateway.health())
            if path in ("/spawns", "/spawns/") and method == "POST":
                body = await _read_json(request)
                task = body.get("task")
                if not isinstance(task, str):
                    return _json({"error": "POST /spawns needs a JSON body with 'task' (a string)"}, 400)
                handle = gateway.open_spawn(task, body.get("agent"), task_id=body.get("task_id"))
                return _json(handle.to_json(), 201)
            admin_match = _SPAWN_ADMIN_PATH.match(path)
            if admin_match and method in ("GET", "DELETE"):
                spawn_id = admin_match.group(1)
                stats = gateway.close_spawn(spawn_id) if method == "DELETE" else gateway.spawn_stats(spawn_id)
                return _json(stats)
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        except OrchestratorError as exc:
            return _json({"error": str(exc)}, 404)
        return _json({"error": f"no endpoint {method} {path}"}, 404)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers: the application decides what SIGINT/SIGTERM mean, so a stop
    always unwinds the manager (children stopped) instead of uvicorn re-raising the signal afterwards."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class GatewayClient:
    """The admin side of a running gateway, as `orchestrator spawn` uses it (stdlib HTTP, in a thread)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token

    async def health(self, timeout: float = HEALTH_TIMEOUT_S) -> dict[str, Any] | None:
        """The gateway's health, or None when nothing answers there.

        Raises:
            OrchestratorError: something answers but refuses (a wrong or missing token, not a gateway).
        """
        try:
            return await self._request("GET", "/health", None, timeout)
        except _Unreachable:
            return None

    async def open_spawn(self, task: str, agent: str, task_id: str | None = None) -> dict[str, Any]:
        return await self._request("POST", "/spawns", {"task": task, "agent": agent, "task_id": task_id})

    async def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        return await self._request("DELETE", f"/spawns/{spawn_id}", None)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float = ADMIN_TIMEOUT_S
    ) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self._request_sync, method, path, body, timeout)

    def _request_sync(self, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (our own URL)
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            raise OrchestratorError(f"gateway {self.base_url}: {method} {path} failed: {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Unreachable(f"gateway {self.base_url}: {method} {path}: {reason}") from None
        except ValueError:
            raise OrchestratorError(f"gateway {self.base_url}: {method} {path}: the answer is not JSON") from None


class _Unreachable(OrchestratorError):
    """Nothing answers at the gateway's address (so `orchestrator spawn` takes the cold path)."""


# ---------------------------------------------------------------------- small helpers


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound before the server starts, so clients can connect at once."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only disables Nagle on accepted sockets whose proto says TCP, and with
    # Nagle on, every keep-alive response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(256)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"gateway.port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _transport_security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection on loopback (browsers must not reach it); elsewhere the token protects."""
    if is_loopback(host):
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _json(payload: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(payload, status_code=status)


def _unauthorized() -> Response:
    return JSONResponse(
        {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _read_json(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", ""))
    except (ValueError, AttributeError, OSError):
        return exc.reason if isinstance(exc.reason, str) else ""


def _package_version() -> str:
    from . import __version__

    return __version__

