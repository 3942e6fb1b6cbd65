"""Tool-list snapshots on disk: a folder of `<server>.json` tools/list results, or one JSON file holding
`{server: [tools]}`, a list of tools that each carry `server`, or one server's list (named after the file).

`snapshot_lists` hands them over one server at a time where it can (a folder, file by file; a mapping
file, member by member), so a catalog built from a large snapshot never holds the whole parsed file: what
each server's list leaves behind is reused by the next instead of scattering the catalog over memory that
can no longer be given back. A list whose JSON text repeats an earlier one's character for character (a
registry's deployments of one server) is not parsed again: it is handed over as a repeat of that one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..._errors import CatalogError

__all__ = ["Listed", "Unstreamable", "read_snapshot", "snapshot_lists"]

_RESULT_KEYS = {"tools", "nextCursor", "_meta"}
"""Keys of a `tools/list` result: a JSON object with only these is one server's list, not a mapping."""
_WHITESPACE = re.compile(r"[ \t\n\r]*")
"""What JSON allows between tokens (json.decoder's own pattern)."""


_REPEAT_KEY = 64
"""Characters at the start of a list's JSON text that find the earlier list it may repeat."""


class Listed(NamedTuple):
    """One server's list from `snapshot_lists`."""

    server: str
    tools: list[dict[str, Any]]
    """Its tools; [] when `repeats` is set."""
    repeats: int | None = None
    """The position, in the order handed over, of the earlier list whose JSON text this one's is exactly
    (so its parse would be equal): use what was made of that one."""


class Unstreamable(Exception):
    """Raised by `snapshot_lists` part-way: this file is not a plain `{server: [tools]}` object (or has a
    fault). Read it whole with `read_snapshot`, which gives its lists or the error naming the fault."""


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
    text = _read_text(path)
    try:
        return json.loads(text)
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
        if not isinstance(tool, dict):
            raise CatalogError(f"{path}: server {server!r}: tool {index} is {type(tool).__name__}, not an object")
    return data  # parsed here and held by no one else: no copy needed


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


def snapshot_lists(path: str | Path) -> Iterator[Listed]:
    """Each server's list of a snapshot, as `read_snapshot` reads them but one at a time (a server named
    twice in a file comes twice: the later list wins, as in `read_snapshot`).

    Raises:
        CatalogError: as `read_snapshot`, for a folder and a missing or unreadable path.
        Unstreamable: a file that is not a plain mapping, or has a fault (possibly after some servers).
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(file for file in path.glob("*.json") if file.is_file())
        if not files:
            raise CatalogError(f"{path}: snapshot folder holds no <server>.json files")
        for file in files:
            yield Listed(file.stem, _server_list(_read_json(file), file, file.stem))
        return
    if not path.is_file():
        raise CatalogError(f"{path}: snapshot not found (expected a folder of <server>.json or a JSON file)")
    try:
        yield from _members(_read_text(path), path)
    except (CatalogError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise Unstreamable(str(exc)) from exc


def _members(text: str, path: Path) -> Iterator[Listed]:
    """The members of a JSON object text one by one; a tools/list result's keys held until the end shows
    whether the object is one server's result or a mapping that happens to name such servers."""
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    if not text.startswith("{", at):
        raise Unstreamable("not a JSON object")
    at = _skip(text, at + 1)
    held: dict[str, Any] = {}
    lists = _Lists(text)
    while not text.startswith("}", at):
        if not text.startswith('"', at):
            raise Unstreamable("not a member name")
        server, at = decoder.raw_decode(text, at)
        at = _skip(text, at)
        if not text.startswith(":", at):
            raise Unstreamable("no ':' after a member name")
        start = _skip(text, at + 1)
        repeat = None if server in _RESULT_KEYS else lists.repeated(start)
        if repeat is not None:
            earlier, at = repeat
            yield Listed(server, [], earlier)
            lists.count += 1
        else:
            tools, at = decoder.raw_decode(text, start)
            if server in _RESULT_KEYS:
                held[server] = tools
            else:
                yield Listed(server, _server_list(tools, path, server))
                lists.add(start, at)
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif not text.startswith("}", at):
            raise Unstreamable("no ',' between members")
    if _skip(text, at + 1) != len(text):
        raise Unstreamable("data after the object")
    if not lists.count and "tools" in held:
        yield Listed(path.stem, _server_list(held, path, path.stem))
        return
    for server, tools in held.items():
        yield Listed(server, _server_list(tools, path, server))


class _Lists:
    """Where each list handed over lies in the snapshot text, to tell when a later list is the same text.

    A JSON array ends at its closing bracket, so text equal to an earlier list's, from where a value
    starts, is that whole value, and parses to an equal list.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._spans: dict[str, tuple[int, int, int]] = {}
        """First characters -> (position, start, end) of the latest list handed over that starts with them."""
        self.count = 0
        """Lists handed over so far."""

    def add(self, start: int, end: int) -> None:
        """The list just handed over lies at text[start:end]."""
        self._spans[self._text[start : start + _REPEAT_KEY]] = (self.count, start, end)
        self.count += 1

    def repeated(self, at: int) -> tuple[int, int] | None:
        """(position of the earlier list, end of this one) when the text at `at` repeats an earlier list."""
        found = self._spans.get(self._text[at : at + _REPEAT_KEY])
        if found is None:
            return None
        position, start, end = found
        if self._text[at : at + end - start] != self._text[start:end]:
            return None
        return position, at + end - start


def _skip(text: str, at: int) -> int:
    """Past the whitespace at `at`."""
    found = _WHITESPACE.match(text, at)
    return found.end() if found is not None else at


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read snapshot: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: snapshot is not UTF-8 text") from None
