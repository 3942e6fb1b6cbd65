"""OpenTelemetry metrics and traces for search, expand, spawn and calls.

PLACEHOLDER API (the telemetry issue fills it in): the functions below are the only way the rest of
the project records events, each called once where the event happens. Until set up they do nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

SearchOutcome = Literal["hit", "miss"]
CallResult = Literal["ok", "tool_error", "timeout", "transport_error"]


def record_search(outcome: SearchOutcome, duration_s: float, hits: int) -> None:
    """One tool_search that returned tools (hit) or none (miss)."""


def record_expand(count: int) -> None:
    """One expand_tools call that handed over `count` schemas."""


def record_spawn(mode: str, agent: str, tokens_sent: int, tokens_saved: int) -> None:
    """One spawn planned in `mode` ("full" or "search")."""


def record_tool_call(server: str, tool: str, result: CallResult, duration_s: float) -> None:
    """One tools/call routed to `server`."""


def record_catalog(server: str, tools: int, tokens: int) -> None:
    """Current catalog size of one server (gauge)."""


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span around project work (search, expand, spawn)."""
    yield
