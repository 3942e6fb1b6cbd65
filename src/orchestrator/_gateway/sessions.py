"""The gateway's side of session accounting: what a spawn's session cost, and where it goes.

Each tools/call request of a spawn is one `Action` (`_accounting.action_of` of the request's `MetaEvent`),
grouped into rounds by the spawn's `SessionRecorder` (the handlers mark where each request starts and
ends). This module turns a spawn's plan into its `SessionBasis` and a finished session into metrics
(`Telemetry.record_session`) and a spawn-log line. The cost model itself is `orchestrator._accounting`
(pure).
"""

from __future__ import annotations

import time

from .._accounting import SessionBasis, SessionCost, session_cost
from .._planning import SpawnPlan, SpawnPlanner
from .._spawnlog import SpawnLog, SpawnRecord
from .._telemetry import Telemetry
from .views import AgentView, SpawnContext

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

    def basis(self, view: AgentView, plan: SpawnPlan) -> SessionBasis:
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

    def cost(self, context: SpawnContext, plan: SpawnPlan) -> SessionCost | None:
        """The session so far (None for the gateway's own endpoint, which keeps no session)."""
        recorder = context.session
        if recorder is None:
            return None
        return session_cost(self.basis(context.view, plan), recorder.batches(), dropped_actions=recorder.dropped)

    def finish(self, context: SpawnContext, plan: SpawnPlan, ended: str) -> SessionCost | None:
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
