"""What a server's connection reports: its state, its circuit, the tools it dropped, one status snapshot.

Small public data types shared by the supervisor (`_connection`), the session (`_session`), the manager
and the CLI; they hold no behaviour beyond formatting, so anything may import them. docs/servers.md
draws the state machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._pins import HeldTool

__all__ = ["ERROR_LIMIT", "SERVING", "Circuit", "DroppedTool", "ServerState", "ServerStatus"]

ERROR_LIMIT = 400
"""Longest error message kept per server, one line."""


class ServerState(StrEnum):
    STARTING = "starting"
    """The first start is under way; cached tools (warm start) are offered; calls wait for it."""
    READY = "ready"
    """Connected and listed: calls are routed."""
    DEGRADED = "degraded"
    """Connected and calls are routed, but something is wrong: tools were dropped, a health probe went
    unanswered, or tool changes are no longer followed; `error` says what."""
    RESTARTING = "restarting"
    """A server that was up died and is being restarted (circuit closed); its tools stay offered and
    calls wait for it."""
    FAILED = "failed"
    """Circuit open: it never came up, or its restarts keep failing. `error` says why; it is retried at
    `next_retry_at`, and calls fail at once saying when. A server that was up keeps its tools offered."""
    STOPPED = "stopped"
    """Closed by the manager, or disabled in the config."""


SERVING = (ServerState.READY, ServerState.DEGRADED)
"""States in which calls are routed."""


class Circuit(StrEnum):
    CLOSED = "closed"
    """Connected, or restarting quickly after a death: calls wait for the server."""
    OPEN = "open"
    """Failing: calls fail at once until the next try."""
    HALF_OPEN = "half-open"
    """The next try of an open circuit is under way; it closes the circuit if it comes up."""


@dataclass(frozen=True)
class DroppedTool:
    """A tool a server listed that could not be offered."""

    name: str
    """The tool's name, `#<position>` in the listing when it has no usable name, or `#<max_tools>+` for
    every tool past the server's `max_tools` (one entry)."""
    reason: str
    """One line: what is wrong with it (`inputSchema is a string, not an object`...)."""


@dataclass(frozen=True)
class ServerStatus:
    """A snapshot of one server, for `orchestrator servers` and health checks."""

    name: str
    transport: str
    state: ServerState
    tools: int
    """Tools currently offered (live, cached while starting, last known while restarting or failed after
    having been up); 0 when never up, or stopped."""
    error: str | None
    """Why it failed or is restarting, or what is degraded; None when all is well."""
    listed_at: datetime | None
    """When the tool list was last fetched (or, for a cached list, written); UTC."""
    from_cache: bool
    """True while the tool list comes from the warm-start cache rather than the live server."""
    restarts: int = 0
    """Failures in a row so far (sessions that did not start or did not stay up 30 s)."""
    protocol_version: str | None = None
    """Negotiated MCP protocol version of the current session."""
    circuit: Circuit = Circuit.CLOSED
    next_retry_at: datetime | None = None
    """When the next (re)start is due (UTC); None while connected or while a try is under way."""
    dropped_tools: tuple[DroppedTool, ...] = ()
    """Tools of the last listing that could not be offered, each with its reason."""
    line_faults: Mapping[str, int] = field(default_factory=dict, hash=False)
    """stdio: stdout lines skipped (or repaired, `invalid_utf8`) since the manager started, by reason."""
    held_tools: tuple[HeldTool, ...] = ()
    """Tools of its listing held back from agents, each with its reason (`_pins.py`)."""

    @property
    def retry_in_s(self) -> float | None:
        """Seconds until `next_retry_at` (0 when due), or None."""
        if self.next_retry_at is None:
            return None
        return max(0.0, (self.next_retry_at - datetime.now(UTC)).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for `servers --json` and `/health`."""
        return {
            "name": self.name,
            "transport": self.transport,
            "state": str(self.state),
            "tools": self.tools,
            "error": self.error,
            "circuit": str(self.circuit),
            "restarts": self.restarts,
            "next_retry_at": self.next_retry_at.isoformat() if self.next_retry_at else None,
            "retry_in_s": None if self.retry_in_s is None else round(self.retry_in_s, 1),
            "dropped_tools": [{"name": tool.name, "reason": tool.reason} for tool in self.dropped_tools],
            "line_faults": dict(self.line_faults),
            "held_tools": [tool.as_dict() for tool in self.held_tools],
            "listed_at": self.listed_at.isoformat() if self.listed_at else None,
            "from_cache": self.from_cache,
            "protocol_version": self.protocol_version,
        }
