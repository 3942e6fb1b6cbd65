"""Meta-tool events as metrics: each search, expand and search-mode call an agent makes is counted here, once.

`MetaTools` hands every `MetaEvent` to `telemetry_listener(telemetry)`: a search that ran becomes one
`mcp_tool_search_invocations` point (`hit` or `miss`, with the ranking that answered and its fallback) with
its duration and hit count; an expand that handed over schemas one `expand` point. A corrective error is not
a search outcome: it is counted in the spawn's `errors`. Tool calls are counted where they reach a server
(`MCPManager.call_tool`), whatever surface made them; here, a call made in search mode is also counted by
where its tool stood in the agent's latest search (`mcp_tool_search_call_rank`): hit@k on live traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._events import CallEvent, EventListener, ExpandEvent, MetaEvent, SearchEvent, rank_label

if TYPE_CHECKING:
    from .instruments import Telemetry

__all__ = ["telemetry_listener"]


def telemetry_listener(telemetry: Telemetry, search_mode: bool | Callable[[], bool] = False) -> EventListener:
    """An event listener recording searches and expands on `telemetry`, and, while `search_mode` (a flag or
    a callable asked at each call), each call dispatched to a server by the called tool's rank in the
    latest search this listener heard (one listener per agent)."""
    latest: dict[str, int] | None = None

    def record(event: MetaEvent) -> None:
        nonlocal latest
        if isinstance(event, CallEvent):
            if event.server is not None and (search_mode() if callable(search_mode) else search_mode):
                name = event.tool[0] if event.tool is not None else event.name
                telemetry.record_call_rank("unsearched" if latest is None else rank_label(latest.get(name)))
            return
        if event.error is not None:
            return
        if isinstance(event, SearchEvent):
            latest = {hit.name: hit.rank for hit in event.hits}
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
