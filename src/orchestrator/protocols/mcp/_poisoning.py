"""Instructions aimed at the model in what a server says about its tools: a local, offline detector.

    scan_tools(tools) -> [findings per tool]   one server's listing (its tools are each other's own names)
    scan_tool(tool, own=names)                 one tool

Every string of a tool is read (name, title, description, every schema key and value, annotations and
any other key), because a poisoned tool hides its payload wherever a model will read it. The rules
(`_poisoning_rules.py`) look for the shape and intent of an instruction, not for known payloads: blocks
addressed to the model (`<IMPORTANT>`, comments, `[SYSTEM: ...]`, chat-template tokens), role turns,
orders to disregard instructions or safeguards, to read credential files or move secrets and the
conversation into an argument or an address, to hide something from the user, to change how other
servers' tools are used; invisible, bidirectional and mixed-script characters; text imitating
orchestrator's own prompt; and hex or base64 payloads, decoded and read again.

No detector catches everything: a description that only praises itself, or an address offered as a
default, reads like any other. Pinned definitions (`_pins.py`) hold back every change whatever it says,
so a rug pull is caught by the change, not by its wording.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _poisoning_rules as rules
from ._normalization import one_line

__all__ = ["FINDING_KINDS", "Finding", "scan_tool", "scan_tools"]

FINDING_KINDS: dict[str, str] = rules.KINDS
"""Each kind of finding and what it means, for `tools audit` and docs/security.md."""
EXCERPT_CHARS = 100
"""Longest excerpt of the offending text kept with a finding (one line, sanitized)."""
_SCHEMA_WORDS = frozenset(
    "type string object number integer boolean array null description properties required items title "
    "default enum const format minimum maximum minLength maxLength minItems maxItems pattern additionalProperties "
    "anyOf oneOf allOf not $schema $ref $defs definitions examples uniqueItems exclusiveMinimum exclusiveMaximum "
    "inputSchema outputSchema annotations name readOnlyHint destructiveHint idempotentHint openWorldHint "
    "patternProperties propertyNames minProperties maxProperties multipleOf nullable deprecated".split()
)
"""JSON-schema and MCP keywords: keys every tool has, never read as identifiers."""


@dataclass(frozen=True)
class Finding:
    """One piece of a tool's text that reads as an instruction to the model."""

    kind: str
    """One of FINDING_KINDS."""
    where: str
    """Where in the tool it sits: `description`, `name`, `inputSchema.properties.notes.description`..."""
    excerpt: str
    """The text around it, one line, at most EXCERPT_CHARS characters."""

    def __str__(self) -> str:
        return f"{self.kind} in {self.where}: {self.excerpt}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "where": self.where, "excerpt": self.excerpt}


def scan_tool(tool: Mapping[str, Any], *, own: Collection[str] = ()) -> tuple[Finding, ...]:
    """What in one tool reads as an instruction to the model; `own` names the tools and parameters of its
    server (a directive about one of them is ordinary documentation, about another server's is not)."""
    return scan_tools([tool], own=own)[0]


def scan_tools(tools: Sequence[Mapping[str, Any]], *, own: Collection[str] = ()) -> list[tuple[Finding, ...]]:
    """Findings for each tool of one server's listing, in order (empty tuples for clean tools).

    Every name, key and one-word value of the listing (and `own`) counts as the server's own: a
    description may tell the model how to use its siblings. Never raises on odd input: non-dict tools
    have no findings.
    """
    text = _Text(own)
    for index, tool in enumerate(tools):
        if isinstance(tool, Mapping):
            text.add_tool(index, tool if isinstance(tool, dict) else dict(tool))
    found: list[dict[tuple[str, str], Finding]] = [{} for _ in tools]

    def add(index: int, kind: str, value: str, excerpt: str) -> None:
        where = _where(tools[index], value)
        found[index].setdefault((kind, where), Finding(kind, where, one_line(excerpt, EXCERPT_CHARS)))

    names, prose = text.names.joined(), text.prose.joined()
    for channel, hits in (
        (
            text.prose,
            rules.scan(prose, text.own, low=rules.lowered_parts(text.prose.parts), summaries=text.summaries()),
        ),
        (text.names, rules.scan_identifiers(names, text.own, text.tools)),
        # Identifiers read as words: 'ignore_previous_instructions' is the order it spells.
        (text.names, rules.scan(names.replace("_", " ").replace("-", " "), text.own, identifiers=True)),
    ):
        for hit in hits:
            for index, value in channel.locate(hit.start):
                add(index, hit.kind, value, hit.excerpt)
    for index, identifier in text.foreign:
        if rules.mixed_script(identifier):
            add(index, "mixed-script", identifier, identifier)
    for index, value, kind in text.misplaced:
        add(index, kind, value, value)
    return [tuple(findings.values()) for findings in found]


class _Channel:
    """Strings joined into one text (a separator between them), each remembered with its tools: a string
    several tools hold (a parameter's description in every tool) is read once, for all of them."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.origins: list[tuple[int, str]] = []
        """(tool index, the string as the tool has it) of each part: the first tool holding it."""
        self.shared: dict[int, list[tuple[int, str]]] = {}
        """Part -> the (tool index, string) of every later tool holding that part."""
        self.seen: dict[str, int] = {}
        """Each shareable part's string (prose as sent, identifiers lowercased) -> its part."""
        self.starts: list[int] = []
        """Where each part starts in the text `joined()` made last."""

    def share(self, part: int, index: int, value: str) -> None:
        """Credit `part` to one more tool (`index`, holding it as `value`)."""
        self.shared.setdefault(part, []).append((index, value))

    def joined(self) -> str:
        joined = rules.SEPARATOR.join(self.parts)
        # Part i starts after the lengths of the parts before it and i separators (summed without a Python loop).
        before = itertools.accumulate(map(len, self.parts[:-1]), initial=0)
        self.starts = list(map(operator.add, before, itertools.count(0, len(rules.SEPARATOR))))
        return joined

    def locate(self, offset: int) -> list[tuple[int, str]]:
        """The tool index and original string of every tool holding the part at `offset` of `joined()`. An
        offset inside a separator belongs to the part after it: a string's first sentence starts on the
        separator's last line break (the sentence end before it), and was credited to the tool before."""
        position = max(0, bisect.bisect_right(self.starts, offset + len(rules.SEPARATOR) - 1) - 1)
        return [self.origins[position], *self.shared.get(position, ())]


class _Text:
    """A listing's strings in two channels: prose as it is, identifiers (names, keys and one-word values)
    lowercased, one per line, read word by word (`content_from_reading_ssh_id_rsa` is an order).

    The walk keeps no paths (a path per string cost more than the whole scan): a finding's place in its
    tool is looked up afterwards (`_where`)."""

    def __init__(self, own: Collection[str]) -> None:
        self.prose = _Channel()
        self.names = _Channel()
        self.own: set[str] = {name.lower() for name in own}
        """Every identifier of the listing (lowercased): what the server's own text may refer to."""
        self.tools: set[str] = set()
        """The listing's tool names, lowercased: a tool's name says what it does, it orders nothing."""
        self.foreign: list[tuple[int, str]] = []
        """(tool index, identifier) of identifiers with non-ASCII letters: checked for mixed scripts."""
        self.descriptions: list[int] = []
        """Which prose parts are a tool's description."""
        self.misplaced: list[tuple[int, str, str]] = []
        """(tool index, value, kind) of values a schema does not expect where they are (`_misplaced`)."""
        # The channels' lists, held here too: `add_tool` appends to them for every string of the listing.
        self._prose_parts, self._prose_origins = self.prose.parts, self.prose.origins
        self._name_parts, self._name_origins = self.names.parts, self.names.origins

    def add_tool(self, index: int, tool: dict[str, Any]) -> None:
        if type(name := tool.get("name")) is str:
            self.tools.add(name.lower())
        strings: list[str] = []
        self._visit(index, tool, "", 0, strings)
        description = tool.get("description")
        # Each distinct string to its channel, in the walk's order (a string twice in one tool is one finding):
        # prose as it is, identifiers lowercased. A name that is not printable ASCII is read as prose too,
        # and still counts as the server's own. A string an earlier tool holds is credited to that part
        # (a description never is: its first sentence is read as the tool's summary).
        identifiers: list[str] = []
        prose, prose_origins, prose_seen = self._prose_parts, self._prose_origins, self.prose.seen
        for value in dict.fromkeys(strings):
            if (
                " " not in value
                and "\n" not in value
                and (
                    len(value) <= rules.IDENTIFIER_CHARS
                    or (len(value) <= rules.NAME_CHARS and rules.NAME_LIKE.fullmatch(value))
                )
            ):
                if value.isascii() and value.isprintable():
                    identifiers.append(value)
                    continue
                if not value.isascii():
                    self.foreign.append((index, value))
                self.own.add(value.lower())
            if value == description:
                self.descriptions.append(len(prose))
            elif (part := prose_seen.get(value)) is not None:
                self.prose.share(part, index, value)
                continue
            else:
                prose_seen[value] = len(prose)
            prose.append(rules.without_separators(value))
            prose_origins.append((index, value))
        names, name_seen = self._name_parts, self.names.seen
        for identifier in identifiers:
            lowered = identifier.lower()
            if (part := name_seen.get(lowered)) is not None:
                self.names.share(part, index, identifier)
                continue
            name_seen[lowered] = len(names)
            names.append(lowered)
            self._name_origins.append((index, identifier))
            self.own.add(lowered)

    def summaries(self) -> list[int]:
        """Where each tool's description starts in the joined prose (after `prose.joined()`)."""
        starts = self.prose.starts
        return [starts[part] for part in self.descriptions]

    def _visit(self, index: int, node: dict[str, Any] | list[Any], parent: str, depth: int, out: list[str]) -> None:
        """Every string of `node` (keys, and values but JSON-schema words) onto `out`, in document order."""
        if depth > MAX_DEPTH:
            return
        if isinstance(node, dict):
            for key, child in node.items():
                if type(key) is not str:
                    key = str(key)
                if key not in _SCHEMA_WORDS:
                    out.append(key)
                kind = type(child)
                if kind is str:
                    if child and child not in _SCHEMA_WORDS:
                        if key in _CHECKED_KEYS:
                            self._check_place(index, child, key, False)
                        out.append(child)
                elif kind is dict or kind is list:
                    self._visit(index, child, key, depth + 1, out)
                elif kind not in _SCALARS and isinstance(child, Mapping | tuple):
                    self._visit(index, dict(child) if isinstance(child, Mapping) else list(child), key, depth + 1, out)
            return
        for child in node:
            kind = type(child)
            if kind is str:
                if child and child not in _SCHEMA_WORDS:
                    if parent in _LISTS_CHECKED:
                        self._check_place(index, child, parent, True)
                    out.append(child)
            elif kind is dict or kind is list:
                self._visit(index, child, parent, depth + 1, out)
            elif kind not in _SCALARS and isinstance(child, Mapping | tuple):
                self._visit(index, dict(child) if isinstance(child, Mapping) else list(child), parent, depth + 1, out)

    def _check_place(self, index: int, value: str, key: str, in_list: bool) -> None:
        kind = _misplaced(value, key, in_list)
        if kind is not None:
            self.misplaced.append((index, value, kind))


MAX_DEPTH = 256
"""Deepest nesting walked (the schema limits keep listed tools far shallower; a snapshot file may not)."""
_CHECKED_KEYS = frozenset(("type", "default", "const", "required", "title"))
_LISTS_CHECKED = frozenset(("required", "enum", "examples"))
_SCALARS = frozenset((int, float, bool, type(None)))
"""Types of values with no text, passed over without an `isinstance` check."""
_JSON_TYPES = frozenset(("string", "number", "integer", "boolean", "object", "array", "null"))


def _misplaced(value: str, key: str, in_list: bool) -> str | None:
    """Text a schema does not hold there: a sentence as a `required` name, a `type` or a `title` (a name
    for people: a title of several sentences carries text to the model in any language), or an order in a
    value the model is to send (a default, const, enum member or example): a fixed e-mail address as a
    default, a sentence naming an address or a credential file, or any sentence as a `const` (or a long one as an
    enum member). A value that is a URL or a path alone, or a user agent naming one, is ordinary."""
    if key == "required":
        return "schema-misuse" if in_list and (" " in value or "\n" in value) else None
    if key == "type":
        return "schema-misuse" if not in_list and value not in _JSON_TYPES and " " in value else None
    if key == "title":
        return "schema-misuse" if len(value) > TITLE_CHARS and _SENTENCES.search(value) else None
    if not in_list and "@" in value and rules.EMAIL.search(value):
        return "exfil-destination"  # a default or const
    words = len(value.split())
    if words < _PROSE_WORDS and not (len(value) > _PROSE_CHARS and not value.isascii()):
        return None  # a value, not a sentence (CJK sentences have few spaces)
    if (key == "const" and not in_list) or (key == "enum" and words >= _ENUM_WORDS):
        return "schema-misuse"  # the one value a call may send, or one of its choices, written as a sentence
    if "://" in value and _ADDRESS.search(value):
        return "exfil-destination"
    if rules.SENSITIVE_PATH.search(value.lower()):
        return "secret-access"
    return None


TITLE_CHARS = 100
"""Longest title read as a name whatever it holds (the real catalogs' longest is 25 characters)."""
_SENTENCES = re.compile(r"[.!?·;]\s+\w|[。！？]\s*\w")
"""A sentence end with more text after it: a long title of sentences."""
_PROSE_WORDS = 6
"""Words a value needs to be read as a sentence (a user agent with its URL has three or four)..."""
_PROSE_CHARS = 24
"""...or characters, when it is not ASCII (Chinese and Japanese write sentences without spaces)."""
_ENUM_WORDS = 12
"""Words an enum member needs to be read as a sentence rather than a choice ('Out of office until Monday')."""
_ADDRESS = re.compile(r"\bhttps?://[^\s\"'<>]+")


def _where(tool: Any, value: str) -> str:
    """The first place in `tool` holding `value` as a key or a string: `inputSchema.properties.notes.description`.
    Keys are the server's text: unprintable ones are shown escaped (`\\x1b]8;;...`), so a finding's place
    cannot colour, hide or link anything in the terminal where a person reviews it."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(tool, ())]
    while stack:
        node, path = stack.pop(0)
        if isinstance(node, Mapping):
            for key, child in node.items():
                if str(key) == value:
                    return ".".join((*path, _shown(key)))
                if child == value and isinstance(child, str):
                    return ".".join((*path, _shown(key))) or "name"
                if isinstance(child, Mapping | list | tuple):
                    stack.append((child, (*path, _shown(key))))
        elif isinstance(node, list | tuple):
            for position, child in enumerate(node):
                if child == value and isinstance(child, str):
                    return ".".join((*path, str(position)))
                if isinstance(child, Mapping | list | tuple):
                    stack.append((child, (*path, str(position))))
    return "name"


def _shown(key: Any) -> str:
    """A key of a finding's place: as it is when printable (control, format and separator characters are
    not: escapes, bidi overrides, zero-width spaces), else escaped as Python writes it."""
    text = str(key)
    return text if text.isprintable() else ascii(text)[1:-1]
