"""The meta-tool event: one typed record per `tool_search`, `expand_tools` and `call_tool`.

`MetaTools` (`_meta_tools.py`) emits one `MetaEvent` for every request it answers, in-process and through
the gateway alike. Everything that counts or learns reads these events instead of the JSON handed to the
agent: telemetry (search and expand metrics), the per-spawn counts kept in the store, session accounting
and the spawn log (each event becomes one `Action`), and the in-process `MetaStats`. Each request is
counted once, where the event is consumed.

An event says who asked (`Caller`), what was asked, what came back (ranked hits, expanded tools, the tool
called and the server that ran it), the tokens of the result the agent reads, the outcome and how long it
took. Events never carry tool arguments or result text: only names, counts and the request text of a
search (which stays in process; telemetry attributes never see it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CallEvent",
    "Caller",
    "EventListener",
    "ExpandEvent",
    "MetaEvent",
    "RankedTool",
    "SearchEvent",
    "rank_label",
]


@dataclass(frozen=True)
class Caller:
    """Who made a request: the agent profile, and for a gateway spawn its id and task."""

    agent: str = "default"
    spawn: str | None = None
    """The spawn's id (None: the gateway's own endpoint, or an in-process API loop)."""
    task_id: str | None = None


@dataclass(frozen=True)
class RankedTool:
    """One tool a search returned, at its rank."""

    name: str
    """Qualified name, as the agent was given it in the hit."""
    server: str
    tool: str
    """The tool's own name on `server`."""
    rank: int
    """1 for the first hit."""
    score: float


@dataclass(frozen=True, kw_only=True)
class MetaEvent:
    """What every meta-tool request has in common; see the subclasses for what each kind adds."""

    caller: Caller
    outcome: str
    """search: `hit` or `miss`; expand: `ok`; call: `ok`, or `tool_error` when the tool answered with an
    error result. `error` for every kind when the meta-tool answered with a corrective error."""
    error: str | None = None
    """The corrective error's kind (`invalid_arguments`, `unknown_tool`, `hidden_tool`, `too_many`,
    `invalid_query`, `unavailable`, `call_failed`, `tool_error`), None when there was none."""
    result_tokens: int = 0
    """Tokens of the result text the agent reads (the counting rule of `_tokens.py`)."""
    started: float = 0.0
    """When the request arrived, in `time.monotonic()` seconds."""
    duration_s: float = 0.0

    @property
    def is_error(self) -> bool:
        """The agent got an error result: a corrective error, or a tool that reported one."""
        return self.error is not None or self.outcome == "tool_error"


@dataclass(frozen=True, kw_only=True)
class SearchEvent(MetaEvent):
    """One `tool_search`."""

    kind: Literal["search"] = "search"
    query: str = ""
    """The request text (empty when the agent sent none or not a string)."""
    hits: tuple[RankedTool, ...] = ()
    ranking: Literal["lexical", "hybrid"] = "lexical"
    """The ranking that answered."""
    fallback: str | None = None
    """Why hybrid ranking was asked for and lexical answered (one of telemetry's FALLBACK_KINDS)."""


@dataclass(frozen=True, kw_only=True)
class ExpandEvent(MetaEvent):
    """One `expand_tools`."""

    kind: Literal["expand"] = "expand"
    names: tuple[str, ...] = ()
    """The names asked for, as the agent wrote them."""
    tools: tuple[tuple[str, int], ...] = ()
    """(qualified name, tokens of its definition) of each definition handed over."""


@dataclass(frozen=True, kw_only=True)
class CallEvent(MetaEvent):
    """One tool call: `call_tool`, or an expanded or listed tool called by its own name."""

    kind: Literal["call"] = "call"
    name: str = ""
    """The name the agent called (its client's short name resolved to the qualified one when known)."""
    tool: tuple[str, int] | None = None
    """(qualified name, tokens of its definition) of the tool, once the name resolved to one."""
    server: str | None = None
    """The server the call was routed to; None when it was refused before reaching one."""


EventListener = Callable[[MetaEvent], None]
"""Receives every event of a `MetaTools`; runs where the request's CPU work runs (a gateway's worker
pool), so a listener may write a file but must not block for long."""


def rank_label(rank: int | None) -> str:
    """Where a called tool stood in the search before the call, as metrics and trace statistics group it:
    "1".."5", "6-10", "11+", or "not_found" (None: that search did not return it)."""
    if rank is None:
        return "not_found"
    if rank <= 5:
        return str(rank)
    return "6-10" if rank <= 10 else "11+"
