"""The tool catalog: normalized tools as immutable entries, with a content-hash version.

Built from a live manager, a snapshot on disk or plain lists; everything downstream (ranking, planning,
the gateway) reads a `ToolCatalog` and never the servers, so a catalog is a value: same tools, same
version, same plan.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._errors import CatalogError
from ._normalization import (
    DESCRIPTION_LIMIT,
    NormalizedTool,
    normalize,
    one_line,
    qualified_name,
    sanitize_schema,
    sanitize_text,
)

__all__ = ["ToolCatalog", "ToolEntry", "read_snapshot"]

VERSION_LENGTH = 16
"""Hex digits of the catalog version (64 bits of sha256): ample to tell catalog states apart."""

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
"""What a tool without a usable `inputSchema` is shown with: it takes no arguments."""

_RESULT_KEYS = {"tools", "nextCursor", "_meta"}
"""Keys of a `tools/list` result: a JSON object with only these is one server's list, not a mapping."""


@dataclass(frozen=True)
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

    def definition(self) -> dict[str, Any]:
        """The definition as sent to a model: qualified name, description, input schema."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    @functools.cached_property
    def digest(self) -> str:
        """Content hash of everything the entry shows (names, servers, texts, schemas)."""
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
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ToolCatalog:
    """Immutable set of tools, sorted by qualified name; `version` changes whenever any tool changes."""

    def __init__(self, entries: Iterable[ToolEntry] = ()) -> None:
        self._entries = tuple(sorted(entries, key=lambda entry: entry.name))
        self._by_name = {entry.name: entry for entry in self._entries}
        if len(self._by_name) != len(self._entries):
            raise ValueError("ToolCatalog entries must have unique names")
        self._positions = {entry.name: position for position, entry in enumerate(self._entries)}
        self._by_alias: dict[str, ToolEntry] = {}
        self._by_tool: dict[str, list[ToolEntry]] = {}
        for entry in self._entries:
            for server in entry.servers[1:]:
                self._by_alias.setdefault(qualified_name(server, entry.tool), entry)
            self._by_tool.setdefault(entry.tool, []).append(entry)
        digest = hashlib.sha256("\n".join(entry.digest for entry in self._entries).encode("ascii"))
        self._version = digest.hexdigest()[:VERSION_LENGTH]

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
        tools = normalize(tools_by_server, replicas)
        return cls(_entry(tool, description_limit) for tool in tools)

    @classmethod
    def from_snapshot(cls, path: str | Path, *, description_limit: int = DESCRIPTION_LIMIT) -> ToolCatalog:
        """From a folder of `<server>.json` tools/list results, or one JSON file holding `{server: [tools]}`,
        a list of tools that each carry `server`, or one server's list (named after the file).

        Raises:
            CatalogError: the path is missing or a file is not one of these shapes (names file and item).
        """
        return cls.from_lists(read_snapshot(path), description_limit=description_limit)

    # ------------------------------------------------------------------ reading

    @property
    def version(self) -> str:
        """Content hash of every entry; equal catalogs have equal versions."""
        return self._version

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return f"ToolCatalog({len(self)} tools, {len(self.servers())} servers, version {self._version})"

    @property
    def entries(self) -> tuple[ToolEntry, ...]:
        """Every entry, sorted by qualified name (the index's document order)."""
        return self._entries

    def get(self, name: str) -> ToolEntry | None:
        """The entry with exactly this qualified name."""
        return self._by_name.get(name)

    def lookup(self, name: str) -> ToolEntry | None:
        """By qualified name, by the qualified name on another server of a collapsed tool, or by the bare
        tool name (the first by qualified name when several servers have a tool of that name)."""
        found = self._by_name.get(name) or self._by_alias.get(name)
        if found is None and name in self._by_tool:
            return self._by_tool[name][0]
        return found

    def matches(self, name: str) -> list[ToolEntry]:
        """Every entry `name` names exactly: its qualified name or alias (one entry), else every tool with
        that bare name, sorted by qualified name; [] when none."""
        found = self._by_name.get(name) or self._by_alias.get(name)
        return [found] if found is not None else list(self._by_tool.get(name, ()))

    def position(self, name: str) -> int:
        """Index of the entry with this qualified name in `entries` (the search index's document id)."""
        return self._positions[name]

    def servers(self) -> list[str]:
        """Every server with at least one tool here, sorted."""
        return sorted({server for entry in self._entries for server in entry.servers})

    def filtered(self, predicate: Callable[[ToolEntry], bool]) -> ToolCatalog:
        """The entries `predicate` keeps (agent profiles); names stay as they are."""
        return ToolCatalog(entry for entry in self._entries if predicate(entry))


# ---------------------------------------------------------------------- snapshots


def _entry(tool: NormalizedTool, limit: int = DESCRIPTION_LIMIT) -> ToolEntry:
    """Read the wire-shaped definition (camelCase keys) without trusting its types or its text.

    Descriptions (the tool's and those inside its schemas) pass through `sanitize_text` here, once,
    so every path that shows a tool to a model or a terminal shows the same cleaned, capped text.
    """
    raw = tool.definition
    description = sanitize_text(raw.get("description"), limit)
    schema = raw.get("inputSchema", raw.get("input_schema"))
    output = raw.get("outputSchema", raw.get("output_schema"))
    annotations = raw.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, Mapping) else None
    title = raw.get("title")
    if not isinstance(title, str) and annotations is not None:
        title = annotations.get("title")
    return ToolEntry(
        name=tool.name,
        server=tool.server,
        servers=tool.servers,
        tool=tool.tool,
        title=one_line(sanitize_text(title, limit)) or None if isinstance(title, str) else None,
        description=description,
        summary=one_line(description),
        input_schema=sanitize_schema(dict(schema), limit) if isinstance(schema, Mapping) else dict(_EMPTY_SCHEMA),
        output_schema=sanitize_schema(dict(output), limit) if isinstance(output, Mapping) else None,
        annotations=annotations,
    )


def read_snapshot(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """`{server: [tool dicts]}` from a snapshot folder or file (see `ToolCatalog.from_snapshot`)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(file for file in path.glob("*.json") if file.is_file())
        if not files:
            raise CatalogError(f"{path}: snapshot folder holds no <server>.json files")
        return {file.stem: _server_list(_read_json(file), file, file.stem) for file in files}
    if not path.is_file():
        raise CatalogError(f"{path}: snapshot not found (expected a folder of <server>.json or a JSON file)")
    data = _read_json(path)
    if isinstance(data, Mapping) and set(data) <= _RESULT_KEYS and "tools" in data:
        return {path.stem: _server_list(data, path, path.stem)}
    if isinstance(data, Mapping):
        return {str(server): _server_list(tools, path, str(server)) for server, tools in data.items()}
    if isinstance(data, list):
        return _tools_with_server(data, path)
    raise CatalogError(f"{path}: expected a JSON object or list of tools, got {type(data).__name__}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read snapshot: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: snapshot is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: invalid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    except RecursionError:  # Python's JSON parser recurses per nesting level
        raise CatalogError(f"{path}: JSON nested too deeply to be a tool catalog") from None


def _server_list(data: Any, path: Path, server: str) -> list[dict[str, Any]]:
    """One server's tools: a list of tool objects, or a tools/list result `{"tools": [...]}`."""
    if isinstance(data, Mapping) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise CatalogError(f"{path}: server {server!r}: expected a list of tools, got {type(data).__name__}")
    for index, tool in enumerate(data):
        if not isinstance(tool, Mapping):
            raise CatalogError(f"{path}: server {server!r}: tool {index} is {type(tool).__name__}, not an object")
    return [dict(tool) for tool in data]


def _tools_with_server(data: list[Any], path: Path) -> dict[str, list[dict[str, Any]]]:
    """A list of tools each carrying `server` (retrieval sets); without `server`, one server named by file."""
    if not any(isinstance(tool, Mapping) and "server" in tool for tool in data):
        return {path.stem: _server_list(data, path, path.stem)}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for index, tool in enumerate(data):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("server"), str):
            raise CatalogError(f"{path}: item {index} has no 'server' string (every tool needs one)")
        definition = {key: value for key, value in tool.items() if key != "server"}
        grouped.setdefault(tool["server"], []).append(definition)
    return grouped
