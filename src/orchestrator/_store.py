"""The store: small JSON records that must outlive one gateway replica, behind one interface.

    Store                 get / put (with a time to live) / delete / scan a namespace / append to a list /
                          read a list / binary records in bulk (get_blobs, put_blobs) / close
    MemoryStore           a dict: one process only (tests, an embedded gateway, a cold spawn's gateway)
    FileStore(root)       one JSON file per record under `root/<namespace>/`: replicas on one machine
    RedisStore(url)       Redis through redis-py: replicas on several machines
    open_store(settings)  `store.url` unset: FileStore under the cache root; `redis://...`: RedisStore

Keys are `namespace/name` (`tasks/<task id>`, `spawns/<spawn id>`, `revoked/<spawn id>`, `stats/<spawn id>`).
What goes in: task histories (pinned and recently called tools), the open spawns (who opened which
spawn, its expiry), the meta-tool counts of open spawns (a list each replica appends to), and revoked
spawn credentials until they would have expired anyway; and, as binary records in namespace `vectors`, the
tool vectors of hybrid search, so each tool text is embedded once per deployment. Every call may block (files, a network round trip): the gateway calls the store from
its worker pool, never on its event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ._errors import ConfigError, OrchestratorError
from ._untrusted import json_or_none, open_regular
from ._urls import redacted_url
from .protocols.mcp._cache import atomic_create, atomic_write

if TYPE_CHECKING:
    from ._blobs import BlobPacks
    from ._config import Settings

__all__ = ["FileStore", "MemoryStore", "RedisStore", "Store", "StoreError", "open_store", "split_key"]

NAME_CHARS = 100
"""Longest file name FileStore makes from a key's name part (file systems allow 255 bytes)."""
SWEEP_INTERVAL_S = 60.0
"""How often a store, writing a record that expires, also reclaims the expired records of its namespace
that no read would ever remove (a spawn's counts after it expired, a closed spawn's revocation)."""
FILE_HASH_CHARS = 16
"""Hex digits of the hash that tells apart the names FileStore cannot keep as they are (64 bits)."""
REDIS_TIMEOUT_S = 5.0
"""Connect and command timeout: a Redis that does not answer in this long fails the request, not the loop."""
REDIS_BLOBS_PER_COMMAND = 1_000
"""Binary records read or written per Redis command: a few MB of tool vectors, not one huge reply."""


class StoreError(OrchestratorError):
    """The store cannot be reached or answered wrongly (Redis down, a timeout); names the store."""


class Store(Protocol):
    """Where the gateway keeps what another replica (or a later process) must see.

    Values are anything `json.dumps` accepts. A record with a `ttl_s` disappears after it; `scan` never
    returns an expired record. Implementations are thread-safe.
    """

    def get(self, key: str) -> Any | None:
        """The live value under `key`, or None."""
        ...

    def put(self, key: str, value: Any, *, ttl_s: float | None = None) -> None:
        """Store `value` under `key`, replacing what was there; gone after `ttl_s` seconds when given."""
        ...

    def put_new(self, key: str, value: Any) -> bool:
        """Store `value` under `key` (no expiry) only if no live record is there: True when it was stored.
        Of replicas creating one record at once, exactly one wins (the first listing's pins)."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key` (no error when it is not there)."""
        ...

    def scan(self, namespace: str) -> dict[str, Any]:
        """Every live record of a namespace, by name (the key without `namespace/`). Meant for small
        namespaces: the open spawns."""
        ...

    def clear(self, namespace: str) -> None:
        """Remove every record and list of a namespace, those `scan` skips as damaged included (its
        binary records stay)."""
        ...

    def append(self, key: str, item: Any, *, ttl_s: float) -> None:
        """Add `item` to the list under `key` (several processes may append at once); the list is gone
        `ttl_s` after its first item. Cheap: no file is rewritten, no record replaced."""
        ...

    def items(self, key: str) -> list[Any]:
        """The list under `key`, oldest first ([] when there is none or it has expired)."""
        ...

    def get_blobs(self, namespace: str, names: Sequence[bytes]) -> list[bytes | None]:
        """The binary value of each name in `namespace`, in order (None where there is none), including
        what other processes sharing the store wrote. For many small values read in bulk (tool vectors)."""
        ...

    def put_blobs(self, namespace: str, blobs: Mapping[bytes, bytes], *, limit: int) -> None:
        """Keep binary values by name in `namespace`; it holds the `limit` most recently written (older ones
        go first; a FileStore lets a quarter more wait for its next merge), so it stays bounded however many
        processes write."""
        ...

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""
        ...


def split_key(key: str) -> tuple[str, str]:
    """`namespace/name` -> (namespace, name).

    Raises:
        ValueError: no namespace, or an empty part.
    """
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name:
        raise ValueError(f"store key {key!r}: expected 'namespace/name'")
    return namespace, name


def _expiry(ttl_s: float | None) -> float | None:
    if ttl_s is None:
        return None
    if not math.isfinite(ttl_s) or ttl_s <= 0:
        raise ValueError(f"store ttl_s must be a positive number of seconds, got {ttl_s!r}")
    return time.time() + ttl_s


class MemoryStore:
    """Records in a dict, for one process: what a gateway uses when nothing else is passed in."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[float | None, str]] = {}
        self._lists: dict[str, tuple[float, list[str]]] = {}
        self._blobs: dict[str, dict[bytes, bytes]] = {}
        self._lock = threading.Lock()
        self._swept = 0.0

    def get(self, key: str) -> Any | None:
        with self._lock:
            record = self._data.get(key)
            if record is None:
                return None
            if record[0] is not None and record[0] <= time.time():
                del self._data[key]
                return None
        return json.loads(record[1])

    def put(self, key: str, value: Any, *, ttl_s: float | None = None) -> None:
        split_key(key)
        record = (_expiry(ttl_s), json.dumps(value))  # a copy: callers may change `value` afterwards
        with self._lock:
            self._data[key] = record
            if ttl_s is not None:
                self._sweep()

    def put_new(self, key: str, value: Any) -> bool:
        split_key(key)
        record = (None, json.dumps(value))
        with self._lock:
            existing = self._data.get(key)
            if existing is not None and (existing[0] is None or existing[0] > time.time()):
                return False
            self._data[key] = record
            return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)
            self._lists.pop(key, None)

    def scan(self, namespace: str) -> dict[str, Any]:
        prefix = namespace + "/"
        now = time.time()
        found: dict[str, Any] = {}
        with self._lock:
            for key, (expires, text) in list(self._data.items()):
                if not key.startswith(prefix):
                    continue
                if expires is not None and expires <= now:
                    del self._data[key]
                    continue
                found[key[len(prefix) :]] = json.loads(text)
        return found

    def clear(self, namespace: str) -> None:
        prefix = namespace + "/"
        with self._lock:
            for table in (self._data, self._lists):
                for key in [key for key in table if key.startswith(prefix)]:
                    del table[key]

    def append(self, key: str, item: Any, *, ttl_s: float) -> None:
        split_key(key)
        expires = _expiry(ttl_s)
        assert expires is not None
        text = json.dumps(item)
        with self._lock:
            current = self._lists.get(key)
            if current is None or current[0] <= time.time():
                current = self._lists[key] = (expires, [])
            current[1].append(text)
            self._sweep()

    def items(self, key: str) -> list[Any]:
        with self._lock:
            current = self._lists.get(key)
            if current is None:
                return []
            if current[0] <= time.time():
                del self._lists[key]
                return []
            texts = list(current[1])
        return [json.loads(text) for text in texts]

    def get_blobs(self, namespace: str, names: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            blobs = self._blobs.get(namespace, {})
            return [blobs.get(name) for name in names]

    def put_blobs(self, namespace: str, blobs: Mapping[bytes, bytes], *, limit: int) -> None:
        with self._lock:
            kept = self._blobs.setdefault(namespace, {})
            for name, value in blobs.items():
                kept.pop(name, None)  # written again: the newest now
                kept[name] = bytes(value)
            for name in list(itertools.islice(kept, max(0, len(kept) - limit))):
                del kept[name]

    def close(self) -> None:
        return None

    def _sweep(self) -> None:
        """Drop every expired record and list, at most once per SWEEP_INTERVAL_S (under the lock)."""
        now = time.time()
        if now - self._swept < SWEEP_INTERVAL_S:
            return
        self._swept = now
        for key in [key for key, (expires, _) in self._data.items() if expires is not None and expires <= now]:
            del self._data[key]
        for key in [key for key, (expires, _) in self._lists.items() if expires <= now]:
            del self._lists[key]


class FileStore:
    """One small JSON file per record, `root/<namespace>/<name>.json`: `{"expires": t|null, "value": v}`;
    one JSON line per list item in `root/<namespace>/<name>.jsonl`: `{"expires": t, "item": i}`.

    Replicas on one machine (or sharing a folder) see each other's records. A record without a time to
    live (a task history) is written with an fsync; short-lived ones are not. Records are replaced
    atomically (a temporary file and a rename): a reader sees the old record or the new one. List items
    are appended (O_APPEND, one write each): about 40 us here, where replacing a file costs about 1 ms,
    so counting every tool call stays cheap. A name is its file name when it has only letters, digits, `-` and
    `_` (`_file_name`). Expired files go when read, or in the sweep a write that expires starts at most once a
    minute per namespace. Binary records go to pack files under `root/<namespace>/` (`BlobPacks`).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._packs: dict[str, BlobPacks] = {}
        self._packs_lock = threading.Lock()
        self._swept: dict[Path, float] = {}
        """Namespace folder -> when this process last swept it."""

    def _blob_packs(self, namespace: str) -> BlobPacks:
        with self._packs_lock:
            packs = self._packs.get(namespace)
            if packs is None:
                from ._blobs import BlobPacks  # numpy: paid only by a store that keeps binary records

                packs = self._packs[namespace] = BlobPacks(self.root / _safe(namespace))
            return packs

    def get_blobs(self, namespace: str, names: Sequence[bytes]) -> list[bytes | None]:
        return self._blob_packs(namespace).get(names)

    def put_blobs(self, namespace: str, blobs: Mapping[bytes, bytes], *, limit: int) -> None:
        if blobs:
            self._blob_packs(namespace).put(blobs, limit=limit)

    def _path(self, key: str) -> Path:
        namespace, name = split_key(key)
        return self.root / _safe(namespace) / f"{_file_name(name)}.json"

    def get(self, key: str) -> Any | None:
        return self._read(self._path(key), time.time())

    def put(self, key: str, value: Any, *, ttl_s: float | None = None) -> None:
        path = self._path(key)
        expires = _expiry(ttl_s)
        payload = json.dumps({"key": key, "expires": expires, "value": value}).encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, payload, durable=expires is None)  # expiring records need not survive a crash
        if expires is not None:
            self._sweep(path.parent)

    def put_new(self, key: str, value: Any) -> bool:
        path = self._path(key)
        payload = json.dumps({"key": key, "expires": None, "value": value}).encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        if atomic_create(path, payload):
            return True
        if self._envelope(path, time.time()) is not None:
            return False
        atomic_write(path, payload)  # an expired or unreadable record is as if absent
        return True

    def delete(self, key: str) -> None:
        path = self._path(key)
        for each in (path, path.with_suffix(".jsonl")):
            with contextlib.suppress(FileNotFoundError):
                each.unlink()

    def scan(self, namespace: str) -> dict[str, Any]:
        folder = self.root / _safe(namespace)
        now = time.time()
        found: dict[str, Any] = {}
        try:
            paths = [entry for entry in folder.iterdir() if entry.suffix == ".json"]
        except FileNotFoundError:
            return found
        for path in paths:
            envelope = self._envelope(path, now)
            if envelope is None:
                continue
            key = envelope.get("key")
            if not isinstance(key, str):
                found[path.stem] = envelope.get("value")  # written before records carried their key
            elif _owns(self, key, path):
                found[key.partition("/")[2]] = envelope.get("value")
        return found

    def clear(self, namespace: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            for path in (self.root / _safe(namespace)).iterdir():
                if path.suffix in (".json", ".jsonl") and not path.is_dir():
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()

    def append(self, key: str, item: Any, *, ttl_s: float) -> None:
        path = self._path(key).with_suffix(".jsonl")
        line = json.dumps({"expires": _expiry(ttl_s), "item": item}).encode("utf-8") + b"\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self._sweep(path.parent)

    def items(self, key: str) -> list[Any]:
        path = self._path(key).with_suffix(".jsonl")
        data = _record_bytes(path)
        if data is None:
            return []
        now = time.time()
        found: list[Any] = []
        for line in data.splitlines():
            entry = json_or_none(line)  # a line cut short by a crash, or damaged: skipped
            if not isinstance(entry, dict) or "item" not in entry:
                continue
            expires = entry.get("expires")
            if isinstance(expires, int | float) and expires <= now:  # the list expires with its first item
                with contextlib.suppress(OSError):
                    path.unlink()
                return []
            found.append(entry["item"])
        return found

    def close(self) -> None:
        return None

    def _sweep(self, folder: Path) -> None:
        """Remove the folder's expired records and lists, at most once per SWEEP_INTERVAL_S: files only a
        read of their own key would remove otherwise (a list expires with its first line)."""
        now = time.time()
        if now - self._swept.get(folder, 0.0) < SWEEP_INTERVAL_S:
            return
        self._swept[folder] = now
        with contextlib.suppress(OSError):
            for path in folder.iterdir():
                if path.suffix == ".json":
                    self._envelope(path, now)  # removes it once expired
                elif path.suffix == ".jsonl" and _first_line_expired(path, now):
                    with contextlib.suppress(OSError):
                        path.unlink()

    def _read(self, path: Path, now: float) -> Any | None:
        envelope = self._envelope(path, now)
        return None if envelope is None else envelope.get("value")

    def _envelope(self, path: Path, now: float) -> dict[str, Any] | None:
        """The record's envelope; None (and the file removed) once it has expired; None when unreadable."""
        raw = _record_bytes(path)  # not there, or damaged: as if absent (a later put replaces it)
        data = json_or_none(raw) if raw is not None else None
        if not isinstance(data, dict) or "value" not in data:
            return None
        expires = data.get("expires")
        if isinstance(expires, int | float) and expires <= now:
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return data


_PUT_NEW_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('ZADD', KEYS[2], '+inf', ARGV[2])
  return 1
end
return 0
"""
"""`RedisStore.put_new`: the record and its index entry, only when the key is free, in one atomic step."""


class RedisStore:
    """Records in Redis (redis-py): replicas on several machines share them.

    Each record is one string key `<prefix><namespace>:<name>` with Redis' own expiry; each namespace
    also has a sorted set `<prefix>index:<namespace>` of its keys scored by expiry, so `scan` reads one
    namespace without walking the whole keyspace (and drops index entries that have expired). Binary
    records of a namespace are one hash `<prefix>blobs:<namespace>`, with a sorted set
    `<prefix>blobs-age:<namespace>` of their names by time written, from which the oldest are dropped.
    """

    def __init__(self, url: str, *, prefix: str = "orchestrator:", client: Any = None) -> None:
        import redis

        self.url = url
        self.prefix = prefix
        self._redis = (
            client
            if client is not None
            else redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        )

    def _key(self, key: str) -> tuple[str, str, str]:
        namespace, name = split_key(key)
        return f"{self.prefix}{namespace}:{name}", f"{self.prefix}index:{namespace}", name

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        import redis

        try:
            yield
        except redis.RedisError as exc:
            raise StoreError(f"store {redacted_url(self.url)}: {type(exc).__name__}: {exc}") from None

    def get(self, key: str) -> Any | None:
        redis_key, _, _ = self._key(key)
        with self._errors():
            raw = self._redis.get(redis_key)
        return None if raw is None else json_or_none(raw)

    def put(self, key: str, value: Any, *, ttl_s: float | None = None) -> None:
        redis_key, index, name = self._key(key)
        expires = _expiry(ttl_s)
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(redis_key, json.dumps(value), px=None if ttl_s is None else max(1, math.ceil(ttl_s * 1000)))
        pipe.zadd(index, {name: expires if expires is not None else math.inf})
        with self._errors():
            pipe.execute()

    def put_new(self, key: str, value: Any) -> bool:
        redis_key, index, name = self._key(key)
        with self._errors():
            created = self._redis.eval(_PUT_NEW_SCRIPT, 2, redis_key, index, json.dumps(value), name)
        return bool(created)

    def delete(self, key: str) -> None:
        redis_key, index, name = self._key(key)
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(redis_key)
        pipe.zrem(index, name)
        with self._errors():
            pipe.execute()

    def append(self, key: str, item: Any, *, ttl_s: float) -> None:
        redis_key, _, _ = self._key(key)
        expires = _expiry(ttl_s)
        assert expires is not None
        pipe = self._redis.pipeline(transaction=True)
        pipe.rpush(redis_key, json.dumps(item))
        pipe.pexpireat(redis_key, math.ceil(expires * 1000), nx=True)  # the first item's expiry holds
        with self._errors():
            pipe.execute()

    def items(self, key: str) -> list[Any]:
        redis_key, _, _ = self._key(key)
        with self._errors():
            raw = self._redis.lrange(redis_key, 0, -1)
        return [item for item in map(json_or_none, raw) if item is not None]  # a damaged item is skipped

    def scan(self, namespace: str) -> dict[str, Any]:
        index = f"{self.prefix}index:{namespace}"
        with self._errors():
            self._redis.zremrangebyscore(index, "-inf", time.time())
            members = self._redis.zrange(index, 0, -1)
            names = [name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name) for name in members]
            if not names:
                return {}
            values = self._redis.mget([f"{self.prefix}{namespace}:{name}" for name in names])
        found = {name: json_or_none(raw) for name, raw in zip(names, values, strict=True) if raw is not None}
        return {name: value for name, value in found.items() if value is not None}  # damaged ones skipped

    def clear(self, namespace: str) -> None:
        index = f"{self.prefix}index:{namespace}"
        prefix = f"{self.prefix}{namespace}:"
        with self._errors():
            # The index's keys, and any other key of the namespace (one written without its index entry).
            members: list[Any] = self._redis.zrange(index, 0, -1)
            keys = {prefix.encode() + _as_bytes(name) for name in members}
            pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", prefix) + "*"
            keys.update(_as_bytes(key) for key in self._redis.scan_iter(match=pattern, count=1000))
            doomed = [index.encode(), *sorted(keys)]
            for start in range(0, len(doomed), REDIS_BLOBS_PER_COMMAND):
                self._redis.delete(*doomed[start : start + REDIS_BLOBS_PER_COMMAND])

    def get_blobs(self, namespace: str, names: Sequence[bytes]) -> list[bytes | None]:
        table = f"{self.prefix}blobs:{namespace}"
        found: list[bytes | None] = []
        with self._errors():
            for start in range(0, len(names), REDIS_BLOBS_PER_COMMAND):
                values: list[Any] = self._redis.hmget(table, list(names[start : start + REDIS_BLOBS_PER_COMMAND]))
                found.extend(values)
        return found

    def put_blobs(self, namespace: str, blobs: Mapping[bytes, bytes], *, limit: int) -> None:
        table, ages = f"{self.prefix}blobs:{namespace}", f"{self.prefix}blobs-age:{namespace}"
        items = list(blobs.items())
        now = time.time()
        with self._errors():
            for start in range(0, len(items), REDIS_BLOBS_PER_COMMAND):
                part: dict[Any, Any] = dict(items[start : start + REDIS_BLOBS_PER_COMMAND])
                pipe = self._redis.pipeline(transaction=True)
                pipe.hset(table, mapping=part)
                pipe.zadd(ages, dict.fromkeys(part, now))
                pipe.execute()
            excess = int(self._redis.zcard(ages)) - limit
            if excess > 0:  # replicas may both trim at once: the oldest go either way
                popped: list[Any] = self._redis.zpopmin(ages, excess)
                oldest = [name for name, _age in popped]
                for start in range(0, len(oldest), REDIS_BLOBS_PER_COMMAND):
                    self._redis.hdel(table, *oldest[start : start + REDIS_BLOBS_PER_COMMAND])

    def close(self) -> None:
        self._redis.close()


_GLOB_SPECIAL = re.compile(r"[\\*?\[\]]")
"""Characters a Redis SCAN pattern reads as a glob, escaped where a key is matched literally."""


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def open_store(settings: Settings) -> Store:
    """The store `settings` name: Redis for `store.url`, else files under the cache root.

    Raises:
        ConfigError: `store.url` is set but redis-py is not installed.
    """
    url = settings.store.url
    if url is None:
        return FileStore(settings.mcp.cache_root())
    try:
        import redis  # noqa: F401 (only to report a missing package as a config error)
    except ImportError:
        raise ConfigError("store.url: a Redis store needs the redis package (pip install redis)") from None
    return RedisStore(url, prefix=settings.store.prefix)


def _record_bytes(path: Path) -> bytes | None:
    """The bytes of a record file; None when there is none, or it is not a regular file (`open_regular`). A
    record is not refused for its size: a pin record too big to read would trust a rug pull."""
    try:
        with open_regular(path) as file:
            return file.read()
    except OSError:
        return None


def _owns(store: FileStore, key: str, path: Path) -> bool:
    """Whether `key` is the record at `path`: a file elsewhere naming it must not stand for it (or have
    the real record deleted in its place)."""
    try:
        return store._path(key) == path
    except ValueError:  # not a `namespace/name` key
        return False


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in part)[:NAME_CHARS] or "_"


def _first_line_expired(path: Path, now: float) -> bool:
    """Whether a list file's first item (which its whole list expires with) has expired."""
    try:
        with open_regular(path) as file:
            entry = json_or_none(file.readline())
    except OSError:
        return False
    expires = entry.get("expires") if isinstance(entry, dict) else None
    return isinstance(expires, int | float) and expires <= now


def _file_name(name: str) -> str:
    """A key's name as a file name: itself when it is one already (letters, digits, `-`, `_`, at most
    NAME_CHARS); else a safe prefix, a `.` (which no such name has) and a hash of the name, so two names
    never share a file (`proj.fix-1` and `proj_fix-1` did, and so did long names agreeing in their start)."""
    safe = _safe(name)
    if safe == name:
        return name
    return f"{safe[: NAME_CHARS - FILE_HASH_CHARS - 1]}.{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:FILE_HASH_CHARS]}"
