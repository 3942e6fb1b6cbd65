"""Binary records in pack files: how `FileStore` keeps many small values (tool vectors) that several
processes on one machine write and read.

    packs = BlobPacks(folder)
    packs.get([name, ...])          values by name (None where absent), packs other processes wrote included
    packs.put({name: value}, limit=n)   one new pack; small packs merged; past n (and a quarter) the oldest go

A pack is one file, written to a temporary name and renamed into place, never changed afterwards: a header, the names, the
values, all records of a pack the same size. A reader maps each pack once and finds names by binary
search, so a record costs its name and a few bytes of index in memory; the values stay in the page cache.
A damaged or cut file (bad header, size or checksum) is skipped with one warning and deleted by the next
merge: it only costs writing its records again. Merges are safe to run in several processes at once: each
deletes only the packs it read, and a record found in two packs is the same record.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._untrusted import open_regular

__all__ = ["LIMIT_SLACK", "MAX_PACKS", "PACK_SUFFIX", "BlobPacks"]

log = logging.getLogger(__name__)

PACK_SUFFIX = ".pack"
MAX_PACKS = 16
"""More packs than this in a folder are merged on the next write: reads stay a few binary searches."""
LIMIT_SLACK = 4
"""A folder may hold a quarter more records than its limit before every pack is merged down to the limit:
a full merge rewrites everything, so it must not run on every write of a full cache."""
_MAGIC = b"ORCPACK1"
_HEADER = struct.Struct("<8sHIII")
"""magic, name length, value length, record count, crc32 of everything after the header."""


@dataclass(frozen=True)
class _Pack:
    path: Path
    view: memoryview
    count: int
    name_size: int
    value_size: int

    @functools.cached_property
    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        names = np.frombuffer(self.view, dtype=f"S{self.name_size}", count=self.count, offset=_HEADER.size)
        order = np.argsort(names, kind="stable")
        return names[order], order

    @property
    def names(self) -> np.ndarray:
        """The names, sorted (fixed-width byte strings): sorted on the first lookup of a name this long, so a
        pack of names no lookup asks for (another process's, or a crafted one) costs no sort."""
        return self._sorted[0]

    @property
    def rows(self) -> np.ndarray:
        """Row of each sorted name in the file."""
        return self._sorted[1]

    def table(self, start: int, width: int) -> np.ndarray:
        """`count` rows of `width` bytes from `start` after the header: the names (0) or the values."""
        return np.frombuffer(self.view, np.uint8, self.count * width, _HEADER.size + start).reshape(self.count, width)

    def names_in_order(self) -> list[bytes]:
        """The names in file order, exact (a void view keeps trailing NULs)."""
        names: list[bytes] = self.table(0, self.name_size).view(f"V{self.name_size}").ravel().tolist()
        return names

    def value(self, row: int) -> bytes:
        start = _HEADER.size + self.count * self.name_size + row * self.value_size
        return bytes(self.view[start : start + self.value_size])


class BlobPacks:
    """The packs of one folder. Thread-safe."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._packs: dict[str, _Pack] = {}
        self._bad: set[str] = set()
        self._lock = threading.Lock()
        self._sizes: set[tuple[int, int]] = set()
        """Record sizes (name, value) this process wrote: a merge keeps only packs of these."""

    # ------------------------------------------------------------------ reading

    def get(self, names: Sequence[bytes]) -> list[bytes | None]:
        """The value of each name (None where no pack has it), after looking for packs written since."""
        with self._lock:
            found = self._find(names)
            if any(value is None for value in found) and self._refresh():
                found = self._find(names)
            return found

    def _find(self, names: Sequence[bytes]) -> list[bytes | None]:
        found: list[bytes | None] = [None] * len(names)
        # Newest pack first: a record written again (after a merge dropped it) is the same record anyway.
        for pack in sorted(self._packs.values(), key=lambda p: p.path.name, reverse=True):
            todo = [i for i, value in enumerate(found) if value is None and len(names[i]) == pack.name_size]
            if not todo or not pack.count:
                continue
            asked = np.array([names[i] for i in todo], dtype=pack.names.dtype)
            places = np.minimum(np.searchsorted(pack.names, asked), pack.count - 1)
            hits = pack.names[places] == asked
            for i, place, hit in zip(todo, places.tolist(), hits.tolist(), strict=True):
                if hit:
                    found[i] = pack.value(int(pack.rows[place]))
        return found

    def _refresh(self) -> bool:
        """Map packs new in the folder and forget deleted ones; True when anything changed. Hold the lock."""
        listed = set(self._listing())
        gone = [name for name in self._packs if name not in listed]
        for name in gone:
            del self._packs[name]
        added = False
        for name in sorted(listed - self._packs.keys() - self._bad):
            pack = self._open(self.folder / name)
            if pack is None:
                self._bad.add(name)
            else:
                self._packs[name] = pack
                added = True
        return added or bool(gone)

    def _listing(self) -> list[str]:
        try:
            return [e.name for e in os.scandir(self.folder) if e.name.endswith(PACK_SUFFIX) and e.name[0] != "."]
        except FileNotFoundError:
            return []

    @staticmethod
    def _open(path: Path) -> _Pack | None:
        """Map and check one pack; None (after a warning) when it is damaged, absent or unreadable."""
        try:
            with open_regular(path) as handle:  # never a FIFO's wait, nor a link's /dev/zero
                size = os.fstat(handle.fileno()).st_size
                if size < _HEADER.size:
                    raise ValueError(f"{size} bytes, shorter than a header")
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            return None  # merged away by another process meanwhile
        except (OSError, ValueError) as exc:
            log.warning("vector pack %s unreadable (%s); its records will be written again", path, exc)
            return None
        try:
            view = memoryview(mapped)
            magic, name_size, value_size, count, crc = _HEADER.unpack_from(view)
            body = _HEADER.size + count * (name_size + value_size)
            if magic != _MAGIC or name_size == 0 or size != body:
                raise ValueError(f"not a pack of {count} records ({size} bytes)")
            if zlib.crc32(view[_HEADER.size :]) != crc:
                raise ValueError("checksum mismatch")
            return _Pack(path, view, count, name_size, value_size)
        except (ValueError, struct.error) as exc:
            log.warning("vector pack %s unreadable (%s); its records will be written again", path, exc)
            return None

    # ------------------------------------------------------------------ writing

    def put(self, blobs: Mapping[bytes, bytes], *, limit: int) -> None:
        """Write `blobs` as new packs (one per record size); merge when the folder holds over MAX_PACKS.

        Keeps at most about `limit` records: a merge of every pack keeps the newest `limit`.

        Raises:
            OSError: the folder cannot be written.
        """
        groups: dict[tuple[int, int], dict[bytes, bytes]] = {}
        for name, value in blobs.items():
            groups.setdefault((len(name), len(value)), {})[name] = value
        self.folder.mkdir(parents=True, exist_ok=True)
        for group in groups.values():
            self._write(group)
        with self._lock:
            self._sizes.update(groups)
            self._refresh()
            total = sum(pack.count for pack in self._packs.values() if (pack.name_size, pack.value_size) in self._sizes)
            if total > limit + limit // LIMIT_SLACK:
                self._merge(limit, everything=True)
            elif len(self._packs) + len(self._bad) > MAX_PACKS:
                self._merge(limit)

    def _write(self, records: Mapping[bytes, bytes]) -> None:
        first_name, first_value = next(iter(records.items()))
        self._write_pack(
            len(first_name), len(first_value), len(records), [b"".join(records)], [b"".join(records.values())]
        )

    def _write_pack(
        self,
        name_size: int,
        value_size: int,
        count: int,
        names: Sequence[bytes | memoryview],
        values: Sequence[bytes | memoryview],
    ) -> None:
        """One new pack from chunks of names and of values (in the same order), written to a temporary file
        in the folder and renamed into place, as `atomic_write` does, but without holding it all in memory."""
        path = self.folder / f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}{PACK_SUFFIX}"
        temporary = self.folder / f".{path.name}.tmp"
        try:
            with temporary.open("wb") as handle:
                handle.write(bytes(_HEADER.size))
                crc = 0
                for chunk in (*names, *values):
                    handle.write(chunk)
                    crc = zlib.crc32(chunk, crc)
                handle.seek(0)
                handle.write(_HEADER.pack(_MAGIC, name_size, value_size, count, crc))
            # No fsync: a cache, where a crash costs re-embedding; the rename still shows readers all or nothing.
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise

    def _merge(self, limit: int, *, everything: bool = False) -> None:
        """Merge the small packs into one (every pack when the small ones outweigh the largest, or when
        `everything`), keeping the newest `limit` records; then delete what was merged and the damaged
        packs. Hold the lock."""
        everyone = sorted(self._packs.values(), key=lambda p: p.path.name)  # oldest first
        # Records of sizes this process never wrote are no vectors of its (a crafted pack of 150,000 tiny
        # records pushed every real vector out of the limit): deleted with the merged packs, never kept.
        packs = [p for p in everyone if (p.name_size, p.value_size) in self._sizes]
        strangers = [p for p in everyone if (p.name_size, p.value_size) not in self._sizes]
        largest = max(packs, key=lambda p: p.count, default=None)
        small = [p for p in packs if p is not largest]
        whole = everything or largest is None or sum(p.count for p in small) >= largest.count
        merged = packs if whole else small
        kept = _newest(merged, limit)
        try:
            for sizes in dict.fromkeys((p.name_size, p.value_size) for p, _rows in kept):
                self._write_rows([(p, rows) for p, rows in kept if (p.name_size, p.value_size) == sizes])
        except OSError as exc:  # boundary: a read-only or full disk keeps the packs as they are
            log.warning("vector packs in %s not merged: %s", self.folder, exc)
            return
        for path in [p.path for p in [*merged, *strangers]] + [self.folder / name for name in self._bad]:
            with contextlib.suppress(OSError):
                path.unlink()
        self._bad.clear()
        self._refresh()

    def _write_rows(self, kept: list[tuple[_Pack, np.ndarray]]) -> None:
        """One pack of the given rows of packs that share a record size."""
        name_size, value_size = kept[0][0].name_size, kept[0][0].value_size
        self._write_pack(
            name_size,
            value_size,
            sum(len(rows) for _pack, rows in kept),
            [pack.table(0, name_size)[rows].data for pack, rows in kept],
            [pack.table(pack.count * name_size, value_size)[rows].data for pack, rows in kept],
        )


def _newest(packs: list[_Pack], limit: int) -> list[tuple[_Pack, np.ndarray]]:
    """The rows of the newest `limit` distinct names of `packs` (oldest pack first), per pack, oldest first."""
    seen: set[bytes] = set()
    kept: list[tuple[_Pack, np.ndarray]] = []
    for pack in reversed(packs):  # newest first: they are the ones kept under the limit
        rows = []
        for row, name in enumerate(pack.names_in_order()):
            if len(seen) >= limit:
                break
            if name not in seen:
                seen.add(name)
                rows.append(row)
        if rows:
            kept.append((pack, np.array(rows, dtype=np.intp)))
    kept.reverse()
    return kept
