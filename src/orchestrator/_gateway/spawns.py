"""The spawn registry: opening, serving, counting and closing spawns, across gateway replicas.

A spawn is opened with `POST /spawns`: it gets an id, a signed credential carrying its claims (profile,
task, pins, expiry) and its plan. Any replica that shares the signing key serves it from the credential
alone, building its own `SpawnContext` on first use; what replicas must agree on lives in the store:

    spawns/<id>     the open spawn (counted against `gateway.max_open_spawns` by the gateways holding the
                    signing key it names: a restarted process with a new key does not count its old spawns,
                    whose credentials it cannot verify), until it expires
    stats/<id>      one entry per meta-tool request any replica answered (`event_counts`), summed on read
    revoked/<id>    a closed spawn's credential, refused everywhere until it would have expired (and the
                    clock leeway after that, while it would still verify)

Closing a spawn (`DELETE /spawns/<id>`) revokes its credential, drops its state and records its session
(`sessions.py`). Expired spawns are dropped, their sessions recorded, the next time a spawn is served.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._accounting import SessionCost
from .._config import Settings
from .._errors import OrchestratorError
from .._events import EventListener, MetaEvent
from .._history import TaskHistory
from .._meta_tools import event_counts
from .._planning import SpawnPlan, task_key
from .._store import Store
from .addresses import SERVER_NAME, mcp_config, spawn_path
from .auth import CLOCK_LEEWAY_S, CredentialError, Credentials, SpawnClaims, SpawnClosedError, SpawnLimitError
from .sessions import SessionAccounting
from .views import SpawnContext

__all__ = ["COUNT_KEYS", "ContextFactory", "Finished", "LearnedPins", "SpawnHandle", "SpawnRegistry", "counts_listener"]

log = logging.getLogger(__name__)

SPAWN_ID_BYTES = 8
"""Random bytes of a spawn id (16 hex digits)."""
COUNT_KEYS = ("searches", "expands", "calls", "errors")
"""The numeric meta-tool counts of a spawn (`event_counts`); `called` lists tools besides."""

ContextFactory = Callable[[str | None, float | None, str, str, str, list[str]], SpawnContext]
"""Builds an endpoint's context: (spawn id, expiry, task, task id, agent, recent tools)."""
LearnedPins = Callable[[str, str, str, list[str]], list[str]]
"""Tools to pin for a new spawn beside its task's recent ones: (task, task id, agent, recent) -> names."""
VisibleNames = Callable[[str, list[str]], list[str]]
"""(agent, tool names) -> those the agent's profile may see, in order."""
Finished = Callable[[SpawnContext], None]
"""Hears each spawn this replica finishes (closed, expired, or the gateway stopping)."""


@dataclass(frozen=True)
class SpawnHandle:
    """What a spawn needs to reach its endpoint, and the plan it will see there."""

    id: str
    token: str
    url: str
    agent: str
    task_id: str
    plan: SpawnPlan
    server_name: str = SERVER_NAME
    """The gateway's name in the MCP config (`gateway.server_name`): clients prefix tool names with it."""

    def mcp_config(self) -> dict[str, Any]:
        return mcp_config(self.url, self.token, self.server_name)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "url": self.url,
            "agent": self.agent,
            "task_id": self.task_id,
            "mcp_config": self.mcp_config(),
            "plan": self.plan.to_json(tools=False),
        }


def counts_listener(store: Store, spawn_id: str, expires: float) -> EventListener:
    """Appends each event's counts to the spawn's list in the store, kept until the spawn expires, so the
    replica that closes it reports every replica's work."""

    def append(event: MetaEvent) -> None:
        ttl = expires - time.time()
        if ttl > 0:
            store.append(f"stats/{spawn_id}", event_counts(event), ttl_s=ttl)

    return append


class SpawnRegistry:
    """This replica's spawns, and the store records every replica shares.

    Args:
        settings: `gateway.*` limits and the agent profiles.
        credentials: mints and verifies spawn credentials.
        store: open spawns, their counts and revocations, shared by replicas.
        history: the tasks' recently called tools, pinned in later spawns of the same task.
        sessions: records each finished spawn's session.
        new_context: builds a spawn's context (its view, meta-tools and listeners).
        learned_pins: tools similar earlier tasks called, pinned beside the task's own recent tools.
        visible: which of the task's recent tools the new spawn's profile may see: only those are pinned and
            named in its credential (which its agent can read).
        finished: hears each finished spawn (task memory learns from it).
    """

    def __init__(
        self,
        settings: Settings,
        credentials: Credentials,
        store: Store,
        history: TaskHistory,
        sessions: SessionAccounting,
        new_context: ContextFactory,
        *,
        learned_pins: LearnedPins | None = None,
        visible: VisibleNames | None = None,
        finished: Finished | None = None,
    ) -> None:
        self._settings = settings
        self._learned_pins = learned_pins
        self._visible = visible
        self._finished = finished
        self._credentials = credentials
        self._store = store
        self._history = history
        self._sessions = sessions
        self._new_context = new_context
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()  # counting open spawns and adding one, as one step per process
        self._spawns: dict[str, SpawnContext] = {}  # spawns this replica has served, built from their claims
        self._revoked: dict[str, float] = {}  # spawn id -> expiry: revocations seen (they never come undone)

    def contexts(self) -> list[SpawnContext]:
        """The spawns this replica serves now."""
        with self._lock:
            return list(self._spawns.values())

    @property
    def open_count(self) -> int:
        """Spawns open now on every replica sharing the store and the signing key (reads the store)."""
        key_id = self._credentials.key_id
        return sum(
            isinstance(record, dict) and record.get("key") == key_id for record in self._store.scan("spawns").values()
        )

    def open(self, task: str, agent: str, base_url: str, *, task_id: str | None = None) -> SpawnHandle:
        """Open one spawn: its endpoint, its signed credential and its plan (counted once in telemetry).

        Raises:
            ConfigError: unknown agent profile.
            SpawnLimitError: `gateway.max_open_spawns` spawns are open.
        """
        self._settings.agent(agent)
        task_id = task_id or task_key(task)
        gw = self._settings.gateway
        recent = self._history.recent(task_id)
        if self._visible is not None:  # another profile's spawn of the task may have called tools this one may not see
            recent = self._visible(agent, recent)
        if self._learned_pins is not None:
            recent += [name for name in self._learned_pins(task, task_id, agent, recent) if name not in recent]
        with self._open_lock:
            if self.open_count >= gw.max_open_spawns:
                raise SpawnLimitError(
                    f"gateway: {gw.max_open_spawns} spawns are open (gateway.max_open_spawns); close one or "
                    "wait for one to expire"
                )
            spawn_id = secrets.token_hex(SPAWN_ID_BYTES)
            token, claims = self._credentials.mint(spawn_id, agent, task_id, recent, gw.spawn_ttl_s)
            record = {
                "agent": agent,
                "task_id": task_id,
                "pins": recent,
                "opened": claims.issued,
                "expires": claims.expires,
                "key": self._credentials.key_id,
            }
            # The record ends with the credential.
            self._store.put(f"spawns/{spawn_id}", record, ttl_s=max(claims.remaining_s(), 0.001))
        context = self.context(claims, task)
        plan = context.current_plan(record=True)
        return SpawnHandle(spawn_id, token, base_url + spawn_path(spawn_id), agent, task_id, plan, gw.server_name)

    def verify(self, token: str, spawn_id: str) -> SpawnClaims:
        """The claims of a spawn credential presented at its endpoint. Reads the store for revocations.

        Raises:
            CredentialError: missing, forged, expired, for another spawn, or for an unknown profile.
            SpawnClosedError: the spawn was closed (DELETE) on this or another replica.
        """
        claims = self._credentials.verify(token, spawn_id)
        if claims.agent not in self._settings.agents and claims.agent != "default":
            raise CredentialError(f"spawn credential names agent {claims.agent[:64]!r}, unknown to this gateway")
        if self._is_revoked(spawn_id):
            with self._lock:
                context = self._spawns.pop(spawn_id, None)
            if context is not None:
                self._finish_quietly(context, "closed")
            raise SpawnClosedError(f"gateway: spawn {spawn_id!r} has ended")
        return claims

    def context(self, claims: SpawnClaims, task: str = "") -> SpawnContext:
        """This replica's state for a spawn (plan, counts, session), made from its claims on first use;
        spawns whose credential has expired are dropped on the way (their sessions recorded)."""
        with self._lock:
            context = self._spawns.get(claims.spawn_id)
        if context is not None:
            return context
        fresh = self._new_context(
            claims.spawn_id, claims.expires, task, claims.task_id, claims.agent, list(claims.pins)
        )
        now = time.time()
        expired: list[SpawnContext] = []
        with self._lock:
            for spawn_id, other in list(self._spawns.items()):
                if other.expires is not None and other.expires <= now:
                    expired.append(self._spawns.pop(spawn_id))
            for spawn_id, until in list(self._revoked.items()):
                if until <= now:
                    del self._revoked[spawn_id]
            context = self._spawns.setdefault(claims.spawn_id, fresh)
        for old in expired:
            self._finish_quietly(old, "expired")
        return context

    def stats(self, spawn_id: str) -> dict[str, Any]:
        """The spawn's plan figures and meta-tool counts, summed over every replica that served it.

        Raises:
            OrchestratorError: no such spawn (never opened, closed, or expired).
        """
        record = self._record(spawn_id)
        with self._lock:
            context = self._spawns.get(spawn_id)
        if context is None:  # opened on another replica and never served here: planned from its record
            pins = [str(pin) for pin in record.get("pins", ())]
            context = self._new_context(
                spawn_id, float(record["expires"]), "", str(record["task_id"]), str(record["agent"]), pins
            )
        plan = context.current_plan()
        counts: dict[str, Any] = {**dict.fromkeys(COUNT_KEYS, 0), "called": []}
        for delta in self._store.items(f"stats/{spawn_id}"):
            if not isinstance(delta, dict):
                continue
            for key in COUNT_KEYS:
                counts[key] += int(delta.get(key, 0))
            counts["called"].extend(tool for tool in delta.get("called", ()) if tool not in counts["called"])
        session = self._sessions.cost(context, plan)
        return {
            "id": spawn_id,
            "agent": context.view.agent,
            "task_id": context.task_id,
            "mode": plan.mode,
            "tokens_sent": plan.prompt_tokens,
            "tokens_saved": plan.tokens_saved,
            "fingerprint": plan.fingerprint,
            **counts,
            "open_s": round(time.time() - float(record["opened"]), 3),
            "session": session.to_dict() if session is not None else None,
        }

    def close(self, spawn_id: str) -> dict[str, Any]:
        """Final counts of a spawn; its credential is revoked (on every replica sharing the store) until it
        would have expired, its state is dropped, and its session is recorded (metrics, spawn log).

        Raises:
            OrchestratorError: no such spawn.
        """
        # Refused while the credential would still verify: until its expiry and the clock leeway after it.
        expires = float(self._record(spawn_id)["expires"]) + CLOCK_LEEWAY_S
        if expires > time.time():
            self._store.put(f"revoked/{spawn_id}", expires, ttl_s=expires - time.time())
        with self._lock:
            self._revoked[spawn_id] = expires
        stats = self.stats(spawn_id)
        with self._lock:
            context = self._spawns.pop(spawn_id, None)
        if context is not None:  # None: served only by other replicas, or a concurrent close finished it
            cost = self._finish(context, "closed")
            stats["session"] = cost.to_dict() if cost is not None else None
        self._store.delete(f"stats/{spawn_id}")
        self._store.delete(f"spawns/{spawn_id}")
        return stats

    def close_all(self, ended: str) -> None:
        """Record the sessions of the spawns this replica still serves (the gateway is stopping)."""
        with self._lock:
            contexts, self._spawns = list(self._spawns.values()), {}
        for context in contexts:
            self._finish_quietly(context, ended)

    def _record(self, spawn_id: str) -> dict[str, Any]:
        record = self._store.get(f"spawns/{spawn_id}")
        if not isinstance(record, dict):
            raise OrchestratorError(f"gateway: no open spawn {spawn_id!r}")
        return record

    def _is_revoked(self, spawn_id: str) -> bool:
        if spawn_id in self._revoked:
            return True
        record = self._store.get(f"revoked/{spawn_id}")
        if record is None:
            return False
        with self._lock:
            self._revoked[spawn_id] = float(record) if isinstance(record, int | float) else time.time()
        return True

    def _finish(self, context: SpawnContext, ended: str) -> SessionCost | None:
        """Record a spawn's session once it is out of `_spawns` (closed, expired or the gateway stopping), with
        the plan its client was served (a handshake-named client may have had its own variant)."""
        if self._finished is not None:
            self._finished(context)
        served = context.active or context
        return self._sessions.finish(served, served.current_plan(), ended)

    def _finish_quietly(self, context: SpawnContext, ended: str) -> None:
        try:
            self._finish(context, ended)
        except Exception:  # boundary: one session's accounting must not fail another request or the close
            log.warning("recording the session of spawn %s failed", context.id, exc_info=True)
