"""Meta-tool events as metrics: each search and expand an agent makes is counted here, once.

`MetaTools` hands every `MetaEvent` to `telemetry_listener(telemetry)`: a search that ran becomes one
`mcp_tool_search_invocations` point (`hit` or `miss`, with the ranking that answered and its fallback) with
its duration and hit count; an expand that handed over schemas one `expand` point. A corrective error is not
a search outcome: it is counted in the spawn's `errors`. Tool calls are counted where they reach a server
(`MCPManager.call_tool`), whatever surface made them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._events import EventListener, ExpandEvent, MetaEvent, SearchEvent

if TYPE_CHECKING:
    from .instruments import Telemetry

__all__ = ["telemetry_listener"]


def telemetry_listener(telemetry: Telemetry) -> EventListener:
    """An event listener recording searches and expands on `telemetry`."""

    def record(event: MetaEvent) -> None:
        if event.error is not None:
            return
        if isinstance(event, SearchEvent):
            telemetry.record_search(
                "hit" if event.hits else "miss",
                event.duration_s,
                len(event.hits),
                ranking=event.ranking,
                fallback=event.fallback,
            )
        elif isinstance(event, ExpandEvent):
            telemetry.record_expand(len(event.tools))

    return record
