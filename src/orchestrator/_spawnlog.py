"""The spawn log: one JSON line per finished spawn, so session history survives gateway restarts.

Off by default; `gateway.spawn_log: PATH` turns it on. The gateway appends a line when a spawn closes
(or the gateway stops with spawns still open); `orchestrator tune` reads the file back. A line holds
the spawn (id, agent, task id, mode, when, why it ended), the per-round costs of its profile
(`SessionBasis`), its tool-call batches (`Action`s: enough to recompute every cost) and the session
summary `GET /spawns/<id>` shows. Fields are only ever added; `v` says which layout a line has.

Writing never blocks the caller: `SpawnLog.append` queues the line and one writer thread per log
appends it (the gateway finishes spawns on its event loop as well as in worker threads). Where lines
go is a `SpawnLogStore`: the file at `gateway.spawn_log` (`FileSpawnLogStore`, O_APPEND, so several
gateways on one machine share it); with `store.url` set (replicas on several machines), the shared
store's list `spawnlog/<file name>` instead (`StoreSpawnLogStore`), which every replica appends to and
`orchestrator tune` reads back.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ._accounting import Action, Batches, SessionBasis
from ._errors import ConfigError

if TYPE_CHECKING:
    from ._config import Settings
    from ._store import Store

__all__ = [
    "SPAWN_LOG_VERSION",
    "FileSpawnLogStore",
    "SpawnLog",
    "SpawnLogRead",
    "SpawnLogStore",
    "SpawnRecord",
    "StoreSpawnLogStore",
    "read_spawn_log",
    "spawn_log_store",
]

log = logging.getLogger(__name__)

SPAWN_LOG_VERSION = 1
"""Layout of a line (`v`); readers skip lines of a newer layout they do not know."""
FLUSH_TIMEOUT_S = 5.0
"""Bound on waiting for queued lines at close: a stuck disk must not hang a gateway's shutdown."""
STORE_LOG_TTL_S = 400 * 24 * 3600.0
"""How long a spawn log kept in the shared store lasts. The store's lists expire whole, this long after
their first item, so a year and a month of history is kept before the list starts over."""
STORE_LOG_NAMESPACE = "spawnlog"


class SpawnLogStore(Protocol):
    """Where spawn-log lines go and come back from (a file here; a shared store for replicas)."""

    def append_line(self, line: str) -> None:
        """Append one line (no newline in it) durably enough to survive the process."""
        ...

    def read_lines(self) -> Iterator[str]:
        """Every line appended so far, oldest first."""
        ...


class FileSpawnLogStore:
    """A JSON-lines file. Each line is one `write` on an O_APPEND descriptor, so lines from several
    writers never interleave on a local disk. The parent folder is created on first write."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append_line(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (line + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # task ids are private
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def read_lines(self) -> Iterator[str]:
        # Line by line, each decoded alone: one line of bad UTF-8 is one bad line, not an unreadable log.
        with self.path.open("rb") as file:
            for line in file:
                yield line.rstrip(b"\n").decode("utf-8", "replace")


class StoreSpawnLogStore:
    """The spawn log as a list in the shared store (`store.url`): every replica appends to the same list.

    Args:
        store: the gateway's store (Redis for replicas on several machines).
        name: the list's name, from `gateway.spawn_log`'s file name, so two logs configured with
            different names stay apart.
    """

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.key = f"{STORE_LOG_NAMESPACE}/{name}"

    def append_line(self, line: str) -> None:
        self.store.append(self.key, json.loads(line), ttl_s=STORE_LOG_TTL_S)

    def read_lines(self) -> Iterator[str]:
        for item in self.store.items(self.key):
            yield json.dumps(item, separators=(",", ":"), ensure_ascii=False)

    @property
    def path(self) -> str:
        return f"store {self.key}"


def spawn_log_store(settings: Settings, store: Store | None = None) -> SpawnLogStore | None:
    """Where the spawn log goes: None when `gateway.spawn_log` is unset; the shared store's list when
    `store.url` is set and a store is given; else the file."""
    path = settings.gateway.spawn_log
    if path is None:
        return None
    if settings.store.url is not None and store is not None:
        return StoreSpawnLogStore(store, Path(path).name)
    return FileSpawnLogStore(Path(path).expanduser())


@dataclass(frozen=True)
class SpawnRecord:
    """One finished spawn, as a spawn-log line holds it."""

    id: str
    agent: str
    task_id: str
    mode: str
    ended: str
    """Why the session ended: `closed` (DELETE /spawns/<id> or the launcher), `expired`, `gateway_stopped`."""
    opened_at: float
    """Unix time the spawn was opened."""
    duration_s: float
    catalog_version: str
    threshold_tokens: int
    """The profile's `threshold_tokens` when it ran."""
    basis: SessionBasis
    batches: Batches
    session: dict[str, Any] = field(default_factory=dict)
    """`SessionCost.to_dict()` as the gateway computed it."""
    lists: int = 0
    """tools/list requests (not rounds)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "v": SPAWN_LOG_VERSION,
            "id": self.id,
            "agent": self.agent,
            "task_id": self.task_id,
            "mode": self.mode,
            "ended": self.ended,
            "opened_at": round(self.opened_at, 3),
            "duration_s": round(self.duration_s, 3),
            "catalog_version": self.catalog_version,
            "threshold_tokens": self.threshold_tokens,
            "basis": self.basis.to_json(),
            "lists": self.lists,
            "batches": [[action.to_json() for action in batch] for batch in self.batches],
            "session": self.session,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SpawnRecord:
        """Raises: ValueError naming the field that is wrong."""
        batches = data.get("batches")
        if not isinstance(batches, list) or not all(isinstance(batch, list) for batch in batches):
            raise ValueError("batches: expected a list of lists of actions")
        basis = data.get("basis")
        if not isinstance(basis, Mapping):
            raise ValueError("basis: expected an object")
        for key in ("id", "agent", "mode"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise ValueError(f"{key}: expected a non-empty string")
        session = data.get("session") or {}
        return cls(
            id=data["id"],
            agent=data["agent"],
            task_id=str(data.get("task_id", "")),
            mode=data["mode"],
            ended=str(data.get("ended", "closed")),
            opened_at=float(data.get("opened_at", 0.0)),
            duration_s=float(data.get("duration_s", 0.0)),
            catalog_version=str(data.get("catalog_version", "")),
            threshold_tokens=int(data.get("threshold_tokens", 0)),
            basis=SessionBasis.from_json(basis),
            batches=tuple(tuple(Action.from_json(action) for action in batch) for batch in batches),
            session=dict(session) if isinstance(session, Mapping) else {},
            lists=int(data.get("lists", 0)),
        )


_STOP = object()
"""Queued by `close()`: the writer thread ends after the lines before it."""


class SpawnLog:
    """Appends finished spawns to a `SpawnLogStore` from one writer thread, so callers never wait on disk.

    Args:
        store: where lines go.
    """

    def __init__(self, store: SpawnLogStore) -> None:
        self.store = store
        self._queue: queue.Queue[str | threading.Event | object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings, store: Store | None = None) -> SpawnLog | None:
        """A log at `gateway.spawn_log` (or in `store` with `store.url` set: `spawn_log_store`), or None
        when it is not set (the default)."""
        where = spawn_log_store(settings, store)
        return cls(where) if where is not None else None

    def append(self, record: SpawnRecord) -> None:
        """Queue one line; the writer thread appends it. After `close()` lines are dropped (logged)."""
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            if self._closed:
                log.warning("spawn log closed: spawn %s not recorded", record.id)
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._write, name="orchestrator-spawn-log", daemon=True)
                self._thread.start()
            self._queue.put(line)

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until every line queued so far is written (True), or `timeout` seconds pass (False)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None or self._closed:
                return True
            self._queue.put(done)  # set by the writer once everything queued before it is written
        return done.wait(timeout)

    def close(self) -> None:
        """Write what is queued (waiting at most FLUSH_TIMEOUT_S) and stop the writer. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None:
            thread.join(FLUSH_TIMEOUT_S)

    def _write(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self.store.append_line(str(item))
            except OSError as exc:  # boundary: a full or unwritable disk loses the line, never the gateway
                log.warning("spawn log: cannot append to %s: %s", getattr(self.store, "path", self.store), exc)


@dataclass(frozen=True)
class SpawnLogRead:
    """What `read_spawn_log` found."""

    records: list[SpawnRecord]
    skipped: int = 0
    """Lines that are not a valid record (or of a newer layout)."""
    first_problem: str | None = None
    """Where and why the first skipped line was skipped."""


def read_spawn_log(path: Path | str, store: SpawnLogStore | None = None) -> SpawnLogRead:
    """Every valid record of a spawn log (the file at `path`, or `store`); bad lines are counted and the
    first one described (`path` names where).

    Raises:
        ConfigError: the file does not exist or cannot be read (names the path).
    """
    store = store if store is not None else FileSpawnLogStore(Path(path))
    records: list[SpawnRecord] = []
    skipped = 0
    first: str | None = None
    try:
        for number, line in enumerate(store.read_lines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                if int(data.get("v", 0)) > SPAWN_LOG_VERSION:
                    raise ValueError(
                        f"layout v{data['v']} is newer than this orchestrator reads (v{SPAWN_LOG_VERSION})"
                    )
                records.append(SpawnRecord.from_json(data))
            except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # another process's line
                skipped += 1
                if first is None:
                    first = f"{path}:{number}: {' '.join(str(exc).split())[:200]}"
    except FileNotFoundError:
        raise ConfigError(f"spawn log {path}: no such file (set gateway.spawn_log and run spawns first)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"spawn log {path}: cannot read: {exc}") from None
    return SpawnLogRead(records, skipped, first)
