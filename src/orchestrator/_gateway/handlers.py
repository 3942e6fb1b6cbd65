"""The gateway's MCP handlers: what an agent lists and calls, and what it hears while a tool runs.

Each request is answered for its endpoint's `SpawnContext` (the spawn the router verified, or the
gateway's own profile). `tools/list` gives the endpoint's plan: every tool its profile sees in full mode,
the meta-tools and pinned tools in search mode, under the names its client needs. `tools/call` goes
through the endpoint's `MetaTools`, whose event becomes the request's action in the spawn's session. A
call's progress and log messages are relayed to its caller; the upstream servers' resources and prompts
are served through `proxy.py`. Handshake-era client sessions are remembered so they hear of tool-list
changes (`notify_legacy`); 2026-07-28 clients listen instead.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, get_args

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from .._accounting import Action, action_of
from .._clients import ClientKind, client_from_handshake
from .._events import CallEvent
from .._formats import to_mcp_tool
from .._meta_tools import CallRelay, Handled, Offload
from .auth import SpawnClaims
from .proxy import Admits, UpstreamProxy, resource_uris
from .views import ROUTED_SCOPE, SCOPE_KEY, SpawnContext, Upstream

__all__ = ["GatewayHandlers", "RequestContext"]

RequestContext = ServerRequestContext[Any, Any]
"""What the SDK's lowlevel server hands each handler (`request` is the HTTP request, None on stdio)."""

RELAY_DRAIN_S = 5.0
"""Longest a call's result waits for its relayed progress and log messages to be sent to the caller; they
normally take microseconds (an in-memory stream), so only a stalled client ever reaches it."""
LOG_LEVELS: frozenset[str] = frozenset(get_args(types.LoggingLevel))
DEFAULT_LOG_LEVEL: types.LoggingLevel = "info"
"""Upstream log messages relayed to a handshake-era client that never sent logging/setLevel (2026-07-28
clients opt in per request instead): info and above, what a person would want to see."""
MAX_LEGACY_SESSIONS = 1024
"""Handshake-era sessions remembered per endpoint for list_changed; a gone session is only noticed by
eviction (sending to it never fails), so the oldest is dropped past this many."""
_ENDED = "this spawn has ended; no tools can be called"


class _Relayed:
    """Notifications of one call still being relayed to its caller.

    The SDK's client runs each progress (and log) callback in a task of its own, started in the order the
    messages arrived, and wakes the caller with the result right after: without waiting, the result can
    reach the agent before the last progress notifications and its client then drops them. Each callback
    counts itself in before its first await, and every task started before the result has run that far by
    the time the caller resumes (tasks start in order), so `drained` waits for all of them.
    """

    def __init__(self) -> None:
        self._pending = 0
        self._idle: anyio.Event | None = None

    @contextlib.asynccontextmanager
    async def sending(self) -> AsyncIterator[None]:
        self._pending += 1
        try:
            yield
        finally:
            self._pending -= 1
            if self._pending == 0 and self._idle is not None:
                self._idle.set()

    async def drained(self) -> None:
        """Wait until nothing is being relayed (at most RELAY_DRAIN_S: a stuck client must not hold the result)."""
        with anyio.move_on_after(RELAY_DRAIN_S):
            while self._pending:
                self._idle = anyio.Event()
                await self._idle.wait()


class GatewayHandlers:
    """The lowlevel server's handlers, over the gateway's endpoints.

    Args:
        default: the gateway's own endpoint (stdio, or `/mcp` with the admin secret).
        spawn_context: a verified spawn's context (`SpawnRegistry.context`).
        upstream: the manager, for server states (resources and prompts go through `proxy`).
        run_sync: the gateway's worker pool.
    """

    def __init__(
        self,
        default: SpawnContext,
        spawn_context: Callable[[SpawnClaims], SpawnContext],
        upstream: Upstream,
        run_sync: Offload,
    ) -> None:
        self.default = default
        self._spawn_context = spawn_context
        self._upstream = upstream
        self._run_sync = run_sync
        self._proxy = UpstreamProxy(upstream)
        self._log_levels: dict[str, types.LoggingLevel] = {}  # handshake-era sessions' logging/setLevel

    def context_for(self, ctx: RequestContext) -> SpawnContext | None:
        """The gateway's own profile (stdio, or `/mcp` with the admin secret), or the spawn whose verified
        claims the router put on the request: the profile comes from the credential, never the request.
        The client its MCP handshake names (`clientInfo.name`) gets that client's name budget and tool
        limit however it was started (a wrapper, `npx`, `bin/claude.exe`). None for a spawn whose
        credential has expired since."""
        endpoint = self._endpoint(ctx.request.scope if isinstance(ctx.request, Request) else {})
        return endpoint.for_client(client_of(ctx)) if endpoint is not None else None

    def _endpoint(self, scope: Mapping[str, Any]) -> SpawnContext | None:
        """The endpoint the router's claims on `scope` name (the gateway's own when none), before the
        client's kind is applied; None for a spawn whose credential has expired."""
        claims = scope.get(SCOPE_KEY)
        if claims is None:
            return self.default
        if not isinstance(claims, SpawnClaims) or claims.remaining_s() <= 0:
            return None
        return self._spawn_context(claims)

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """`name`'s input schema as last listed to the caller of the HTTP request being handled, for the
        SDK's check of a call's `Mcp-Param-*` headers (`Server.get_tool_input_schema`). Without it the SDK
        runs a whole tools/list for every call to find the schema: CPU on the event loop, and a listing
        counted in the spawn's session. None (the SDK then skips the check, as when its own listing
        fails) when this caller has listed no such tool here, for example after listing on another replica.
        """
        scope = ROUTED_SCOPE.get(None)
        context = self._endpoint(scope) if scope is not None else None
        if context is None:
            return None
        # The variant that served this spawn's latest request first: it is the caller's client kind.
        for endpoint in (context.active, context, *context.variants.values()):
            schema = endpoint.listed_schema(name) if endpoint is not None else None
            if schema is not None:
                return schema
        return None

    # ------------------------------------------------------------------ tools

    async def on_list_tools(
        self, ctx: RequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        context = self.context_for(ctx)
        if context is None:
            return types.ListToolsResult(tools=[])
        self._track_legacy_session(context, ctx)
        if context.session is not None:
            context.session.listed()
        offload = context.offload or self._run_sync  # a spawn's share of the pool
        return types.ListToolsResult(tools=await offload(_listed_tools, context))

    async def on_call_tool(self, ctx: RequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        context = self.context_for(ctx)
        if context is None:
            return types.CallToolResult(content=[types.TextContent(type="text", text=_ENDED)], is_error=True)
        self._track_legacy_session(context, ctx)
        # Session accounting: which round (batch) this call is in, and what it was.
        session = context.session
        batch = session.begin() if session is not None else 0
        action: Action | None = None
        try:
            relay, relayed = self._relay(ctx)
            handled = await context.meta.handle(params.name, params.arguments, relay=relay)
            await relayed.drained()  # the result must not overtake the call's progress and log messages
            self._remember_links(context, handled)
            action = action_of(handled.event)
            return handled.result
        finally:
            if session is not None:
                session.end(batch, action)

    def _relay(self, ctx: RequestContext) -> tuple[CallRelay, _Relayed]:
        """What the caller's request asks to hear while its tool runs: progress (it sent a progress token)
        and log messages (the `_meta` log-level opt-in at 2026-07-28; `logging/setLevel` before); and the
        count of those still being sent, which the result waits for."""
        relayed = _Relayed()
        meta: dict[str, Any] = dict(ctx.meta or {})
        wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        session = ctx.session

        async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
            async with relayed.sending():
                await session.report_progress(progress, total, message)

        level: Any
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            level = meta.get(types.LOG_LEVEL_META_KEY)
        else:
            level = self._log_levels.get(session_key(ctx), DEFAULT_LOG_LEVEL)
        request_id = ctx.request_id

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            async with relayed.sending():
                with warnings.catch_warnings():  # relaying the deprecated capability for clients that still use it
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await session.send_log_message(
                        params.level, params.data, params.logger, related_request_id=request_id
                    )

        relay = CallRelay(
            progress=forward_progress if wants_progress else None,
            log_level=level if level in LOG_LEVELS else None,
            on_log=on_log,
        )
        return relay, relayed

    async def on_set_logging_level(self, ctx: RequestContext, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """`logging/setLevel` (protocol versions before 2026-07-28): the level relayed on this session."""
        key = session_key(ctx)
        self._log_levels.pop(key, None)
        self._log_levels[key] = params.level
        if len(self._log_levels) > MAX_LEGACY_SESSIONS:
            self._log_levels.pop(next(iter(self._log_levels)))
        return types.EmptyResult()

    def _remember_links(self, context: SpawnContext, handled: Handled) -> None:
        """Resource URIs a tool handed out are read back from its servers (see proxy.py)."""
        event = handled.event
        if not isinstance(event, CallEvent) or event.tool is None:
            return
        uris = resource_uris(handled.result)
        entry = context.view.visible().lookup(event.tool[0]) if uris else None
        if entry is not None:
            self._proxy.remember(uris, context.view.rules.routes(entry), context.id or "")

    # ------------------------------------------------------------------ resources and prompts

    def _opened(self, ctx: RequestContext) -> tuple[list[str], Admits]:
        """The servers whose resources and prompts this endpoint's profile may use (those it opens whole,
        `ProfileFilter.opens`), in name order, and the test of a namespaced name against its allow/deny."""
        context = self.context_for(ctx)
        if context is None:
            return [], lambda name, server, own: False
        rules = context.view.rules
        return [s.name for s in self._upstream.status() if rules.opens(s.name)], rules.admits

    async def on_list_resources(
        self, ctx: RequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await self._proxy.list_resources(*self._opened(ctx))

    async def on_list_resource_templates(
        self, ctx: RequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await self._proxy.list_resource_templates(*self._opened(ctx))

    async def on_read_resource(
        self, ctx: RequestContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        servers, _ = self._opened(ctx)
        context = self.context_for(ctx)
        spawn = context.id or "" if context is not None else ""
        return await self._proxy.read_resource(servers, str(params.uri), spawn)

    async def on_list_prompts(
        self, ctx: RequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return await self._proxy.list_prompts(*self._opened(ctx))

    async def on_get_prompt(self, ctx: RequestContext, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        servers, admits = self._opened(ctx)
        return await self._proxy.get_prompt(servers, admits, params.name, params.arguments)

    # ------------------------------------------------------------------ tool-list changes

    def _track_legacy_session(self, context: SpawnContext, ctx: RequestContext) -> None:
        """Remember handshake-era sessions: they learn of tool-list changes by notification, not by listen."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        key = session_key(ctx)
        if key and key not in context.legacy_sessions:
            if len(context.legacy_sessions) >= MAX_LEGACY_SESSIONS:
                context.legacy_sessions.pop(next(iter(context.legacy_sessions)))
            context.legacy_sessions[key] = ctx.session

    async def notify_legacy(self, contexts: Iterable[SpawnContext]) -> None:
        """Tell every remembered handshake-era session of these endpoints that the tool list changed."""
        for context in [each for base in contexts for each in (base, *base.variants.values())]:
            for key, session in list(context.legacy_sessions.items()):
                try:
                    await session.send_tool_list_changed()
                except Exception:  # boundary: a gone session must not stop the others hearing of it
                    context.legacy_sessions.pop(key, None)


def client_of(ctx: RequestContext) -> ClientKind | None:
    """The client kind the request's session announced in its handshake (or its 2026-07-28 envelope)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return client_from_handshake(getattr(info, "name", None))


def session_key(ctx: RequestContext) -> str:
    """The client session a request belongs to: its `mcp-session-id` over HTTP, "stdio" on stdio."""
    if isinstance(ctx.request, Request):
        return ctx.request.headers.get("mcp-session-id", "")
    return "stdio"


def _listed_tools(context: SpawnContext) -> list[types.Tool]:
    """The endpoint's tools as listed to its client, kept until its plan changes (CPU work: worker pool)."""
    plan = context.current_plan()
    listed = context.listed
    if listed is not None and listed[0] == plan.fingerprint:
        return listed[1]
    view = context.view
    visible = view.visible()
    names, provider = view.names(), view.provider
    if plan.mode == "full":
        tools = [to_mcp_tool(entry, names.name(entry.name), provider) for entry in visible]
    else:
        tools = []
        for definition in plan.tools:
            entry = visible.get(definition["name"])
            if entry is not None:
                tools.append(to_mcp_tool(entry, names.name(entry.name), provider))
            else:
                tools.append(to_mcp_tool(definition, provider=provider))
    context.listed = (plan.fingerprint, tools)
    return tools
