"""What the gateway's parts share: the upstream manager it serves, agent views and endpoint contexts.

    Upstream       what the gateway needs from the manager (`MCPManager` is one)
    AgentView      one agent profile over the live catalog: visible tools, its search engine, client names
    SpawnContext   one endpoint (a spawn, or the gateway's own profile): its plan, meta-tools and session

The spawn registry (`spawns.py`), the MCP handlers (`handlers.py`) and session accounting (`sessions.py`)
import these; none of them imports the `Gateway` (`server.py`), which wires them together.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import mcp.types as types
from mcp import Client
from mcp.server.session import ServerSession

from .._accounting import SessionRecorder
from .._clients import ClientKind, name_budget, session_rules
from .._config import Settings
from .._errors import ConfigError
from .._formats import ClientNames
from .._meta_tools import MetaTools, Offload, ToolRouter
from .._planning import ProfileFilter, SpawnPlan, SpawnPlanner, effective_tool_search
from .._telemetry import Telemetry
from ..protocols.mcp._catalog import ToolCatalog
from ..protocols.mcp._normalization import MIN_NAME_LENGTH, hashed_name
from ..protocols.mcp._pins import HeldTool
from ..protocols.mcp._schemas import SchemaLimits
from ..protocols.mcp._status import ServerStatus
from ..search._embedding import EmbeddingRuntime
from ..search._engine import ToolSearchEngine
from ..search._evidence import EvidenceSource

__all__ = ["ROUTED_SCOPE", "SCOPE_KEY", "AgentView", "SpawnContext", "Upstream"]

SCOPE_KEY = "orchestrator.spawn"
"""Set on the ASGI scope by the router (`app.py`): the verified claims of the spawn a request is for, or
None for the gateway's own endpoint; the handlers read it (`handlers.py`)."""
ROUTED_SCOPE: ContextVar[dict[str, Any]] = ContextVar("orchestrator.routed_scope")
"""The scope of the MCP request the router is handing to the SDK, while it does: for the SDK's hooks that
get no request context (`GatewayHandlers.input_schema`)."""

T = TypeVar("T")


class Upstream(ToolRouter, Protocol):
    """What the gateway needs from the manager of the upstream servers (`MCPManager` satisfies it): calls
    as `ToolRouter` routes them, and the rest below."""

    @property
    def schema_limits(self) -> SchemaLimits: ...

    @property
    def version(self) -> int: ...

    def catalog(self) -> ToolCatalog: ...

    def status(self) -> list[ServerStatus]: ...

    def held_tools(self, server: str | None = None) -> list[HeldTool]: ...

    def add_listener(self, callback: Callable[[int], Awaitable[None] | None]) -> Callable[[], None]: ...

    async def request(self, server: str, what: str, func: Callable[[Client], Awaitable[T]]) -> T: ...


class AgentView:
    """One agent profile over the live catalog: its visible tools, a search index over them, and the names
    and schemas its client needs (`_clients`: the client's prefix leaves `budget` characters per name).

    Raises:
        ConfigError: unknown profile, or a client prefix that leaves too little room for tool names.
    """

    def __init__(
        self,
        settings: Settings,
        agent: str,
        catalog: Callable[[], ToolCatalog],
        planner: SpawnPlanner,
        *,
        embeddings: EmbeddingRuntime | None,
        telemetry: Telemetry,
        held: Callable[[], list[HeldTool]] | None = None,
        client: ClientKind | None = None,
        evidence: EvidenceSource | None = None,
    ) -> None:
        self.agent = agent
        self._settings = settings
        self._same: dict[str, bool] = {}
        self.client = client
        """The client kind an agent's handshake announced (None: the profile's own view)."""
        profile = settings.agent(agent)
        self.rules = ProfileFilter.from_profile(profile)
        self.search_settings = effective_tool_search(settings.mcp.tool_search, profile, client=client)
        self.prefix, _limit, self.provider = session_rules(profile, settings.gateway.server_name, client)
        self.budget = name_budget(self.prefix)
        if self.budget < MIN_NAME_LENGTH:
            raise ConfigError(
                f"agents.{agent}: its client's tool prefix {self.prefix!r} leaves {self.budget} of 64 characters "
                f"for tool names, fewer than {MIN_NAME_LENGTH}; shorten gateway.server_name or agents.{agent}.tool_prefix"
            )
        self._catalog = catalog
        self._held = held
        self._planner = planner
        self._visible: tuple[str, ToolCatalog] | None = None
        self._names: tuple[str, ClientNames] | None = None
        self.engine = ToolSearchEngine(
            self.visible, self.search_settings, embeddings=embeddings, telemetry=telemetry, evidence=evidence
        )

    def visible(self) -> ToolCatalog:
        full = self._catalog()
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

    def own_name(self, name: str) -> tuple[str, str] | None:
        """(server, the tool's own name there) of a qualified name this profile sees (search traces)."""
        entry = self.visible().lookup(name)
        return (entry.server, entry.tool) if entry is not None else None

    def qualified(self, name: str) -> str | None:
        """The qualified name behind a name this client was given (None: not one of them)."""
        return self.names().qualified(name)

    def same_rules(self, kind: ClientKind) -> bool:
        """Whether a client of `kind` gets what this view gives (same prefix, tool limit and provider)."""
        same = self._same.get(kind)
        if same is None:
            profile = self._settings.agent(self.agent)
            theirs = session_rules(profile, self._settings.gateway.server_name, kind)
            limit = effective_tool_search(self._settings.mcp.tool_search, profile, client=kind).max_tools
            same = self._same[kind] = (self.prefix, self.search_settings.max_tools, self.provider) == (
                theirs[0],
                limit,
                theirs[2],
            )
        return same

    def held(self, name: str) -> str | None:
        """Why `name` (qualified, the server's own, or the short name this client would have been given) is
        a tool held back from this profile, or None: a held tool the profile could not see stays unknown."""
        for tool in self._held() if self._held is not None else ():
            if not tool.held or not self.rules.allows_server(tool.server):
                continue
            if not self.rules.admits(tool.name, tool.server, tool.tool):
                continue
            short = (
                hashed_name(tool.server, tool.tool, max_length=self.budget) if len(tool.name) > self.budget else None
            )
            if name in (tool.name, tool.tool, short):
                return tool.reason
        return None

    def plan(self, task: str, task_id: str | None, recent: list[str], *, record: bool) -> SpawnPlan:
        """This profile's plan for a task over the current catalog (`record`: count the spawn in telemetry)."""
        return self._planner.plan(
            task, self.agent, self._catalog(), recent_tools=recent, task_id=task_id, record=record, client=self.client
        )

    def search_mode(self) -> bool:
        """Whether this profile's agents get tool_search (the plan's mode; pins never change it)."""
        return self._planner.plan_tools(self.visible(), self.search_settings).mode == "search"


@dataclass
class SpawnContext:
    """One endpoint's state: a spawn (or the gateway's own profile), its plan, its meta-tools and session."""

    id: str | None
    """The spawn's id; None for the gateway's own endpoint."""
    expires: float | None
    """Unix time its credential expires (None: the gateway's own profile); its state is dropped then."""
    task: str
    task_id: str
    view: AgentView
    meta: MetaTools
    recent: list[str]
    """The task's recently called tools, pinned in its plan (from the spawn's credential)."""
    plan: SpawnPlan | None = None
    listed: tuple[str, list[types.Tool]] | None = None
    """The tools last listed to this endpoint, by plan fingerprint."""
    legacy_sessions: dict[str, ServerSession] = field(default_factory=dict)
    """Handshake-era client sessions, told of tool-list changes by notification."""
    opened: float = field(default_factory=time.monotonic)
    session: SessionRecorder | None = None
    """A spawn's rounds and requests (session accounting); None for the gateway's own endpoint."""
    variants: dict[str, SpawnContext] = field(default_factory=dict)
    """This endpoint as seen by clients whose handshake named a kind with stricter rules (`for_client`)."""
    make_variant: Callable[[SpawnContext, ClientKind], SpawnContext] | None = None
    active: SpawnContext | None = None
    """The variant that served the latest request (its plan is the one the agent used)."""
    offload: Offload | None = None
    """Where its work runs: the spawn's share of the gateway's worker pool (`server._spawn_share`)."""

    def for_client(self, kind: ClientKind | None) -> SpawnContext:
        """This endpoint for a client of `kind` (from its MCP handshake): itself when that client's names and
        limits are no stricter than the profile's, else a variant with the client's name budget, tool
        limit and schema rules, sharing this spawn's session, history and counts."""
        if kind is None or self.make_variant is None:
            return self
        if self.view.same_rules(kind):
            self.active = None
            return self
        variant = self.variants.get(kind)
        if variant is None:
            variant = self.variants[kind] = self.make_variant(self, kind)
        self.active = variant
        return variant

    def listed_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema the tool `name` was last listed with here; None if it was not."""
        tools = self.listed[1] if self.listed is not None else ()
        return next((tool.input_schema for tool in tools if tool.name == name), None)

    def current_plan(self, *, record: bool = False) -> SpawnPlan:
        """The plan for the current catalog, re-planned only when the visible tools change. `record`: count
        the spawn in telemetry (once, where it is opened; not per replica or re-plan)."""
        visible = self.view.visible()
        plan = self.plan
        if plan is None or plan.catalog_version != visible.version:
            plan = self.plan = self.view.plan(self.task, self.task_id or None, self.recent, record=record)
        return plan
