"""The tool catalog: normalized tools as immutable entries, with a content-hash version.

Built from a live manager, a snapshot on disk or plain lists; everything downstream (ranking, planning,
the gateway) reads a `ToolCatalog` and never the servers, so a catalog is a value: same tools, same
version, same plan.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import marshal
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._bulk import collector_paused
from ._normalization import (
    DESCRIPTION_LIMIT,
    NormalizedTool,
    kept_alone,
    names_on,
    normalize_counting,
    one_line,
    qualified_name,
    sanitize_schema,
    sanitize_text,
    sanitize_title,
)
from ._snapshot import Listed, Unstreamable, read_snapshot, snapshot_lists

__all__ = ["ToolCatalog", "ToolEntry", "read_snapshot"]

VERSION_LENGTH = 16
"""Hex digits of the catalog version (64 bits of sha256): ample to tell catalog states apart."""

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
"""What a tool without a usable `inputSchema` is shown with: it takes no arguments."""

_DIGEST_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
"""What an entry's digest hashes: canonical JSON (one encoder for every entry)."""


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool as the rest of the project sees it."""

    name: str
    """Qualified, provider-safe name, unique in the catalog (e.g. `github__create_issue`)."""
    server: str
    """The server calls go to (the first, by name, of `servers`)."""
    servers: tuple[str, ...]
    """Every server offering this exact tool."""
    tool: str
    """The original name on the server, what `tools/call` needs."""
    title: str | None
    description: str
    summary: str
    """`one_line(description)`: safe to put in a prompt."""
    input_schema: dict[str, Any] = field(hash=False)
    output_schema: dict[str, Any] | None = field(hash=False)
    annotations: dict[str, Any] | None = field(hash=False)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def definition(self) -> dict[str, Any]:
        """The definition as sent to a model: qualified name, description, input schema."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    @property
    def digest(self) -> str:
        """Content hash of everything the entry shows (names, servers, texts, schemas); computed once."""
        found = self._digest
        if found is None:
            payload = [
                self.name,
                self.servers,
                self.tool,
                self.title,
                self.description,
                self.input_schema,
                self.output_schema,
                self.annotations,
            ]
            text = _DIGEST_JSON.encode(payload)
            found = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            object.__setattr__(self, "_digest", found)
        return found


class _NewEntry:
    """`_NewEntry(...)` is `ToolEntry(...)` made three times faster, for builds of many entries: filled as a
    plain object with the same slots (a frozen dataclass sets each field through `object.__setattr__`),
    then given its class, which the identical slots allow."""

    __slots__ = ToolEntry.__slots__

    def __init__(
        self,
        name: str,
        server: str,
        servers: tuple[str, ...],
        tool: str,
        title: str | None,
        description: str,
        summary: str,
        input_schema: dict[str, Any],
        output_schema: dict[str, Any] | None,
        annotations: dict[str, Any] | None,
    ) -> None:
        self.name = name
        self.server = server
        self.servers = servers
        self.tool = tool
        self.title = title
        self.description = description
        self.summary = summary
        self.input_schema = input_schema
        self.output_schema = output_schema
        self.annotations = annotations
        self._digest = None
        self.__class__ = ToolEntry  # type: ignore[assignment]


if TYPE_CHECKING:  # what _NewEntry makes, its arguments checked as ToolEntry's
    _new_entry = ToolEntry
else:
    _new_entry = _NewEntry


class ToolCatalog:
    """Immutable set of tools, sorted by qualified name; `version` changes whenever any tool changes.

    Held per server (`ToolEntry.server`): a catalog derived from another (`replaced`, `updated`) shares
    every unchanged server's entries with it, and `changes` finds what differs between two such catalogs
    without looking at the rest, so the search index and the directory update per server.
    """

    def __init__(self, entries: Iterable[ToolEntry] = ()) -> None:
        ordered = sorted(entries, key=lambda entry: entry.name)
        parts: dict[str, list[ToolEntry]] = {}
        for entry in ordered:
            parts.setdefault(entry.server, []).append(entry)
        self._setup(ordered, [entry.name for entry in ordered], {server: tuple(part) for server, part in parts.items()})
        if any(a == b for a, b in itertools.pairwise(self._names)):
            raise ValueError("ToolCatalog entries must have unique names")
        self._by_alias, self._by_tool = _lookups(self._entries)

    def _setup(self, entries: list[ToolEntry], names: list[str], parts: dict[str, tuple[ToolEntry, ...]]) -> None:
        self._entries = entries
        """Every entry, sorted by name; never changed (`entries` hands out a tuple of it)."""
        self._tuple: tuple[ToolEntry, ...] | None = None
        self._names = names
        """Every entry's name, in order: lookups bisect it."""
        self._parts = parts
        self._digests: dict[str, str] = {}
        """Server -> hash of its part's entries, filled as `version` needs them (inherited by derived catalogs)."""
        self._version: str | None = None
        self._parent: weakref.ref[ToolCatalog] | None = None
        self._changed: frozenset[str] = frozenset()
        """Servers whose part differs from the parent's (the catalog this one was derived from)."""
        self._recipe: tuple[frozenset[tuple[str, str]], int, bool] | None = None
        """How `from_lists` built it: replica groups, description limit, whether a name was re-hashed."""

    # ------------------------------------------------------------------ builders

    @classmethod
    def from_lists(
        cls,
        tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]],
        replicas: Mapping[str, str] | None = None,
        *,
        description_limit: int = DESCRIPTION_LIMIT,
    ) -> ToolCatalog:
        """From `{server: [tools/list dicts]}`, normalized: qualified names, exact duplicates collapsed
        within each replica group (`replicas`: server -> group; see `normalize`), texts sanitized and cut
        at `description_limit` characters (`mcp.max_description_chars`)."""
        with collector_paused():
            tools, renamed = normalize_counting(tools_by_server, replicas)
            shown = _Shown()
            catalog = cls(_entry(tool, description_limit, shown) for tool in tools)
        catalog._recipe = (frozenset((replicas or {}).items()), description_limit, renamed > 0)
        return catalog

    @classmethod
    def from_snapshot(cls, path: str | Path, *, description_limit: int = DESCRIPTION_LIMIT) -> ToolCatalog:
        """From a folder of `<server>.json` tools/list results, or one JSON file holding `{server: [tools]}`,
        a list of tools that each carry `server`, or one server's list (named after the file).

        Raises:
            CatalogError: the path is missing or a file is not one of these shapes (names file and item).
        """
        with collector_paused():
            try:
                catalog = _streamed(snapshot_lists(path), description_limit)
            except Unstreamable:
                catalog = None
            return catalog or cls.from_lists(read_snapshot(path), description_limit=description_limit)

    def updated(
        self,
        tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]],
        changed: Iterable[str],
        replicas: Mapping[str, str] | None = None,
        *,
        description_limit: int = DESCRIPTION_LIMIT,
    ) -> ToolCatalog:
        """`from_lists(tools_by_server, replicas, ...)` for a catalog built by `from_lists` from the same lists
        except those of the servers in `changed` (a server absent from `tools_by_server` has gone). Only the
        replica groups of changed servers are normalized again; everything else is shared with this catalog.
        Falls back to a full build when names could depend on other servers (a re-hashed name collision)."""
        groups = replicas or {}
        recipe = (frozenset(groups.items()), description_limit)
        changed = set(changed)
        if self._recipe is None or self._recipe[:2] != recipe or self._recipe[2]:
            return ToolCatalog.from_lists(tools_by_server, replicas, description_limit=description_limit)
        touched = {groups.get(server, server) for server in changed}
        servers = changed | {server for server, group in groups.items() if group in touched}
        lists = {server: tools_by_server[server] for server in servers if server in tools_by_server}
        tools, renamed = normalize_counting(lists, replicas)
        parts: dict[str, list[ToolEntry]] = {server: [] for server in servers}
        shown = _Shown()
        for tool in tools:
            parts[tool.server].append(_entry(tool, description_limit, shown))
        try:
            if renamed:
                raise ValueError("a name was re-hashed")
            catalog = self.replaced(parts)
        except ValueError:  # a hashed-name collision with another group: names depend on other servers
            return ToolCatalog.from_lists(tools_by_server, replicas, description_limit=description_limit)
        catalog._recipe = (*recipe, False)
        return catalog

    def replaced(self, parts: Mapping[str, Sequence[ToolEntry]]) -> ToolCatalog:
        """This catalog with each given server's entries (`ToolEntry.server`) replaced by the given ones
        ([] removes them); every other server's entries are shared, not copied.

        Raises:
            ValueError: an entry is given under another server's key, or a name would not be unique.
        """
        removed: list[int] = []
        added: list[ToolEntry] = []
        new_parts = dict(self._parts)
        for server, entries in parts.items():
            if any(entry.server != server for entry in entries):
                raise ValueError(f"ToolCatalog.replaced: an entry under {server!r} belongs to another server")
            removed += [self._position(entry.name) for entry in self._parts.get(server, ())]
            part = tuple(sorted(entries, key=lambda entry: entry.name))
            added += part
            if part:
                new_parts[server] = part
            else:
                new_parts.pop(server, None)
        added.sort(key=lambda entry: entry.name)
        entries, names = _merged(self._entries, self._names, removed, added)
        catalog = ToolCatalog.__new__(ToolCatalog)
        catalog._setup(entries, names, new_parts)
        if len(catalog._names) != len(self._names) - len(removed) + len(added) or any(
            catalog._names[i] == catalog._names[i + 1] for i in _neighbours(catalog._names, added)
        ):
            raise ValueError("ToolCatalog entries must have unique names")
        gone = [self._entries[position] for position in removed]
        catalog._by_alias, catalog._by_tool = _lookups(added, gone, self._by_alias, self._by_tool)
        catalog._digests = dict(self._digests)
        for server in parts:
            catalog._digests.pop(server, None)
        catalog._parent = weakref.ref(self)
        catalog._changed = frozenset(
            server for server in parts if self._parts.get(server, ()) != new_parts.get(server, ())
        )
        return catalog

    # ------------------------------------------------------------------ reading

    @property
    def version(self) -> str:
        """Content hash of every entry; equal catalogs have equal versions."""
        if self._version is None:
            digests = self._digests
            for server, part in self._parts.items():
                if server not in digests:
                    digests[server] = hashlib.sha256(
                        "\n".join(entry.digest for entry in part).encode("ascii")
                    ).hexdigest()
            joined = "\n".join(digests[server] for server in sorted(self._parts))
            self._version = hashlib.sha256(joined.encode("ascii")).hexdigest()[:VERSION_LENGTH]
        return self._version

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __repr__(self) -> str:
        return f"ToolCatalog({len(self)} tools, {len(self.servers())} servers, version {self.version})"

    @property
    def entries(self) -> tuple[ToolEntry, ...]:
        """Every entry, sorted by qualified name (the index's document order)."""
        if self._tuple is None:
            self._tuple = tuple(self._entries)
        return self._tuple

    def get(self, name: str) -> ToolEntry | None:
        """The entry with exactly this qualified name."""
        position = bisect.bisect_left(self._names, name)
        if position < len(self._names) and self._names[position] == name:
            return self._entries[position]
        return None

    def lookup(self, name: str) -> ToolEntry | None:
        """By qualified name, by the qualified name on another server of a collapsed tool, or by the bare
        tool name (the first by qualified name when several servers have a tool of that name)."""
        found = self.get(name) or self._by_alias.get(name)
        if found is None and name in self._by_tool:
            return self._by_tool[name][0]
        return found

    def matches(self, name: str) -> list[ToolEntry]:
        """Every entry `name` names exactly: its qualified name or alias (one entry), else every tool with
        that bare name, sorted by qualified name; [] when none."""
        found = self.get(name) or self._by_alias.get(name)
        return [found] if found is not None else list(self._by_tool.get(name, ()))

    def position(self, name: str) -> int:
        """Index of the entry with this qualified name in `entries` (the search index's document order).

        Raises:
            KeyError: no entry has this name.
        """
        return self._position(name)

    def _position(self, name: str) -> int:
        position = bisect.bisect_left(self._names, name)
        if position < len(self._names) and self._names[position] == name:
            return position
        raise KeyError(name)

    def servers(self) -> list[str]:
        """Every server with at least one tool here, sorted."""
        return sorted({server for part in self._parts.values() for server in part[0].servers} | self._parts.keys())

    def by_server(self) -> Mapping[str, tuple[ToolEntry, ...]]:
        """`ToolEntry.server` -> its entries, sorted by name (do not modify)."""
        return self._parts

    def changes(self, newer: ToolCatalog) -> tuple[list[ToolEntry], list[ToolEntry]] | None:
        """(entries only here, entries only in `newer`), per server: when `newer` was derived from this
        catalog (`replaced`, `updated`, `filtered`; directly or in a few steps) only the servers changed
        on the way are compared, otherwise every server's entries. None when no server's entries are
        the same in both (a fresh build is as cheap)."""
        servers = _changed_since(newer, self)
        shared = servers is not None
        if servers is None:
            servers = self._parts.keys() | newer._parts.keys()
        removed: list[ToolEntry] = []
        added: list[ToolEntry] = []
        for server in servers:
            before, after = self._parts.get(server, ()), newer._parts.get(server, ())
            if before is after or before == after:
                shared = shared or bool(before)
            else:
                removed += before
                added += after
        return (removed, added) if shared or not (self._parts and newer._parts) else None

    def filtered(self, predicate: Callable[[ToolEntry], bool]) -> ToolCatalog:
        """The entries `predicate` keeps (agent profiles); names stay as they are. A server whose entries
        are all kept shares them with this catalog."""
        parts: dict[str, Sequence[ToolEntry]] = {}
        for server, part in self._parts.items():
            kept = tuple(entry for entry in part if predicate(entry))
            if len(kept) != len(part):
                parts[server] = kept
        return self.replaced(parts) if parts else self


_LINEAGE_STEPS = 16
"""Derivations `changes` follows back from a catalog to an older one before comparing every server."""


def _changed_since(newer: ToolCatalog, older: ToolCatalog) -> set[str] | None:
    """The servers changed on the way from `older` to `newer` when `newer` derives from it within
    _LINEAGE_STEPS steps (each step records its parent and the servers it changed)."""
    servers: set[str] = set()
    current: ToolCatalog | None = newer
    for _ in range(_LINEAGE_STEPS):
        if current is None:
            return None
        if current is older:
            return servers
        servers |= current._changed
        current = current._parent() if current._parent is not None else None
    return None


def _merged(
    entries: Sequence[ToolEntry], names: list[str], removed: list[int], added: list[ToolEntry]
) -> tuple[list[ToolEntry], list[str]]:
    """`entries` and their `names` (sorted) without the positions `removed`, with `added` (sorted) merged in:
    copied once, then changed in place (each change moves the pointers after it, no object is touched)."""
    merged, merged_names = list(entries), list(names)
    for position in sorted(removed, reverse=True):
        del merged[position]
        del merged_names[position]
    for entry in added:
        at = bisect.bisect_left(merged_names, entry.name)
        merged.insert(at, entry)
        merged_names.insert(at, entry.name)
    return merged, merged_names


def _neighbours(names: list[str], added: Sequence[ToolEntry]) -> Iterator[int]:
    """Positions i where names[i] and names[i + 1] may be equal after merging `added` (around each added name)."""
    for entry in added:
        at = bisect.bisect_left(names, entry.name)
        for i in (at - 1, at):
            if 0 <= i < len(names) - 1:
                yield i


def _lookups(
    added: Iterable[ToolEntry],
    removed: Iterable[ToolEntry] = (),
    aliases: Mapping[str, ToolEntry] | None = None,
    by_tool: Mapping[str, tuple[ToolEntry, ...]] | None = None,
) -> tuple[dict[str, ToolEntry], dict[str, tuple[ToolEntry, ...]]]:
    """The alias and bare-name maps after removing `removed` and adding `added` (from empty maps by default).

    Aliases are a collapsed tool's qualified names on its other servers, each naming the first entry by
    name that has it; only the bare names of changed entries are looked at again.
    """
    new_aliases = dict(aliases or {})
    new_tools = dict(by_tool or {})
    touched: dict[str, list[ToolEntry]] = {}
    alias_tools: set[str] = set()
    if not new_tools:  # a new catalog's entries, sorted by name: so is each name's list
        for entry in added:
            touched.setdefault(entry.tool, []).append(entry)
            if len(entry.servers) > 1:
                alias_tools.add(entry.tool)
        new_tools = {tool: tuple(entries) for tool, entries in touched.items()}
        touched, added = {}, ()
    for entry in removed:
        touched.setdefault(entry.tool, list(new_tools.get(entry.tool, ()))).remove(entry)
        if len(entry.servers) > 1:
            alias_tools.add(entry.tool)
    for entry in added:
        touched.setdefault(entry.tool, list(new_tools.get(entry.tool, ()))).append(entry)
        if len(entry.servers) > 1:
            alias_tools.add(entry.tool)
    for tool, entries in touched.items():  # (an update's added entries: merged, then sorted)
        if entries:
            new_tools[tool] = tuple(sorted(entries, key=lambda entry: entry.name))
        else:
            new_tools.pop(tool, None)
    if aliases and alias_tools:  # one pass over the aliases (one per touched tool was quadratic: 42 s at 10,000)
        for alias in [alias for alias, entry in new_aliases.items() if entry.tool in alias_tools]:
            del new_aliases[alias]
    for tool in alias_tools:
        for entry in new_tools.get(tool, ()):
            for server in entry.servers[1:]:
                new_aliases.setdefault(qualified_name(server, entry.tool), entry)
    return new_aliases, new_tools


# ---------------------------------------------------------------------- snapshots


def _streamed(lists: Iterable[Listed], limit: int) -> ToolCatalog | None:
    """`from_lists` over snapshot lists read one server at a time (every server is alone: a snapshot has no
    replica groups), so the server's parsed list is gone before the next is read; a list repeating an
    earlier one's text reuses its tool names and shown fields. None when names would depend on other
    servers (two tools sharing a hashed name): build from all lists then."""
    parts: dict[str, list[ToolEntry]] = {}
    # per list handed over: (tool name, shown fields) of each of its tools
    read: list[list[tuple[str, tuple[Any, ...]]]] = []
    fields = _Shown().fields
    for server, tools, repeats in lists:
        if repeats is None:
            shown = [(tool, fields(raw, limit)) for tool, raw in kept_alone(tools)]
        else:
            shown = read[repeats]
        read.append(shown)
        servers = (server,)
        name = names_on(server)
        parts[server] = [_new_entry(name(tool), server, servers, tool, *found) for tool, found in shown]
    try:
        catalog = ToolCatalog(entry for part in parts.values() for entry in part)
    except ValueError:  # two tools share a name: normalize_counting re-hashes one, over every server
        return None
    catalog._recipe = (frozenset(), limit, False)
    return catalog


class _Shown:
    """Within one build, what `_entry` made of each distinct definition, so that the same tool offered by
    many servers (replicas, a registry's deployments of one server) is read once and its entries share
    texts and schemas. Definitions are told apart by their `marshal` bytes (exact types: 1, 1.0 and true
    differ); the bytes of distinct definitions are held until the build ends."""

    def __init__(self) -> None:
        self._seen: dict[bytes, tuple[Any, ...]] = {}

    def fields(self, raw: Mapping[str, Any], limit: int) -> tuple[Any, ...]:
        if type(raw) is not dict:
            return _shown_fields(raw, limit)
        try:
            key = marshal.dumps(raw)
        except ValueError:  # a value marshal does not take (a subclass, an object): read it alone
            return _shown_fields(raw, limit)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = _shown_fields(raw, limit)
        return found


def _entry(tool: NormalizedTool, limit: int = DESCRIPTION_LIMIT, shown: _Shown | None = None) -> ToolEntry:
    """Read the wire-shaped definition (camelCase keys) without trusting its types or its text.

    Descriptions (the tool's and those inside its schemas) pass through `sanitize_text` here, once,
    so every path that shows a tool to a model or a terminal shows the same cleaned, capped text.
    With `shown`, a definition equal to one seen before in the same build is not read again.
    """
    raw = tool.definition
    fields = shown.fields(raw, limit) if shown is not None else _shown_fields(raw, limit)
    return _new_entry(tool.name, tool.server, tool.servers, tool.tool, *fields)


def _shown_fields(raw: Mapping[str, Any], limit: int) -> tuple[Any, ...]:
    """title, description, summary, input schema, output schema and annotations of a raw definition."""
    description = sanitize_text(raw.get("description"), limit)
    schema = raw.get("inputSchema", raw.get("input_schema"))
    output = raw.get("outputSchema", raw.get("output_schema"))
    annotations = raw.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, Mapping) else None
    title = raw.get("title")
    if not isinstance(title, str) and annotations is not None:
        title = annotations.get("title")
    return (
        sanitize_title(title, limit),
        description,
        one_line(description),
        sanitize_schema(dict(schema), limit) if isinstance(schema, Mapping) else dict(_EMPTY_SCHEMA),
        sanitize_schema(dict(output), limit) if isinstance(output, Mapping) else None,
        annotations,
    )
