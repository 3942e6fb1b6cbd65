"""The gateway's MCP server: agent views, the spawn registry, the handlers, list_changed fan-out, warm-up.

An agent connects to the gateway as to any MCP server. In full mode it lists every tool its profile may
see, proxied under the qualified name; in search mode it lists `tool_search`, `expand_tools`, `call_tool`
and its pinned tools. Every call goes through `MetaTools` (validation, profile checks, routing through
the manager), so a short-lived agent reuses the gateway's live server connections instead of starting
every server again. A tool-list change in the manager reaches connected clients: `subscriptions/listen`
streams (protocol 2026-07-28) and, for older clients, `notifications/tools/list_changed` on their session.
Each profile is listed names that fit after its client's prefix (`_clients`, `ClientNames`); a call's
progress and log messages are relayed to its caller, and the upstream servers' resources and prompts are
served through the gateway too (`proxy.py`).

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
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, TypeVarTuple, Unpack, get_args

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .._accounting import Action, SessionCost, SessionRecorder
from .._clients import client_kind, client_rules, name_budget, tool_prefix
from .._config import Settings
from .._errors import ConfigError, OrchestratorError
from .._formats import ClientNames, to_mcp_tool
from .._history import TaskHistory
from .._meta_tools import META_TOOL_NAMES, CallRelay, MetaTools
from .._planning import (
    CALL_TOOL,
    EXPAND_TOOLS,
    META_TOOL_DEFINITIONS,
    TOOL_SEARCH,
    ProfileFilter,
    SpawnPlan,
    SpawnPlanner,
    effective_tool_search,
    task_key,
)
from .._spawnlog import SpawnLog
from .._store import MemoryStore, Store
from .._telemetry import Telemetry
from ..protocols.mcp._catalog import ToolCatalog
from ..protocols.mcp._normalization import MIN_NAME_LENGTH
from ..search._embedding import EmbeddingRuntime
from ..search._engine import ToolSearchEngine
from .app import SCOPE_KEY, SERVER_NAME, mcp_config, serve
from .auth import CredentialError, Credentials, SpawnClaims, SpawnClosedError, SpawnLimitError
from .proxy import UpstreamProxy, resource_uris
from .sessions import SessionAccounting

log = logging.getLogger(__name__)

__all__ = ["Gateway", "SpawnClosedError", "SpawnHandle", "SpawnLimitError"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

SPAWN_ID_BYTES = 8
COUNT_KEYS = ("searches", "expands", "calls", "errors")
# The meta-tool counts every replica appends to a spawn's list in the store; the closing replica sums them.
SEARCH_LIMIT_MAX = int(
    next(d for d in META_TOOL_DEFINITIONS if d["name"] == TOOL_SEARCH)["input_schema"]["properties"]["limit"]["maximum"]
)
# A tool_search `limit` above what its definition advertises is lowered to it: no agent gets the whole catalog.
NAME_ECHO_CHARS = 128
# An unknown tool name longer than this (qualified names have at most 64) is echoed back cut to this length.
RELAY_DRAIN_S = 5.0
# Longest a call's result waits for its relayed progress and log messages to be sent to the caller; they
# normally take microseconds (an in-memory stream), so only a stalled client ever reaches it.
LOG_LEVELS: frozenset[str] = frozenset(get_args(types.LoggingLevel))
DEFAULT_LOG_LEVEL: types.LoggingLevel = "info"
# Upstream log messages relayed to a handshake-era client that never sent logging/setLevel (2026-07-28
# clients opt in per request instead): info and above, what a person would want to see.
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
    server_name: str = SERVER_NAME
    """The gateway's name in the MCP config (`gateway.server_name`): clients prefix tool names with it."""

    def mcp_config(self) -> dict[str, Any]:
        return mcp_config(self.url, self.token, self.server_name)

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
    """One agent profile over the live catalog: its visible tools, a search index over them, and the names
    and schemas its client needs (`_clients`: the client's prefix leaves `budget` characters per name)."""

    def __init__(self, gateway: Gateway, agent: str) -> None:
        self.agent = agent
        profile = gateway.settings.agent(agent)
        self.rules = ProfileFilter.from_profile(profile)
        self.search_settings = effective_tool_search(gateway.settings.mcp.tool_search, profile)
        self.provider = client_rules(client_kind(profile)).provider
        self.prefix = tool_prefix(profile, gateway.settings.gateway.server_name)
        self.budget = name_budget(self.prefix)
        if self.budget < MIN_NAME_LENGTH:
            raise ConfigError(
                f"agents.{agent}: its client's tool prefix {self.prefix!r} leaves {self.budget} of 64 characters "
                f"for tool names, fewer than {MIN_NAME_LENGTH}; shorten gateway.server_name or agents.{agent}.tool_prefix"
            )
        self._gateway = gateway
        self._visible: tuple[str, ToolCatalog] | None = None
        self._names: tuple[str, ClientNames] | None = None
        self.engine = ToolSearchEngine(
            self.visible, self.search_settings, embeddings=gateway.embeddings, telemetry=gateway.telemetry
        )

    def visible(self) -> ToolCatalog:
        full = self._gateway.catalog()
        cached = self._visible
        if cached is None or cached[0] != full.version:
            cached = self._visible = (full.version, self.rules.apply(full))
        return cached[1]

    def names(self) -> ClientNames:
        """The names this profile's client is given (qualified names, shortened past the budget)."""
        visible = self.visible()
        cached = self._names
        if cached is None or cached[0] != visible.version:
            cached = self._names = (visible.version, ClientNames(visible, self.budget))
        return cached[1]

    def qualified(self, name: str) -> str | None:
        """The qualified name behind a name this client was given (None: not one of them)."""
        return self.names().qualified(name)

    def search_mode(self) -> bool:
        """Whether this profile's agents get tool_search (the plan's mode; pins never change it)."""
        return self._gateway.planner.plan_tools(self.visible(), self.search_settings).mode == "search"


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


@dataclass
class _Context:
    """One endpoint's state: a spawn (or the gateway's own profile), its plan and its meta-tool counts."""

    id: str | None
    expires: float | None
    """Unix time its credential expires (None: the gateway's own profile); its state is dropped then."""
    task: str
    task_id: str
    view: _AgentView
    meta: MetaTools
    recent: list[str]
    plan: SpawnPlan | None = None
    listed: tuple[str, list[types.Tool]] | None = None
    legacy_sessions: dict[str, Any] = field(default_factory=dict)
    opened: float = field(default_factory=time.monotonic)
    session: SessionRecorder | None = None
    """A spawn's rounds and requests (session accounting); None for the gateway's own endpoint."""
    saved_counts: dict[str, Any] = field(default_factory=dict)
    """The meta-tool counts already appended to the store (the next append carries only what is new)."""


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
            `call_tool()` and `add_listener()`; `request()` too for resources and prompts).
        agent: the profile served at `/mcp` and over stdio.
        history: where tasks' recently called tools are kept (default: in `store`).
        telemetry: where searches, spawns and catalog sizes are recorded (default: OpenTelemetry's
            global providers).
        embeddings: the embedding runtime shared by every profile's search. Default: one built from
            `settings` (`mcp.embedding`), owned by the gateway and closed by `close()`.
        spawn_log: where finished spawns' sessions are appended. Default: `gateway.spawn_log` (off
            unless set; in `store` when `store.url` is set); closed by `close()`.
        credentials: the admin secret and the spawn-signing key (default: from `settings`; with no
            `gateway.token` a new secret, with no `gateway.signing_key` a key of this process only).
        store: the open spawns, revocations and per-spawn counts that replicas share (default: in
            memory, one process; `open_store(settings)` for files or Redis).
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
        spawn_log: SpawnLog | None = None,
        credentials: Credentials | None = None,
        store: Store | None = None,
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
        self.sessions = SessionAccounting(
            self.planner,
            self.telemetry,
            spawn_log if spawn_log is not None else SpawnLog.from_settings(settings, self.store),
        )
        self.base_url: str | None = None
        workers = settings.gateway.workers
        self._limiter = anyio.CapacityLimiter(workers) if workers > 0 else None
        self._http_done = anyio.Event()
        self._lock = threading.Lock()  # views and the catalog-size record: both reached from worker threads
        self._sizes_recorded: str | None = None
        self._views: dict[str, _AgentView] = {}
        self._spawns: dict[str, _Context] = {}  # spawns this replica has served, built from their claims
        self._revoked: dict[str, float] = {}  # spawn id -> expiry: revocations seen (they never come undone)
        self._open_lock = threading.Lock()  # counting open spawns and adding one, as one step per process
        self._bus = InMemorySubscriptionBus()
        self._notified_version: str | None = None
        self._proxy = UpstreamProxy(manager)
        self._log_levels: dict[str, types.LoggingLevel] = {}  # handshake-era sessions' logging/setLevel
        # logging/setLevel is deprecated at 2026-07-28 but is how older clients (TS SDK v1, MCP Inspector)
        # ask for the log messages relayed from upstream servers.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = _GatewayServer(
                settings.gateway.server_name,
                version=_package_version(),
                instructions="Tools of the orchestrator's MCP servers. In search mode: tool_search, then "
                "expand_tools, then call_tool.",
                on_list_tools=self._on_list_tools,
                on_call_tool=self._on_call_tool,
                on_subscriptions_listen=ListenHandler(self._bus),
                on_list_resources=self._on_list_resources,
                on_list_resource_templates=self._on_list_resource_templates,
                on_read_resource=self._on_read_resource,
                on_list_prompts=self._on_list_prompts,
                on_get_prompt=self._on_get_prompt,
                on_set_logging_level=self._on_set_logging_level,
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
        self, spawn_id: str | None, expires: float | None, task: str, task_id: str, agent: str, recent: list[str]
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
            search_offered=view.search_mode,
            names=view.qualified,
            schema_limits=self.manager.schema_limits,
        )
        return _Context(spawn_id, expires, task, task_id, view, meta, recent)

    def _plan(self, context: _Context, *, record: bool = False) -> SpawnPlan:
        """The context's plan for the current catalog (re-planned only when its visible tools change).
        `record`: count the spawn in telemetry (once, where it is opened; not per replica or re-plan)."""
        visible = context.view.visible()
        plan = context.plan
        if plan is None or plan.catalog_version != visible.version:
            plan = context.plan = self.planner.plan(
                context.task,
                context.view.agent,
                self.catalog(),
                recent_tools=context.recent,
                task_id=context.task_id or None,
                record=record,
            )
        return plan

    def _tools(self, context: _Context) -> list[types.Tool]:
        plan = self._plan(context)
        listed = context.listed
        if listed is not None and listed[0] == plan.fingerprint:
            return listed[1]
        visible = context.view.visible()
        names, provider = context.view.names(), context.view.provider
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

    # ------------------------------------------------------------------ spawns

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
        agent = agent or self.agent
        self.settings.agent(agent)
        task_id = task_id or task_key(task)
        gw = self.settings.gateway
        recent = self.history.recent(task_id)
        with self._open_lock:
            if len(self.store.scan("spawns")) >= gw.max_open_spawns:
                raise SpawnLimitError(
                    f"gateway: {gw.max_open_spawns} spawns are open (gateway.max_open_spawns); close one or "
                    "wait for one to expire"
                )
            spawn_id = secrets.token_hex(SPAWN_ID_BYTES)
            token, claims = self.credentials.mint(spawn_id, agent, task_id, recent, gw.spawn_ttl_s)
            record = {
                "agent": agent,
                "task_id": task_id,
                "pins": recent,
                "opened": claims.issued,
                "expires": claims.expires,
            }
            self.store.put(f"spawns/{spawn_id}", record, ttl_s=max(claims.remaining_s(), 0.001))  # ends with it
        context = self._context_from_claims(claims, task)
        plan = self._plan(context, record=True)
        url = f"{base_url}/spawn/{spawn_id}/mcp"
        return SpawnHandle(spawn_id, token, url, agent, task_id, plan, gw.server_name)

    def verify_spawn(self, token: str, spawn_id: str) -> SpawnClaims:
        """The claims of a spawn credential presented at `/spawn/<id>/mcp` (the router's check). Reads
        the store for revocations: from async code, run it in the worker pool.

        Raises:
            CredentialError: missing, forged, expired, for another spawn, or for an unknown profile.
            SpawnClosedError: the spawn was closed (DELETE) on this or another replica.
        """
        claims = self.credentials.verify(token, spawn_id)
        if claims.agent not in self.settings.agents and claims.agent != "default":
            raise CredentialError(f"spawn credential names agent {claims.agent[:64]!r}, unknown to this gateway")
        if self._is_revoked(spawn_id):
            with self._lock:
                context = self._spawns.pop(spawn_id, None)
            if context is not None:
                self._finish_quietly(context, "closed")
            raise SpawnClosedError(f"gateway: spawn {spawn_id!r} has ended")
        return claims

    def _is_revoked(self, spawn_id: str) -> bool:
        if spawn_id in self._revoked:
            return True
        record = self.store.get(f"revoked/{spawn_id}")
        if record is None:
            return False
        with self._lock:
            self._revoked[spawn_id] = float(record) if isinstance(record, int | float) else time.time()
        return True

    def _context_from_claims(self, claims: SpawnClaims, task: str = "") -> _Context:
        """This replica's state for a spawn (plan, counts, session), made from its claims on first use;
        spawns whose credential has expired are dropped on the way (their sessions recorded)."""
        with self._lock:
            context = self._spawns.get(claims.spawn_id)
        if context is not None:
            return context
        fresh = self._new_context(
            claims.spawn_id, claims.expires, task, claims.task_id, claims.agent, list(claims.pins)
        )
        fresh.session = SessionRecorder()
        now = time.time()
        expired: list[_Context] = []
        with self._lock:
            for spawn_id, other in list(self._spawns.items()):
                if other.expires is not None and other.expires <= now:
                    expired.append(self._spawns.pop(spawn_id))
            for spawn_id, until in list(self._revoked.items()):
                if until <= now:
                    del self._revoked[spawn_id]
            context = self._spawns.setdefault(claims.spawn_id, fresh)
        for old in expired:
            self._finish_quietly(old, "expired")
        return context

    def _finish_quietly(self, context: _Context, ended: str) -> None:
        try:
            self._finish_session(context, ended)
        except Exception:  # boundary: one session's accounting must not fail another request
            log.warning("recording the session of spawn %s failed", context.id, exc_info=True)

    def _save_counts(self, context: _Context) -> None:
        """Append what this replica counted for a spawn since its last append to the spawn's list in the
        store (kept until the spawn expires), so the replica that closes it reports every replica's work."""
        if context.id is None or context.expires is None:
            return
        ttl = context.expires - time.time()
        if ttl <= 0:
            return
        with self._lock:  # one delta per change, however many worker threads finish calls at once
            current = context.meta.stats.as_dict()
            saved = context.saved_counts
            delta: dict[str, Any] = {key: current[key] - saved.get(key, 0) for key in COUNT_KEYS}
            delta["called"] = [name for name in current["called"] if name not in saved.get("called", ())]
            if not any(delta.values()):
                return
            context.saved_counts = current
        self.store.append(f"stats/{context.id}", delta, ttl_s=ttl)

    def spawn_stats(self, spawn_id: str) -> dict[str, Any]:
        """The spawn's plan figures and meta-tool counts, summed over every replica that served it.

        Reads the store: from async code, `await gateway.run_sync(...)`.

        Raises:
            OrchestratorError: no such spawn (never opened, closed, or expired).
        """
        record = self.store.get(f"spawns/{spawn_id}")
        if not isinstance(record, dict):
            raise OrchestratorError(f"gateway: no open spawn {spawn_id!r}")
        with self._lock:
            context = self._spawns.get(spawn_id)
        if context is None:  # opened on another replica and never served here: planned from its record
            pins = [str(pin) for pin in record.get("pins", ())]
            context = self._new_context(
                spawn_id, float(record["expires"]), "", str(record["task_id"]), str(record["agent"]), pins
            )
        else:
            self._save_counts(context)
        plan = self._plan(context)
        counts: dict[str, Any] = {**dict.fromkeys(COUNT_KEYS, 0), "called": []}
        for delta in self.store.items(f"stats/{spawn_id}"):
            if not isinstance(delta, dict):
                continue
            for key in COUNT_KEYS:
                counts[key] += int(delta.get(key, 0))
            counts["called"].extend(tool for tool in delta.get("called", ()) if tool not in counts["called"])
        return {
            "id": spawn_id,
            "agent": context.view.agent,
            "task_id": context.task_id,
            "mode": plan.mode,
            "tokens_sent": plan.prompt_tokens,
            "tokens_saved": plan.tokens_saved,
            "fingerprint": plan.fingerprint,
            **counts,
            "open_s": round(time.time() - float(record["opened"]), 3),
            "session": _session_json(self.sessions.cost(context, plan)),
        }

    def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        """Final counts of a spawn; its credential is revoked (on every replica sharing the store) until it
        would have expired, its state is dropped, and its session is recorded (metrics, spawn log).

        Raises:
            OrchestratorError: no such spawn.
        """
        record = self.store.get(f"spawns/{spawn_id}")
        if not isinstance(record, dict):
            raise OrchestratorError(f"gateway: no open spawn {spawn_id!r}")
        expires = float(record["expires"])
        if expires > time.time():
            self.store.put(f"revoked/{spawn_id}", expires, ttl_s=expires - time.time())
        with self._lock:
            self._revoked[spawn_id] = expires
        stats = self.spawn_stats(spawn_id)
        with self._lock:
            context = self._spawns.pop(spawn_id, None)
        if context is not None:  # None: served only by other replicas, or a concurrent close finished it
            stats["session"] = _session_json(self._finish_session(context, "closed"))
        self.store.delete(f"stats/{spawn_id}")
        self.store.delete(f"spawns/{spawn_id}")
        return stats

    def _finish_session(self, context: _Context, ended: str) -> SessionCost | None:
        """Record a spawn's session once it is out of `_spawns` (closed, expired or the gateway stopping)."""
        return self.sessions.finish(context, self._plan(context), ended)

    @property
    def open_spawns(self) -> int:
        """Spawns open now on every replica sharing the store (reads the store)."""
        return len(self.store.scan("spawns"))

    # ------------------------------------------------------------------ MCP handlers

    def _context_for(self, ctx: Any) -> _Context | None:
        """The gateway's own profile (stdio, or `/mcp` with the admin secret), or the spawn whose verified
        claims the router put on the request: the profile comes from the credential, never the request."""
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        claims = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
        if claims is None:
            return self._default
        if not isinstance(claims, SpawnClaims) or claims.remaining_s() <= 0:
            return None
        return self._context_from_claims(claims)

    async def _on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListToolsResult(tools=[])
        self._track_legacy_session(context, ctx)
        if context.session is not None:
            context.session.listed()
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
        session = context.session  # session accounting: which round (batch) this call is in, what it was
        batch = session.begin() if session is not None else 0
        action: Action | None = None
        try:
            refused = _unknown_long_name(context, params.name, arguments, self.catalog)
            if refused is not None:
                result = refused
            else:
                relay, relayed = self._relay(ctx)
                if params.name in META_TOOL_NAMES:
                    result = await context.meta.dispatch(params.name, _capped(params.name, arguments), relay=relay)
                else:
                    result = await context.meta.call_tool(params.name, arguments, relay=relay)
                await relayed.drained()  # the result must not overtake the call's progress and log messages
            self._remember_links(context, params.name, arguments, result)
            if context.id is not None:
                await self.run_sync(self._save_counts, context)
            if session is not None:
                action = await self.run_sync(self.sessions.describe, context.view, params.name, arguments, result)
            return result
        finally:
            if session is not None:
                session.end(batch, action)

    # ------------------------------------------------------------------ what a call carries through

    def _relay(self, ctx: Any) -> tuple[CallRelay, _Relayed]:
        """What the caller's request asks to hear while its tool runs: progress (it sent a progress token)
        and log messages (the `_meta` log-level opt-in at 2026-07-28; `logging/setLevel` before); and the
        count of those still being sent, which the result waits for."""
        relayed = _Relayed()
        meta = getattr(ctx, "meta", None) or {}
        wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        session = getattr(ctx, "session", None)
        if session is None:
            return CallRelay(), relayed

        async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
            async with relayed.sending():
                await session.report_progress(progress, total, message)

        level: Any
        if getattr(ctx, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
            level = meta.get(types.LOG_LEVEL_META_KEY)
        else:
            level = self._log_levels.get(_session_key(ctx), DEFAULT_LOG_LEVEL)
        request_id = getattr(ctx, "request_id", None)

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

    async def _on_set_logging_level(self, ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """`logging/setLevel` (protocol versions before 2026-07-28): the level relayed on this session."""
        key = _session_key(ctx)
        self._log_levels.pop(key, None)
        self._log_levels[key] = params.level
        if len(self._log_levels) > MAX_LEGACY_SESSIONS:
            self._log_levels.pop(next(iter(self._log_levels)))
        return types.EmptyResult()

    def _remember_links(self, context: _Context, name: str, arguments: dict[str, Any] | None, result: Any) -> None:
        """Resource URIs a tool handed out are read back from its servers (see proxy.py)."""
        uris = resource_uris(result) if isinstance(result, types.CallToolResult) else []
        if not uris:
            return
        called = (arguments or {}).get("name") if name in META_TOOL_NAMES else name
        if not isinstance(called, str):
            return
        entry = context.view.visible().lookup(context.view.qualified(called) or called)
        if entry is not None:
            self._proxy.remember(uris, context.view.rules.routes(entry))

    def _upstream_servers(self, context: _Context) -> list[str]:
        """The servers whose resources and prompts this endpoint's profile may use, in name order."""
        return [s.name for s in self.manager.status() if context.view.rules.allows_server(s.name)]

    async def _on_list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListResourcesResult(resources=[])
        return await self._proxy.list_resources(self._upstream_servers(context))

    async def _on_list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListResourceTemplatesResult(resource_templates=[])
        return await self._proxy.list_resource_templates(self._upstream_servers(context))

    async def _on_read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        context = self._context_for(ctx)
        servers = self._upstream_servers(context) if context is not None else []
        return await self._proxy.read_resource(servers, str(params.uri))

    async def _on_list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        context = self._context_for(ctx)
        if context is None:
            return types.ListPromptsResult(prompts=[])
        return await self._proxy.list_prompts(self._upstream_servers(context))

    async def _on_get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        context = self._context_for(ctx)
        servers = self._upstream_servers(context) if context is not None else []
        return await self._proxy.get_prompt(servers, params.name, params.arguments)

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
        """Stop listening to the manager, record the sessions of spawns still open, write the spawn log,
        and close the embedding runtime the gateway built for itself."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for spawn_id in list(self._spawns):
            context = self._spawns.pop(spawn_id, None)
            try:
                if context is not None:
                    self._finish_session(context, "gateway_stopped")
            except Exception:  # boundary: one session's accounting must not stop the gateway closing
                log.warning("recording the session of spawn %s failed", spawn_id, exc_info=True)
        self.sessions.close()
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
            "spawns": self.open_spawns,
            "workers": self.workers(),
        }


def _session_key(ctx: Any) -> str:
    """The client session a request belongs to: its `mcp-session-id` over HTTP, "stdio" on stdio."""
    request = getattr(ctx, "request", None)
    return request.headers.get("mcp-session-id", "") if request is not None else "stdio"


def _capped(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """A meta-tool's arguments, with a `tool_search` limit above SEARCH_LIMIT_MAX lowered to it."""
    args = dict(arguments) if arguments is not None else {}
    if name == TOOL_SEARCH:
        limit = args.get("limit")
        if isinstance(limit, str) and limit.strip().isdigit():
            limit = int(limit)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > SEARCH_LIMIT_MAX:
            args["limit"] = SEARCH_LIMIT_MAX
    return args


def _unknown_long_name(
    context: _Context, name: str, arguments: dict[str, Any] | None, catalog: Callable[[], ToolCatalog]
) -> types.CallToolResult | None:
    """An `unknown_tool` error for a tool name no catalog entry has that is longer than NAME_ECHO_CHARS,
    echoing it cut short; None when the call may go on. Spares the closest-name search a megabyte of name
    and the agent a megabyte of echo."""
    args = arguments or {}
    if name == CALL_TOOL:
        names: list[Any] = [args.get("name")]
    elif name == EXPAND_TOOLS:
        value = args.get("names")
        names = value if isinstance(value, list) else [value]
    elif name in META_TOOL_NAMES:
        return None
    else:
        names = [name]
    long_names = [item for item in names if isinstance(item, str) and len(item) > NAME_ECHO_CHARS]
    if not long_names:
        return None
    full = catalog()
    for item in long_names:
        if full.lookup(item) is None:
            shown = f"{item[:NAME_ECHO_CHARS]}... ({len(item):,} characters)"
            # MetaTools' own corrective error (closest names of the cut name, the hint the agent can use),
            # so the spawn's error count holds.
            return context.meta._error("unknown_tool", context.meta._unknown_message(shown))
    return None


def _session_json(cost: SessionCost | None) -> dict[str, Any] | None:
    return cost.to_dict() if cost is not None else None


def _package_version() -> str:
    from .. import __version__

    return __version__
