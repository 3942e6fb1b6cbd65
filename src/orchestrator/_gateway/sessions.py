"""The gateway's side of session accounting: what each request was, what a session cost, where it goes.

`server.py` only marks where a tool call starts and ends and where a spawn finishes; this module turns a
call's result into an `Action` (tokens counted with the planner's counter, in a worker thread), a
spawn's plan into its `SessionBasis`, and a finished session into metrics (`Telemetry.record_session`)
and a spawn-log line. The cost model itself is `orchestrator._accounting` (pure).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp.types as types

from .._accounting import Action, SessionBasis, SessionCost, session_cost
from .._planning import CALL_TOOL, EXPAND_TOOLS, TOOL_SEARCH, SpawnPlan, SpawnPlanner
from .._spawnlog import SpawnLog, SpawnRecord
from .._telemetry import Telemetry

if TYPE_CHECKING:
    from .server import _AgentView, _Context

__all__ = ["SessionAccounting"]


class SessionAccounting:
    """Session costs for one gateway's spawns.

    Args:
        planner: the gateway's planner (its token counters and cached plans).
        telemetry: where finished sessions are recorded.
        spawn_log: where finished sessions are appended (None: nowhere). Closed by `close()`.
    """

    def __init__(self, planner: SpawnPlanner, telemetry: Telemetry, spawn_log: SpawnLog | None) -> None:
        self.planner = planner
        self.telemetry = telemetry
        self.spawn_log = spawn_log

    def describe(
        self, view: _AgentView, name: str, arguments: Mapping[str, Any] | None, result: types.CallToolResult
    ) -> Action:
        """What one tools/call was and returned, its tokens counted (CPU work: run it in the worker pool)."""
        counter = self.planner.counter(view.search_settings.tokenizer)
        text = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
        result_tokens = counter.text(text) if text else 0
        structured = result.structured_content if isinstance(result.structured_content, dict) else {}
        error = bool(result.is_error)
        if name == TOOL_SEARCH:
            hits = structured.get("hits")
            found = len(hits) if isinstance(hits, list) and not error else None
            return Action("search", result_tokens=result_tokens, hits=found, error=error)
        if name == EXPAND_TOOLS:
            definitions = structured.get("tools") if not error else None
            schemas = tuple(
                (str(definition.get("name")), counter.definition(definition))
                for definition in (definitions if isinstance(definitions, list) else [])
                if isinstance(definition, dict)
            )
            return Action("expand", result_tokens=result_tokens, tools=schemas, error=error)
        tool = arguments.get("name") if name == CALL_TOOL and isinstance(arguments, Mapping) else name
        entry = view.visible().lookup(tool) if isinstance(tool, str) else None
        called = ((entry.name, counter.entry(entry)),) if entry is not None else ()
        return Action("call", result_tokens=result_tokens, tools=called, error=error)

    def basis(self, view: _AgentView, plan: SpawnPlan) -> SessionBasis:
        """The per-round cost of the spawn's profile in each mode. For a full-mode spawn, search mode's
        is planned with the same pins (cached by the planner, so asking again is cheap)."""
        if plan.mode == "search":
            search_tokens = plan.prompt_tokens
        else:
            forced = view.search_settings.model_copy(
                update={"enabled": True, "threshold_tokens": 0, "pinned": list(plan.pinned)}
            )
            search_tokens = self.planner.plan_tools(view.visible(), forced).prompt_tokens
        return SessionBasis(plan.mode, plan.full_tokens, search_tokens, tuple(plan.pinned))

    def cost(self, context: _Context, plan: SpawnPlan) -> SessionCost | None:
        """The session so far (None for the gateway's own endpoint, which keeps no session)."""
        recorder = context.session
        if recorder is None:
            return None
        return session_cost(self.basis(context.view, plan), recorder.batches(), dropped_actions=recorder.dropped)

    def finish(self, context: _Context, plan: SpawnPlan, ended: str) -> SessionCost | None:
        """Record a finished session: metrics by agent and mode, and a spawn-log line when the log is on.
        Called once per spawn (the caller removes the spawn first)."""
        recorder = context.session
        if recorder is None or context.id is None:
            return None
        basis = self.basis(context.view, plan)
        batches = recorder.batches()
        cost = session_cost(basis, batches, dropped_actions=recorder.dropped)
        agent = context.view.agent
        self.telemetry.record_session(
            cost.mode,
            agent,
            rounds=cost.rounds,
            hits=cost.searches - cost.misses,
            misses=cost.misses,
            expands=cost.expands,
            calls=cost.calls,
            tokens_sent=cost.tokens,
            tokens_counterfactual=cost.counterfactual,
        )
        if self.spawn_log is not None:
            self.spawn_log.append(
                SpawnRecord(
                    id=context.id,
                    agent=agent,
                    task_id=context.task_id,
                    mode=plan.mode,
                    ended=ended,
                    opened_at=time.time() - (time.monotonic() - context.opened),
                    duration_s=time.monotonic() - context.opened,
                    catalog_version=plan.catalog_version,
                    threshold_tokens=context.view.search_settings.threshold_tokens,
                    basis=basis,
                    batches=batches,
                    session=cost.to_dict(),
                    lists=recorder.lists,
                )
            )
        return cost

    def close(self) -> None:
        """Write what the spawn log has queued and stop its writer."""
        if self.spawn_log is not None:
            self.spawn_log.close()
