"""Telemetry: the instruments (`Telemetry`, instruments.py) and the exporter wiring (`setup_telemetry`)."""

from __future__ import annotations

from .events import telemetry_listener
from .exporters import setup_telemetry, telemetry_session
from .instruments import (
    CALL_RESULTS,
    CATALOG_TOKENS,
    CATALOG_TOOLS,
    CLIENT_OPERATION_DURATION,
    FALLBACK_KINDS,
    METER_NAME,
    RANKINGS,
    SEARCH_DURATION,
    SEARCH_EXPANDED_TOOLS,
    SEARCH_INVOCATIONS,
    SEARCH_OUTCOMES,
    SEARCH_RESULTS,
    SPAWN_MODES,
    SPAWN_TOKENS_SAVED,
    SPAWN_TOKENS_SENT,
    SPAWNS,
    TOOL_CALLS,
    CallResult,
    SearchOutcome,
    SpawnMode,
    Telemetry,
)

__all__ = [
    "CALL_RESULTS",
    "CATALOG_TOKENS",
    "CATALOG_TOOLS",
    "CLIENT_OPERATION_DURATION",
    "FALLBACK_KINDS",
    "METER_NAME",
    "RANKINGS",
    "SEARCH_DURATION",
    "SEARCH_EXPANDED_TOOLS",
    "SEARCH_INVOCATIONS",
    "SEARCH_OUTCOMES",
    "SEARCH_RESULTS",
    "SPAWNS",
    "SPAWN_MODES",
    "SPAWN_TOKENS_SAVED",
    "SPAWN_TOKENS_SENT",
    "TOOL_CALLS",
    "CallResult",
    "SearchOutcome",
    "SpawnMode",
    "Telemetry",
    "setup_telemetry",
    "telemetry_listener",
    "telemetry_session",
]
