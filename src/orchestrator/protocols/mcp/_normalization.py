"""Provider-safe, unique, stable tool names; exact duplicates collapsed; untrusted text made one line.

Model APIs accept tool names matching `^[A-Za-z0-9_-]{1,64}$`; MCP servers use dots, spaces, unicode,
long names and each other's names. Every tool gets `server__tool` when that is lossless, and otherwise a
sanitised, truncated name that ends in a hash of the exact original (server, tool). The scheme, and why
it cannot collide, is in docs/naming.md. Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any

__all__ = [
    "DESCRIPTION_LIMIT",
    "NAME_PATTERN",
    "NormalizedTool",
    "normalize",
    "one_line",
    "qualified_name",
    "reverse_map",
    "sanitize_schema",
    "sanitize_text",
]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What Anthropic and OpenAI accept as a tool name. Check with `fullmatch`: `$` also matches before a
final newline."""

MAX_NAME_LENGTH = 64
"""The provider limit in NAME_PATTERN."""
SEPARATOR = "__"
"""Between server and tool. A lossless server part never contains it nor ends in "_", so the first "__"
of a lossless name is always the split point and `server__tool` decodes uniquely."""
HASH_LENGTH = 12
"""Hex digits of sha256 kept: 48 bits. Two different tools only collide if their sanitised prefixes are
also equal; even 10,000 tools sharing one prefix collide with probability ~2e-7."""
HASH_MARK = "-"
"""Joins the readable part and the hash. Lossless names never end in MARK + 12 hex (such a tool is
hashed instead), so a lossless name can never equal a hashed one."""
SERVER_KEEP = 20
"""When server and tool together are too long, the server part keeps at least this many characters so a
human still sees where the tool lives; the tool part gets the rest."""
SUMMARY_LIMIT = 160
"""Default cap of `one_line`: about two dozen words, enough to tell tools apart in a directory line."""
ELLIPSIS = "…"
DESCRIPTION_LIMIT = 8000
"""Default cap of `sanitize_text` (`mcp.max_description_chars`): above the longest real description of the
590 tools in ../shared/data (about 7,000 characters); a 1 MB one would cost ~250k tokens per prompt."""
TRUNCATION_MARK = " … [cut: {omitted:,} more characters]"
MAX_BLANK_LINES = 2
"""Runs of empty lines kept in a description (more carry nothing but can push text out of view)."""
QUOTE_MARK = "> "
"""Put before a first line that would otherwise read as a role turn or section start."""

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|[@-Z\\-_])?")
"""Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks), DCS/SOS/PM/APC and
two-byte escapes; a lone ESC goes too. Removed before the per-character filter so no payload survives."""
_ROLES = r"(?:system|assistant|user|human|developer|tool|function|ai|model|instructions?)"
_ROLE_LINE = re.compile(
    rf"^\s*(?:[*_]{{0,3}}(?:{_ROLES}[*_]{{0,3}}\s*:|[ha][*_]{{0,3}}\s*:[*_]{{0,3}}(?!\S))|#{{1,6}}\s*{_ROLES}\b|<[|｜]|</?(?:{_ROLES}|im_start|im_end|(?:start|end)_of_turn)\b[^>]*>"
    r"|\[/?(?:INST|SYS|SYSTEM)\]|<</?SYS>>)",
    re.IGNORECASE,
)
"""A line that could read as a new role turn (also `H:` / `A:`, the abbreviated Human / Assistant turns of
Anthropic's old prompt format), a chat-template token (`<|`, whole or cut short, DeepSeek's
`<｜` with fullwidth bars, Gemma's `<start_of_turn>` / `<end_of_turn>`) or a role/instructions section.
Ordinary headings, XML-ish tags such as <examples> and rules stay: real descriptions use them."""
_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s|$)")
"""A markdown heading: in a prompt it would start a section of the prompt itself (`## Tools`)."""
_LISTING = re.compile(r"^\s*(?:[\w.-]+\s+[-–—‐−]\s+\S|[\w.-]+\s+\(\d+\s+tools?\))")
"""A line shaped like orchestrator's directory (`name - summary`, `server (2 tools): a__x, a__y`): a fake
tool entry or group, whatever letters and dash it uses."""
_BLOCK_FENCE = re.compile(rf"^\s*(?:```|~~~)\s*{_ROLES}\b", re.IGNORECASE)
"""A code fence labelled as a role or instructions (```system)."""
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
"""A line that opens or closes a code block, as markdown reads it (CommonMark fenced code blocks)."""
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
"""A line of `=` or `-` alone: under a line of text, markdown makes that line a heading (`Tools` / `=====`)."""
_PROMPT_TAG = re.compile(
    rf"<(/?\s*(?:{_ROLES}|important|hidden|im_start|im_end|(?:start|end)_of_turn|tool_description|tool_result|tool_use|"
    r"function_calls|function_results|functions?|antml:[\w-]+)\b[^<>\n]{0,200})>|<[|｜]([^|｜<>\n]{0,40})[|｜]>",
    re.IGNORECASE,
)
"""Tags a prompt is framed with (roles, instructions, tool descriptions and results) and chat-template
tokens, anywhere in a line: shown with ‹ › so they cannot open or close a block around the text."""
_SCHEMA_TEXT_KEYS = ("description", "title")
_SCHEMA_VALUE_KEYS = frozenset(("enum", "const", "default", "examples", "pattern"))
"""Schema keys whose values a call must match: never rewritten."""


def _any_line(pattern: str) -> str:
    """A line pattern (`^\\s*...`) for a search over a whole text (MULTILINE): its leading blanks stop at a
    line break. `^\\s*` ran on from every line start through every line break after it, quadratic in the
    number of lines (8,000 line breaks: 15 s holding the event loop); a line the whole-text search must
    find starts at its own line start just the same."""
    return pattern.replace(r"^\s*", r"^[^\S\n]*", 1)


_ANY_ROLE_LINE = re.compile(_any_line(_ROLE_LINE.pattern), re.IGNORECASE | re.MULTILINE)
_ANY_STRUCTURE_LINE = re.compile(
    f"{_HEADING.pattern}|{_any_line(_LISTING.pattern)}|(?i:{_any_line(_BLOCK_FENCE.pattern)})", re.MULTILINE
)
"""Any line `inert_lines` would quote (heading, directory entry, role fence), in a whole text at once."""
_ANY_SETEXT_LINE = re.compile(rf"\n{_SETEXT.pattern}(?:\n|$)")
"""Any line of `=` or `-` alone below another (what `inert_lines` quotes when that one holds text); it opens
with a line break, which the regex engine finds fast."""
_BLANK_RUN = re.compile(r"(?:\A|\n)[ \t]*\n[ \t]*\n[ \t]*(?:\n|\Z)")
"""Three blank lines in a row (spaces and tabs only)."""

_PART = re.compile(r"[A-Za-z0-9_-]+")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_-]+")
_UNDERSCORE_RUN = re.compile(r"_{2,}")
_HASHED_TAIL = re.compile(rf"{re.escape(HASH_MARK)}[0-9a-f]{{{HASH_LENGTH}}}\Z")
_READABLE_BUDGET = MAX_NAME_LENGTH - len(SEPARATOR) - len(HASH_MARK) - HASH_LENGTH
"""49 characters of server + tool in a hashed name."""
MIN_NAME_LENGTH = 24
"""Shortest `max_length` a name may be fitted into: separator, mark and hash take 15 characters, and the
readable part keeps at least 9 so a human still sees which server and tool it is."""
_PART_CACHE = 1 << 16
"""Server and tool names whose checks and sanitised forms are kept: a server's tools and the tools many
servers share are named from them again and again."""
_WORD_BREAK_MIN = 0.5
"""`one_line` cuts at the last space only if that keeps at least half the limit; otherwise mid-word."""


@dataclass(frozen=True)
class NormalizedTool:
    """One catalog entry: a tool, or one tool offered identically by several servers."""

    name: str
    """Qualified, provider-safe, unique in the catalog: `qualified_name(server, tool)`."""
    server: str
    """The first server offering it, in sorted order of server names."""
    servers: tuple[str, ...]
    """Every server offering this exact tool (same name, description and input schema), sorted."""
    tool: str
    """The original tool name on the server: what `tools/call` needs."""
    definition: Mapping[str, Any] = field(hash=False)
    """The raw tools/list dict of `server` (name, title, description, inputSchema, ...), untouched."""


def qualified_name(server: str, tool: str, max_length: int = MAX_NAME_LENGTH) -> str:
    """The provider-safe name of `tool` on `server`; depends only on these two strings (and `max_length`).

    `server__tool` when both parts are already safe and it fits; otherwise the sanitised, truncated
    parts followed by `-` and a hash of the exact originals, e.g. `my_server__read_file-3fa9c0d2e1b4`.
    `max_length` below 64 fits the name into what is left of a model API's 64 characters after a client's
    own prefix (Claude Code's `mcp__orchestrator__`); at least MIN_NAME_LENGTH.
    """
    if _is_lossless(server, tool, max_length):
        return f"{server}{SEPARATOR}{tool}"
    return _hashed_name(server, tool, attempt=0, max_length=max_length)


def hashed_name(server: str, tool: str, *, max_length: int = MAX_NAME_LENGTH, attempt: int = 0) -> str:
    """The hashed form of `qualified_name` (readable prefix, `-`, 12 hex digits of the originals' hash)
    within `max_length`; `attempt` > 0 re-hashes, for the rare name already taken."""
    return _hashed_name(server, tool, attempt, max_length)


def one_line(text: object, limit: int = SUMMARY_LIMIT) -> str:
    """Untrusted server text as one safe summary line of at most `limit` characters.

    Control, format (zero-width, bidi), surrogate, private-use and unassigned characters are dropped;
    line and paragraph separators and every whitespace run become one space; a text longer than `limit`
    is cut at a word boundary and ends in an ellipsis. A server cannot add lines to a prompt this way.
    """
    if not text or limit <= 0:
        return ""
    if not isinstance(text, str):  # odd input from a server (a number, a list): describe, never raise
        text = str(text)
    kept = text.translate(_ASCII_SAFE if text.isascii() else _SAFE)
    line = " ".join(kept.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - len(ELLIPSIS)]
    space = cut.rfind(" ")
    if space >= limit * _WORD_BREAK_MIN:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + ELLIPSIS


def sanitize_title(title: object, limit: int = DESCRIPTION_LIMIT) -> str | None:
    """A server's title (a tool's, its annotations', a resource's or prompt's) as every path shows it:
    `sanitize_text`, then one line; None for an empty one or one that is not a string."""
    return one_line(sanitize_text(title, limit)) or None if isinstance(title, str) else None


def sanitize_text(text: object, limit: int = DESCRIPTION_LIMIT) -> str:
    """Untrusted server text (a tool or parameter description) made safe for prompts and terminals.

    The one sanitizer every path to a model or a terminal goes through (full mode, pinned tools,
    expand_tools, every provider format, `tools expand`): terminal escape sequences, control, format
    (zero-width, bidi), surrogate, private-use and unassigned characters are removed; line separators
    become newlines and other odd whitespace a space (spaces, tabs and indentation stay). Then nothing in
    the text can imitate the structure around it (`inert_lines`): a line that could fake a role turn or a
    chat-template token (`SYSTEM:`, `<|im_start|>`, `[INST]`) is joined to the line before it; a heading
    (`## Tools`), a line shaped like a directory entry (`name - summary`) or a fence labelled as a role is
    quoted (`> `, heading marks dropped); role, instruction and tool-framing tags anywhere become ‹tag›.
    Blank-line runs shrink to two; the result is cut at `limit` characters (at a word boundary) with a
    marker saying how much was left out. Pure; idempotent below the limit.
    """
    if text is None or limit <= 0:
        return ""
    if type(text) is str and _is_clean(text, limit):
        return text
    raw = text if isinstance(text, str) else str(text)
    raw = _ANSI.sub("", raw.replace("\r\n", "\n"))
    kept = raw.translate(_ASCII_TEXT if raw.isascii() else _TEXT)
    result = "\n".join(inert_lines(kept.split("\n")))
    if len(result) <= limit:
        return result
    cut = result[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= limit * _WORD_BREAK_MIN:
        cut = cut[:space]
    return cut.rstrip() + TRUNCATION_MARK.format(omitted=len(result) - len(cut.rstrip()))


def inert_lines(raw_lines: Iterable[str]) -> list[str]:
    """Lines of tool text that cannot imitate the prompt around them (see `sanitize_text`)."""
    lines: list[str] = []
    blank = 0
    fence: str | None = None  # the open code block's fence, where `# comment` lines are code, not headings
    for line in raw_lines:
        if not line.strip():
            blank += 1
            if blank <= MAX_BLANK_LINES:
                lines.append(line)
            continue
        blank = 0
        if "<" in line:
            line = _PROMPT_TAG.sub(_escape_tag, line)
        fenced = fence is not None
        if _BLOCK_FENCE.match(line):
            line = f"{QUOTE_MARK}{line.strip()}"  # quoted, it opens no code block
        elif line.lstrip().startswith(("```", "~~~")) and (fence_line := _FENCE.fullmatch(line)):
            fence = _next_fence(fence, fence_line)
        elif _fakes_a_turn(line, fenced):
            line = line.strip().lstrip("#").strip()  # a heading keeps its words, not its marks
            above = len(lines)
            while above and not lines[above - 1].strip():
                above -= 1
            if above and not _FENCE.fullmatch(lines[above - 1]):  # joined to the text line before it
                del lines[above:]
                line = f"{lines.pop().rstrip()} {line}"
            # The first line, one below a code fence (joined, the fence would be lost), or a join that reads as
            # a turn ("#" + "SYSTEM:") or as structure: a bare "##" or a directory line's start + the turn.
            if _fakes_a_turn(line, fenced) or _ANY_STRUCTURE_LINE.match(line):
                line = f"{QUOTE_MARK}{line}"
        elif _HEADING.match(line) and not (fenced and not line.lstrip().startswith("##")):
            heading = line.strip().lstrip("#").strip()
            if heading:  # a bare "##" titles nothing
                line = f"{QUOTE_MARK}{heading}"
        elif _LISTING.match(line) or (not fenced and _SETEXT.fullmatch(line) and lines and lines[-1].strip()):
            line = f"{QUOTE_MARK}{line.strip()}"
        lines.append(line)
    return lines


def _next_fence(fence: str | None, line: re.Match[str]) -> str | None:
    """The code block open after a fence line, as markdown reads it: a run of 3+ backticks (with no backtick
    after it: ```x``` is inline code) or tildes opens one; a run of the open fence's character, at least as
    long and with nothing after it, closes it; any other fence line inside a block is code."""
    run, rest = line.group(1), line.group(2)
    if fence is None:
        return None if run[0] == "`" and "`" in rest else run
    return None if run[0] == fence[0] and len(run) >= len(fence) and not rest.strip() else fence


def _escape_tag(found: re.Match[str]) -> str:
    inner = found.group(1)
    return f"‹{inner}›" if inner is not None else f"‹|{found.group(2)}|›"


def _is_clean(text: str, limit: int) -> bool:
    """Whether `sanitize_text` leaves `text` as it is, for the usual description: ASCII without control
    characters, no line that could fake a turn (searched over the whole text, which finds at least every
    line the per-line check would), no heading, directory-shaped line, role fence or prompt tag (each
    searched the same way) or heading underline, no run of more than MAX_BLANK_LINES blank lines, within
    `limit`."""
    return (
        len(text) <= limit
        and text.isascii()
        and _ASCII_UNSAFE.search(text) is None
        and _ANY_ROLE_LINE.search(text) is None
        and _ANY_STRUCTURE_LINE.search(text) is None
        and _ANY_SETEXT_LINE.search(text) is None
        and ("<" not in text or _PROMPT_TAG.search(text) is None)
        and _BLANK_RUN.search(text) is None
    )


def sanitize_schema(schema: Any, limit: int = DESCRIPTION_LIMIT) -> Any:
    """A JSON schema with every `description` and `title` string passed through `sanitize_text`.

    Only those annotation strings change: property names, `enum`, `const`, `default` and `pattern` are
    values a call must match and stay as the server sent them. Returns the same object when nothing
    changed, so an ordinary schema costs no copy.
    """
    if isinstance(schema, dict):
        changed: dict[str, Any] | None = None
        for key, value in schema.items():
            if key in _SCHEMA_TEXT_KEYS and isinstance(value, str):
                clean: Any = sanitize_text(value, limit)
            elif key in _SCHEMA_VALUE_KEYS or not isinstance(value, dict | list):
                continue  # values a call must match, and leaves (returned as they are)
            else:
                clean = sanitize_schema(value, limit)
            if clean is not value and clean != value:
                if changed is None:
                    changed = dict(schema)
                changed[key] = clean
        return schema if changed is None else changed
    if isinstance(schema, list):
        items = [sanitize_schema(item, limit) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    return schema


def normalize(
    tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]], replicas: Mapping[str, str] | None = None
) -> list[NormalizedTool]:
    """Every tool of every server with its qualified name, exact duplicates of replicas collapsed, by name.

    Registration order does not matter (servers are read in sorted order). Within one server a repeated
    tool name keeps its first listing (MCP requires unique names per server; calls could not tell them
    apart). `replicas` maps a server to its replica group (servers the user declared as copies of one
    another, or the same server configured twice): tools with the same name, description and input schema
    on servers of one group become one entry named after the first of them, callable on any of them. A
    server outside every group is its own: an identical definition offered by another server never
    answers for it (no shadowing). Odd input (missing or empty names, non-dict entries) never raises:
    non-dict entries are skipped, a missing name counts as "".
    """
    return normalize_counting(tools_by_server, replicas)[0]


def normalize_counting(
    tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]], replicas: Mapping[str, str] | None = None
) -> tuple[list[NormalizedTool], int]:
    """`normalize`, and how many names were re-hashed because two tools shared a hashed name (then a name
    depends on other servers' tools, and normalizing one replica group alone could name differently)."""
    resolved, renamed = _resolve_collisions(_offers(tools_by_server, replicas))
    return sorted(resolved, key=lambda entry: entry.name), renamed


def _offers(
    tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]], replicas: Mapping[str, str] | None
) -> list[NormalizedTool]:
    """Each distinct offer of each (replica group, tool), named after its first server; unsorted."""
    groups_of = replicas or {}
    sharing = Counter(groups_of.get(server, server) for server in tools_by_server)
    entries: list[NormalizedTool] = []
    # (replica group, tool) -> groups of identical offers, for servers that share a replica group
    by_tool: dict[tuple[str, str], list[list[tuple[str, Mapping[str, Any]]]]] = {}
    for server in sorted(tools_by_server):
        group = groups_of.get(server, server)
        if sharing[group] == 1:  # nothing to collapse with: every tool is its own entry
            entries += offers_alone(server, tools_by_server[server])
            continue
        for tool, definition in kept_alone(tools_by_server[server]):
            offers = by_tool.setdefault((group, tool), [])
            for offer in offers:
                if _same_tool(offer[0][1], definition):
                    offer.append((server, definition))
                    break
            else:
                offers.append([(server, definition)])
    entries += [
        NormalizedTool(
            name=qualified_name(offer[0][0], tool),
            server=offer[0][0],
            servers=tuple(server for server, _ in offer),
            tool=tool,
            definition=offer[0][1],
        )
        for (_replicas, tool), offers in by_tool.items()
        for offer in offers
    ]
    return entries


def offers_alone(server: str, tools: Sequence[Mapping[str, Any]] | None) -> list[NormalizedTool]:
    """The entries of a server alone in its replica group, unsorted: `normalize` for it alone, before
    names are checked against other servers' (`normalize_counting` re-hashes a name two tools share)."""
    servers = (server,)
    return [
        NormalizedTool(name, server, servers, tool, definition) for name, tool, definition in named_alone(server, tools)
    ]


def named_alone(server: str, tools: Sequence[Mapping[str, Any]] | None) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(qualified name, tool name, definition) of each tool of a server alone in its replica group, in
    its order: `offers_alone` without making a NormalizedTool of each."""
    name = names_on(server)
    for tool, definition in kept_alone(tools):
        yield name(tool), tool, definition


def kept_alone(tools: Sequence[Mapping[str, Any]] | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(tool name, definition) of each tool `named_alone` names, in the list's order: its definitions
    (others skipped), a repeated tool name's first."""
    seen: set[str] = set()
    offered: Sequence[object] = tools or ()  # a server's list is untrusted
    for definition in offered:
        if type(definition) is not dict and not isinstance(definition, Mapping):
            continue
        tool = _tool_name(definition)
        if tool in seen:
            continue
        seen.add(tool)
        yield tool, definition


def names_on(server: str) -> Callable[[str], str]:
    """`qualified_name(server, tool)` for the tools of one server, its part worked out once: naming a
    large snapshot's tools was mostly redoing the server's checks, sanitising and JSON per tool."""
    if type(server) is not str:
        return functools.partial(qualified_name, server)
    prefix = f"{server}{SEPARATOR}"
    room = MAX_NAME_LENGTH - len(prefix) if _lossless_server(server) else -1
    server_part = _server_part(server)
    server_keep = min(SERVER_KEEP, _READABLE_BUDGET // 2)
    head = f"[{_json_string(server)}, "

    def name(tool: str) -> str:
        if type(tool) is not str:
            return qualified_name(server, tool)
        if len(tool) <= room and _lossless_tool(tool):
            return prefix + tool
        tool_part = _sanitised(tool)
        keep = min(len(server_part), max(server_keep, _READABLE_BUDGET - len(tool_part)))
        readable = server_part[:keep].rstrip("_")
        readable_tool = tool_part[: _READABLE_BUDGET - len(readable)].rstrip("_")
        digest = hashlib.sha256(f"{head}{_json_string(tool)}]".encode("ascii")).hexdigest()[:HASH_LENGTH]
        return f"{readable}{SEPARATOR}{readable_tool}{HASH_MARK}{digest}"

    return name


def reverse_map(tools: Iterable[NormalizedTool], *, aliases: bool = True) -> dict[str, tuple[str, str]]:
    """Qualified name -> (server, original tool name), the map every call goes through.

    With `aliases`, a collapsed entry's other servers are reachable too: `qualified_name(s, tool)` maps
    to `(s, tool)` for every `s` in `servers`, so a name a model learned before a duplicate server was
    added (which renames the entry after the new first server) still routes. Entry names always win.
    """
    tools = sorted(tools, key=lambda entry: entry.name)
    mapping = {entry.name: (entry.server, entry.tool) for entry in tools}
    if aliases:
        for entry in tools:
            for server in entry.servers:
                mapping.setdefault(qualified_name(server, entry.tool), (server, entry.tool))
    return mapping


def _is_lossless(server: str, tool: str, max_length: int = MAX_NAME_LENGTH) -> bool:
    """True when `server__tool` is safe, fits, decodes uniquely and cannot look like a hashed name."""
    return (
        isinstance(server, str)
        and isinstance(tool, str)
        and len(server) + len(SEPARATOR) + len(tool) <= max_length
        and _lossless_server(server)
        and _lossless_tool(tool)
    )


@functools.lru_cache(maxsize=_PART_CACHE)
def _lossless_server(server: str) -> bool:
    """The server half of `_is_lossless` (a server's tools ask it once each)."""
    return _PART.fullmatch(server) is not None and SEPARATOR not in server and not server.endswith("_")


@functools.lru_cache(maxsize=_PART_CACHE)
def _lossless_tool(tool: str) -> bool:
    """The tool half of `_is_lossless` (the same tool names recur on many servers)."""
    return _PART.fullmatch(tool) is not None and _HASHED_TAIL.search(tool) is None


def _hashed_name(server: str, tool: str, attempt: int, max_length: int = MAX_NAME_LENGTH) -> str:
    """Readable prefix (server part first, then tool part) + mark + hash of the exact originals."""
    if not MIN_NAME_LENGTH <= max_length <= MAX_NAME_LENGTH:
        raise ValueError(f"max_length {max_length} is outside {MIN_NAME_LENGTH}..{MAX_NAME_LENGTH}")
    budget = _READABLE_BUDGET - (MAX_NAME_LENGTH - max_length)
    server_part = _server_part(server if isinstance(server, str) else str(server))
    tool_part = _sanitise(tool)
    keep = min(len(server_part), max(min(SERVER_KEEP, budget // 2), budget - len(tool_part)))
    server_part = server_part[:keep].rstrip("_")
    tool_part = tool_part[: budget - len(server_part)].rstrip("_")
    return f"{server_part}{SEPARATOR}{tool_part}{HASH_MARK}{_digest(server, tool, attempt)}"


@functools.lru_cache(maxsize=_PART_CACHE)
def _server_part(server: str) -> str:
    """The readable server part of a hashed name: sanitised, underscore runs and ends trimmed."""
    return _UNDERSCORE_RUN.sub("_", _sanitise(server)).strip("_")


def _sanitise(part: str) -> str:
    """ASCII-fold (é -> e, ｇ -> g, ﬁ -> fi), then each run of other characters becomes one `_`."""
    return _sanitised(part if isinstance(part, str) else str(part))


@functools.lru_cache(maxsize=_PART_CACHE)
def _sanitised(part: str) -> str:
    if part.isascii():  # NFKD changes no ASCII character
        return _INVALID_RUN.sub("_", part)
    decomposed = unicodedata.normalize("NFKD", part)
    folded = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _INVALID_RUN.sub("_", folded)


def _digest(server: str, tool: str, attempt: int) -> str:
    """Hash of the exact originals; JSON keeps the pair unambiguous and lone surrogates encodable."""
    key: list[Any] = [server, tool] if attempt == 0 else [server, tool, attempt]
    if type(server) is str and type(tool) is str:  # what json.dumps writes for two strings, without its setup
        payload = f"[{_json_string(server)}, {_json_string(tool)}{f', {attempt}' if attempt else ''}]"
    else:
        payload = json.dumps(key, ensure_ascii=True, default=str)
    return hashlib.sha256(payload.encode("ascii")).hexdigest()[:HASH_LENGTH]


def _tool_name(definition: Mapping[str, Any]) -> str:
    name = definition.get("name")
    return "" if name is None else name if isinstance(name, str) else str(name)


def _same_tool(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Exact duplicates: same description and input schema (the caller matched the name)."""
    return all(_identical(first.get(key), second.get(key)) for key in ("description", "inputSchema"))


def _identical(a: Any, b: Any) -> bool:
    """Deep equality that also compares types: `==` alone equates 1, 1.0 and true, which schemas tell
    apart. Dict key order never matters. Much cheaper than serialising both sides."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(value, b[key]) for key, value in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # boundary: odd values whose comparison raises count as different tools
        return False


def _resolve_collisions(entries: list[NormalizedTool]) -> tuple[list[NormalizedTool], int]:
    """Keep names unique even in the ~2^-48 case of two different tools sharing prefix and hash.

    Deterministic: colliding entries are ordered by (server, tool), distinct for every entry since a
    server offers a tool name once; the first keeps the name and the others are re-hashed with an attempt
    counter until free. Only in this case does a name depend on other tools.
    """
    names = [entry.name for entry in entries]
    if len(set(names)) == len(names):  # the usual case: no two tools share a name
        return entries, 0
    taken: set[str] = set()
    resolved: list[NormalizedTool] = []
    renamed = 0
    for entry in sorted(entries, key=lambda item: (item.name, item.server, item.tool)):
        name, attempt = entry.name, 0
        while name in taken:
            attempt += 1
            name = _hashed_name(entry.server, entry.tool, attempt)
        taken.add(name)
        renamed += name != entry.name
        resolved.append(entry if name == entry.name else _renamed(entry, name))
    return resolved, renamed


def _renamed(entry: NormalizedTool, name: str) -> NormalizedTool:
    return NormalizedTool(name, entry.server, entry.servers, entry.tool, entry.definition)


def _safe_char(char: str) -> str:
    """Drop characters that are invisible or can break a line; turn line/paragraph separators to space."""
    category = unicodedata.category(char)
    if char.isspace() or category in ("Zl", "Zp"):
        return " "
    if category.startswith("C") or char in _BLANK_MARKS:  # Cc control, Cf format (ZWSP, bidi), Cs, Co, Cn
        return ""
    return char


_BLANK_MARKS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0")
"""Characters outside category C that show nothing (a grapheme joiner, Hangul and Khmer fillers, Mongolian
selectors, the blank braille cell): before `SYSTEM:` or `##` they would keep the line from reading as one.
Emoji variation selectors stay (real descriptions have ⚠️)."""


def _fakes_a_turn(line: str, fenced: bool) -> bool:
    """A line that could read as a role turn, a chat-template token or a prompt section, also in look-alike
    letters (`ＳＹＳＴＥＭ：`, read through NFKC); inside a code block only role and template forms count
    (`# comment` there is code)."""
    if _ROLE_LINE.match(line) is None and (
        line.isascii() or _ROLE_LINE.match(unicodedata.normalize("NFKC", line)) is None
    ):
        return False
    return not (fenced and line.lstrip().startswith("#"))


def _text_char(char: str) -> str:
    """`_safe_char`, except that layout survives: line breaks, tabs and spaces are kept as sent."""
    if char == "\n" or unicodedata.category(char) in ("Zl", "Zp") or char in "\x0b\x0c\x1c\x1d\x1e\x85":
        return "\n"
    if char in " \t":
        return char
    return _safe_char(char)


_ASCII_SAFE = str.maketrans({chr(code): _safe_char(chr(code)) for code in range(128)})
"""`_safe_char` precomputed for ASCII: most descriptions are ASCII, and a per-character loop dominated
building a 10,000-tool catalog (about 1.7 s) before this table."""
_ASCII_TEXT = str.maketrans({chr(code): _text_char(chr(code)) for code in range(128)})
"""`_text_char` precomputed for ASCII (most descriptions)."""
_ASCII_UNSAFE = re.compile(
    "[" + re.escape("".join(chr(code) for code in range(128) if _text_char(chr(code)) != chr(code))) + "]"
)
"""The ASCII characters `sanitize_text` changes (controls but tab and newline)."""


class _CharTable(dict[int, str]):
    """A `str.translate` table filled per code point on first sight, from a per-character rule."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, code: int) -> str:
        found = self[code] = self._rule(chr(code))
        return found


_SAFE = _CharTable(_safe_char)
"""`_safe_char` for any text, at `str.translate`'s speed once a character has been seen."""
_TEXT = _CharTable(_text_char)
"""`_text_char` for any text."""
