"""orchestrator: the MCP subsystem of an orchestrator that spawns a fresh agent per task.

Everything a program embeds is imported from here; every other module is internal (its name starts
with `_`, as in httpx) and may change without notice. Adding a name to `__all__` is a deliberate API
decision, and `tests/test_exported_members.py` holds `__all__` to what is exported.

    from orchestrator import MCPManager, SpawnPlanner, ToolCatalog, load_settings

    settings = load_settings("bernstein.yaml")
    async with MCPManager(settings) as manager:
        plan = SpawnPlanner(settings).plan("fix the flaky test", "coder", manager.catalog())

Names resolve on first use (PEP 562), so `import orchestrator` stays cheap: the CLI's `--help` and
`config check` never pay for the MCP SDK or the embedding runtime.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._version import __version__

# Public name -> the internal module that defines it.
_EXPORTS: dict[str, str] = {
    # settings
    "AgentProfile": "._config",
    "EmbeddingSettings": "._config",
    "GatewaySettings": "._config",
    "LoadedConfig": "._config",
    "MCPSettings": "._config",
    "OTLPSettings": "._config",
    "PrometheusSettings": "._config",
    "ServerConfig": "._config",
    "Settings": "._config",
    "StoreSettings": "._config",
    "TelemetrySettings": "._config",
    "ToolSearchSettings": "._config",
    "TraceSettings": "._config",
    "load_config": "._config",
    "load_settings": "._config",
    # errors
    "CatalogError": "._errors",
    "ConfigError": "._errors",
    "ExpandError": "._errors",
    "OrchestratorError": "._errors",
    "SearchQueryError": "._errors",
    "SemanticUnavailable": "._errors",
    "ServerError": "._errors",
    "TokenizerError": "._errors",
    "ToolCallError": "._errors",
    "ToolCallTimeout": "._errors",
    "ToolExecutionError": "._errors",
    "ToolNotFoundError": "._errors",
    "TransportError": "._errors",
    "StoreError": "._store",
    "CredentialError": "._gateway.auth",
    "SpawnClosedError": "._gateway.auth",
    "SpawnLimitError": "._gateway.auth",
    "GatewayAuthError": "._gateway.client",
    # the MCP manager
    "MCPManager": ".protocols.mcp._manager",
    "Listener": ".protocols.mcp._manager",
    "LogSink": ".protocols.mcp._session",
    "Circuit": ".protocols.mcp._status",
    "DroppedTool": ".protocols.mcp._status",
    "ServerState": ".protocols.mcp._status",
    "ServerStatus": ".protocols.mcp._status",
    "SchemaLimits": ".protocols.mcp._schemas",
    "TransportFactory": ".protocols.mcp._transports",
    # pinned tool definitions and the detector of instructions in tool text
    "ToolGuard": ".protocols.mcp._pins",
    "HeldTool": ".protocols.mcp._pins",
    "HeldKind": ".protocols.mcp._pins",
    "PinBook": ".protocols.mcp._pins",
    "Finding": ".protocols.mcp._poisoning",
    "scan_tools": ".protocols.mcp._poisoning",
    # the catalog and tool search
    "ToolCatalog": ".protocols.mcp._catalog",
    "ToolEntry": ".protocols.mcp._catalog",
    "ToolSearchEngine": ".search._engine",
    "SearchHit": ".search._engine",
    "Ranked": ".search._engine",
    "ScoreBlend": ".search._blend",
    "EvidenceBlend": ".search._blend",
    "EmbeddingRuntime": ".search._embedding",
    "MultilingualEncoder": ".search._embedding",
    "SemanticScorer": ".search._embedding",
    "ToolVectors": ".search._embedding",
    "BlendParts": ".search._blend",
    "TokenCounter": "._tokens",
    # planning
    "ToolPlan": "._planning",
    "SpawnPlan": "._planning",
    "SpawnPlanner": "._planning",
    "ProfileFilter": "._planning",
    "TaskHistory": "._history",
    # learning from use
    "Trace": "._traces",
    "TraceStore": "._traces",
    "TraceStats": "._traces",
    "TraceRecorder": "._traces",
    "parse_trace": "._traces",
    "redact": "._redaction",
    "TraceEvidence": ".search._evidence",
    "LearnedEvidence": ".search._evidence",
    "EvidenceSource": ".search._evidence",
    # meta-tools, their events and provider formats
    "MetaTools": "._meta_tools",
    "MetaStats": "._meta_tools",
    "CallRelay": "._meta_tools",
    "Handled": "._meta_tools",
    "Offload": "._meta_tools",
    "ToolRouter": "._meta_tools",
    "Visibility": "._meta_tools",
    "meta_tool_definitions": "._meta_tools",
    "MetaEvent": "._events",
    "SearchEvent": "._events",
    "ExpandEvent": "._events",
    "CallEvent": "._events",
    "Caller": "._events",
    "RankedTool": "._events",
    "EventListener": "._events",
    "render_tools": "._formats",
    "ClientKind": "._clients",
    "Definition": "._formats",
    "ProviderFormat": "._formats",
    # the gateway and the state replicas share
    "Gateway": "._gateway.server",
    "Upstream": "._gateway.views",
    "SpawnHandle": "._gateway.spawns",
    "GatewayClient": "._gateway.client",
    "Credentials": "._gateway.auth",
    "SpawnClaims": "._gateway.auth",
    "Store": "._store",
    "open_store": "._store",
    "SpawnLog": "._spawnlog",
    "SpawnLogStore": "._spawnlog",
    "SpawnRecord": "._spawnlog",
    "Action": "._accounting",
    "ActionKind": "._accounting",
    "Batches": "._accounting",
    "SessionBasis": "._accounting",
    "SessionCost": "._accounting",
    # telemetry
    "Telemetry": "._telemetry",
    "setup_telemetry": "._telemetry",
    "CallResult": "._telemetry",
    "SearchOutcome": "._telemetry",
}

__all__ = sorted(_EXPORTS)

if _TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports on first use
    from ._accounting import Action, ActionKind, Batches, SessionBasis, SessionCost
    from ._clients import ClientKind
    from ._config import (
        AgentProfile,
        EmbeddingSettings,
        GatewaySettings,
        LoadedConfig,
        MCPSettings,
        OTLPSettings,
        PrometheusSettings,
        ServerConfig,
        Settings,
        StoreSettings,
        TelemetrySettings,
        ToolSearchSettings,
        TraceSettings,
        load_config,
        load_settings,
    )
    from ._errors import (
        CatalogError,
        ConfigError,
        ExpandError,
        OrchestratorError,
        SearchQueryError,
        SemanticUnavailable,
        ServerError,
        TokenizerError,
        ToolCallError,
        ToolCallTimeout,
        ToolExecutionError,
        ToolNotFoundError,
        TransportError,
    )
    from ._events import Caller, CallEvent, EventListener, ExpandEvent, MetaEvent, RankedTool, SearchEvent
    from ._formats import Definition, ProviderFormat, render_tools
    from ._gateway.auth import CredentialError, Credentials, SpawnClaims, SpawnClosedError, SpawnLimitError
    from ._gateway.client import GatewayAuthError, GatewayClient
    from ._gateway.server import Gateway
    from ._gateway.spawns import SpawnHandle
    from ._gateway.views import Upstream
    from ._history import TaskHistory
    from ._meta_tools import (
        CallRelay,
        Handled,
        MetaStats,
        MetaTools,
        Offload,
        ToolRouter,
        Visibility,
        meta_tool_definitions,
    )
    from ._planning import ProfileFilter, SpawnPlan, SpawnPlanner, ToolPlan
    from ._redaction import redact
    from ._spawnlog import SpawnLog, SpawnLogStore, SpawnRecord
    from ._store import Store, StoreError, open_store
    from ._telemetry import CallResult, SearchOutcome, Telemetry, setup_telemetry
    from ._tokens import TokenCounter
    from ._traces import Trace, TraceRecorder, TraceStats, TraceStore, parse_trace
    from .protocols.mcp._catalog import ToolCatalog, ToolEntry
    from .protocols.mcp._manager import Listener, MCPManager
    from .protocols.mcp._pins import HeldKind, HeldTool, PinBook, ToolGuard
    from .protocols.mcp._poisoning import Finding, scan_tools
    from .protocols.mcp._schemas import SchemaLimits
    from .protocols.mcp._session import LogSink
    from .protocols.mcp._status import Circuit, DroppedTool, ServerState, ServerStatus
    from .protocols.mcp._transports import TransportFactory
    from .search._blend import BlendParts, EvidenceBlend, ScoreBlend
    from .search._embedding import EmbeddingRuntime, MultilingualEncoder, SemanticScorer, ToolVectors
    from .search._engine import Ranked, SearchHit, ToolSearchEngine
    from .search._evidence import EvidenceSource, LearnedEvidence, TraceEvidence


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
