"""Learning from use inside a gateway: what its spawns search for and call makes later spawns better.

    GatewayLearning(settings, store, ...)   the trace store, one recorder listener per endpoint, the evidence
                                            every profile's search engine shares, task memory for similar-task
                                            pins, and the housekeeping that forgets tools that left the catalog

Everything lives in the gateway's store, so replicas sharing it learn from each other. All of it is off when
`mcp.tool_search.traces.enabled` is false; similar-task pins also follow `pin_similar_tasks`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from .._config import Settings
from .._errors import SemanticUnavailable
from .._events import EventListener
from .._planning import RECENT_TOOLS_LIMIT, SpawnPlanner
from .._store import Store
from .._task_memory import TaskMemory
from .._traces import TraceRecorder, TraceStore
from ..protocols.mcp._catalog import ToolCatalog
from ..search._embedding import EmbeddingRuntime
from ..search._embedding.vectors import ToolVectors
from ..search._evidence import TraceEvidence, trace_vectors
from .views import AgentView, SpawnContext

__all__ = ["GatewayLearning"]

log = logging.getLogger(__name__)


class GatewayLearning:
    """A gateway's learning from use (see the module docstring).

    Args:
        settings: `mcp.tool_search.traces`, the configured servers (for forgetting).
        store: the gateway's store (shared by its replicas).
        embeddings: the gateway's embedding runtime (vector evidence for hybrid profiles); None: lexical only.
        planner: counts the schema tokens of similar-task pins.
        view: the gateway's agent views, by profile name.
        traces: another trace store (default: in `store`).
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        embeddings: EmbeddingRuntime | None,
        planner: SpawnPlanner,
        view: Callable[[str], AgentView],
        traces: TraceStore | None = None,
    ) -> None:
        learning = settings.mcp.tool_search.traces
        self._settings = settings
        self._embeddings = embeddings
        self._planner = planner
        self._view = view
        self.traces = (traces or TraceStore(store, learning)) if learning.enabled else None
        self.recorder = TraceRecorder(self.traces) if self.traces is not None else None
        self._local = f"local-{secrets.token_hex(6)}"
        """The spawn the gateway's own endpoint counts as, whatever client kinds reach it (each has its view)."""
        self.evidence = TraceEvidence(self.traces.load, learning, vectors=self._vectors) if self.traces else None
        self.task_memory = TaskMemory(store, learning) if learning.enabled and learning.pin_similar_tasks else None

    def _vectors(self) -> ToolVectors:
        if self._embeddings is None:
            raise SemanticUnavailable("disabled", "the gateway has no embedding runtime")
        return trace_vectors(self._embeddings)

    def listener(self, view: AgentView) -> EventListener | None:
        """A new endpoint's trace recorder (None when learning is off)."""
        return self.recorder.listener(view.own_name, local=self._local) if self.recorder is not None else None

    # ------------------------------------------------------------------ plans

    def similar_task_pins(self, task: str, task_id: str, agent: str, recent: list[str]) -> list[str]:
        """Tools similar earlier tasks called, for a new spawn of `agent` in search mode: visible to it, not
        already pinned, their schemas within its `directory_budget_tokens`, at most RECENT_TOOLS_LIMIT pins."""
        if self.task_memory is None:
            return []
        view = self._view(agent)
        if not view.search_mode():
            return []
        visible = view.visible()
        counter = self._planner.counter(view.search_settings.tokenizer)
        budget = view.search_settings.directory_budget_tokens
        chosen: list[str] = []
        for name in self.task_memory.similar_tools(task, exclude=task_id):
            entry = visible.lookup(name)
            if entry is None or entry.name in recent or entry.name in chosen:
                continue
            if len(recent) + len(chosen) >= RECENT_TOOLS_LIMIT:
                break
            cost = counter.entry(entry)
            if cost <= budget:
                chosen.append(entry.name)
                budget -= cost
        return chosen

    def remember_task(self, context: SpawnContext) -> None:
        """Task memory learns what a finished spawn called (when this replica knows its task's text)."""
        if self.task_memory is not None and context.id is not None and context.task:
            variants = context.variants.values()  # a handshake-named client's calls went through its variant
            called = [*context.meta.stats.called, *(name for each in variants for name in each.meta.stats.called)]
            self.task_memory.learn(context.task_id, context.task, context.id, called)

    # ------------------------------------------------------------------ housekeeping

    def forget_departed_tools(self, catalog: ToolCatalog) -> int:
        """Drop the traces of tools that left the catalog: gone from a server that is still listed, or of a
        server no longer configured (a configured server that is down keeps them, until retention). Also
        applies retention and `max_total`. Returns how many traces were dropped; reads and writes the store."""
        if self.traces is None:
            return 0
        pairs = {(server, entry.tool) for entry in catalog for server in entry.servers}
        listed = set(catalog.servers())
        configured = set(self._settings.mcp.servers)

        def keep(server: str, tool: str) -> bool:
            return (server, tool) in pairs or (server not in listed and server in configured)

        return self.traces.prune(keep)

    def refresh(self, catalog: ToolCatalog) -> None:
        """Prune the traces and read them again, so the first searches already use what was learned."""
        try:
            self.forget_departed_tools(catalog)
        except Exception:  # boundary: pruning traces is housekeeping; a store that fails must not stop warming
            log.warning("pruning search traces failed", exc_info=True)
        if self.evidence is not None:
            self.evidence.refresh()
