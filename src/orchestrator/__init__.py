"""orchestrator: the MCP subsystem of an orchestrator that spawns a fresh agent per task."""

from __future__ import annotations

from .config import Settings, load_settings
from .errors import (
    ConfigError,
    ExpandError,
    OrchestratorError,
    SearchQueryError,
    ServerError,
    TokenizerError,
    ToolCallError,
    ToolCallTimeout,
    ToolExecutionError,
    ToolNotFoundError,
    TransportError,
)

__all__ = [
    "ConfigError",
    "ExpandError",
    "OrchestratorError",
    "SearchQueryError",
    "ServerError",
    "Settings",
    "TokenizerError",
    "ToolCallError",
    "ToolCallTimeout",
    "ToolExecutionError",
    "ToolNotFoundError",
    "TransportError",
    "load_settings",
]

__version__ = "0.1.0"
