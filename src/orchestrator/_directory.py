"""The compact directory shown in search mode: what exists, at the most detail the budget allows.

Levels, tried in order until one fits `directory_budget_tokens` (the listing only; the fixed header is
counted in the plan's prompt tokens but not against this budget):

    lines    one line per tool, `name - summary`, sorted by qualified name
    names    one line per server: `server (N tools): name, name, ...` (qualified names)
    servers  one line per server: `server (N tools): topic words`, fewer topic words if needed

It degrades instead of cutting: every server is always listed. If even bare server lines exceed the
budget they are all shipped anyway and `Directory.over_budget` says so (the plan's reason repeats it).
"""

from __future__ import annotations

import functools
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from ._tokens import count_tokens, load_encoding
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .search._lexical import STOPWORDS, Analyzer, split_words

__all__ = ["DIRECTORY_HEADER", "Directory", "DirectoryLevel", "Listings", "build_directory", "topic_words"]

DirectoryLevel = Literal["lines", "names", "servers"]

DIRECTORY_HEADER = """\
## Tools
More tools are available than are loaded. To use one that is not loaded:
1. Call `tool_search` with a few words saying what you need (for example "create a GitHub issue"); it returns matching tool names with one-line summaries.
2. Call `expand_tools` with the exact names you will use; it returns their full definitions (description and input schema).
3. Call each tool by that name with arguments that match its input schema (through `call_tool` when that tool is offered).
Names in the directory below can go straight to `expand_tools`. Tools already loaded need neither step."""
"""Fixed text: the same bytes on every spawn, so provider prompt caches keep hitting."""

TOPIC_WORDS = (8, 4, 0)
"""Topic words per server line at the servers level, tried in turn until the listing fits."""

_NAME_WORD_WEIGHT = 1.0
_DESCRIPTION_WORD_WEIGHT = 0.25
"""A word in a tool name says what the server is about more than the same word in its prose."""

_GENERIC = frozenset(
    "list create update delete remove add set search find fetch read write info data new tool tools "
    "value values item items result results specified specific given provided using via based one".split()
)
"""Words that say what a tool does to something, not what the something is: poor topic words."""
_STEMS = Analyzer()
"""Stems topic words, so one server line never shows two forms of a word."""


@dataclass(frozen=True)
class Directory:
    """The listing chosen for one catalog and budget."""

    level: DirectoryLevel
    text: str
    """The listing, without the header."""
    tokens: int
    """Tokens of `text`."""
    tried: tuple[tuple[DirectoryLevel, int], ...]
    """Every level tried before this one, with the tokens it needed (for the plan's reason)."""
    over_budget: bool = False


def build_directory(
    catalog: ToolCatalog, budget_tokens: int, encoding: str, listings: Listings | None = None
) -> Directory:
    """The most detailed listing of `catalog` that fits `budget_tokens` (see the module docstring).

    `listings` (one per encoding, kept across catalog versions) remembers what each server's tools
    contribute (their lines' token counts, their names and topic words), so a catalog updated per server
    is read again only for the servers that changed; the directory is the same with or without it.
    """
    listings = listings if listings is not None and listings.encoding == encoding else Listings(encoding)
    tried: list[tuple[DirectoryLevel, int]] = []
    text: Callable[[], str] = str
    for level, tokens, text in _levels(catalog, listings):
        if tokens <= budget_tokens:
            return Directory(level, text(), tokens, tuple(tried))
        tried.append((level, tokens))
    level, tokens = tried.pop()
    return Directory(level, text(), tokens, tuple(tried), over_budget=True)


def _levels(catalog: ToolCatalog, listings: Listings) -> Iterator[tuple[DirectoryLevel, int, Callable[[], str]]]:
    """Each listing from most to least detailed, its tokens, and its text (made only for the one shipped)."""
    yield "lines", listings.tool_lines(catalog), lambda: "\n".join(_line(entry) for entry in catalog)
    groups = listings.groups(catalog)
    names = [group.names_line for group in groups]
    yield "names", listings.tokens(names), functools.partial("\n".join, names)
    topics = _topics(groups, max(TOPIC_WORDS), listings._topics)
    for count in TOPIC_WORDS:
        server_lines = []
        for group in groups:
            words = topics.get(group.server, [])[:count]
            suffix = f": {', '.join(words)}" if words else ""
            server_lines.append(f"{group.server} ({_count(group.tools)}){suffix}")
        yield "servers", listings.tokens(server_lines), functools.partial("\n".join, server_lines)


def _line(entry: ToolEntry) -> str:
    return f"{entry.name} - {entry.summary}" if entry.summary else entry.name


@dataclass(frozen=True)
class _Group:
    """The tools listed under one server (a tool offered by several servers is under each), by name."""

    server: str
    tools: tuple[ToolEntry, ...]
    names_line: str
    name_words: dict[str, int]
    """word -> how many of its tools have it in their name."""
    description_words: dict[str, int]
    """word -> how many of its tools have it in their description but not their name."""


class Listings:
    """What each server's tools contribute to a directory, kept while they stay the same (a catalog
    updated per server shares the other servers' entries), and the token counts of listing lines.

    A listing's tokens are the sum of its lines' (each but the last with its line break): the encodings
    split text into pieces that never run past a line break into the next line when no line ends in
    whitespace (no directory line does; one that did would be counted with the whole text).
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._groups: dict[str, _Group] = {}
        self._parts: dict[str, tuple[tuple[ToolEntry, ...], int]] = {}
        self._lines: dict[str, int] = {}
        self._topics: dict[str, tuple[object, list[str]]] = {}
        """Server -> (what its topic words were chosen from, the words)."""
        self._lock = threading.Lock()

    def groups(self, catalog: ToolCatalog) -> list[_Group]:
        """Every server's group, sorted by server; made again only for servers whose tools changed."""
        parts = catalog.by_server()
        extra: dict[str, list[ToolEntry]] = {}
        for part in parts.values():
            if any(len(entry.servers) > 1 for entry in part):
                for entry in part:
                    for server in entry.servers[1:]:
                        extra.setdefault(server, []).append(entry)
        found: list[_Group] = []
        known = self._groups
        for server in sorted(parts.keys() | extra.keys()):
            tools = parts.get(server, ())
            if server in extra:
                tools = tuple(sorted([*tools, *extra[server]], key=lambda entry: entry.name))
            group = known.get(server)
            if group is None or (group.tools is not tools and group.tools != tools):
                group = _group(server, tools)
            found.append(group)
        with self._lock:
            self._groups = {group.server: group for group in found}
        return found

    def tool_lines(self, catalog: ToolCatalog) -> int:
        """Tokens of the lines level: one line per tool, by name."""
        if not len(catalog):
            return 0
        total = 0
        kept: dict[str, tuple[tuple[ToolEntry, ...], int]] = {}
        for server, part in catalog.by_server().items():
            found = self._parts.get(server)
            if found is None or found[0] is not part:
                lines = [_line(entry) for entry in part]
                if any(line[-1].isspace() for line in lines):
                    return count_tokens("\n".join(_line(entry) for entry in catalog), self.encoding)
                found = (part, count_tokens("".join(line + "\n" for line in lines), self.encoding))
            kept[server] = found
            total += found[1]
        self._parts = kept
        last = _line(catalog.entries[-1])
        return total - self._line_tokens(last + "\n") + self._line_tokens(last)

    def tokens(self, lines: list[str]) -> int:
        """Tokens of `lines` joined by line breaks."""
        if not lines:
            return 0
        if any(not line or line[-1].isspace() for line in lines):
            return count_tokens("\n".join(lines), self.encoding)
        ended = [line + "\n" for line in lines[:-1]]
        known = self._lines
        missing = [line for line in dict.fromkeys([*ended, lines[-1]]) if line not in known]
        if missing:  # counted together (tiktoken's batch), remembered one by one
            counts = load_encoding(self.encoding).encode_ordinary_batch(missing)
            with self._lock:
                if len(known) + len(missing) > LINE_CACHE:
                    known.clear()
                known.update(zip(missing, map(len, counts), strict=True))
        return sum(known.get(line) or self._line_tokens(line) for line in ended) + self._line_tokens(lines[-1])

    def _line_tokens(self, line: str) -> int:
        found = self._lines.get(line)
        if found is None:
            found = count_tokens(line, self.encoding)
            with self._lock:
                if len(self._lines) >= LINE_CACHE:
                    self._lines.clear()
                self._lines[line] = found
        return found


LINE_CACHE = 400_000
"""Listing lines whose token counts a `Listings` keeps (each tool's line and each server's)."""


def _group(server: str, tools: tuple[ToolEntry, ...]) -> _Group:
    name_words: dict[str, int] = {}
    description_words: dict[str, int] = {}
    for entry in tools:
        own = _words(entry.tool)
        for word in own:
            name_words[word] = name_words.get(word, 0) + 1
        for word in _words(entry.description) - own:
            description_words[word] = description_words.get(word, 0) + 1
    names_line = f"{server} ({_count(tools)}): {', '.join(entry.name for entry in tools)}"
    return _Group(server, tools, names_line, name_words, description_words)


def topic_words(catalog: ToolCatalog, limit: int) -> dict[str, list[str]]:
    """Per server, the words its tools are about, best first, in a fixed order.

    Words of tool names count fully; description words count a quarter, and only when some tool in the
    catalog has them in its name (so prose like "although" never becomes a topic). Weighted by tf-idf
    over servers; generic verbs, stopwords and the server's own name are left out; ties by the word.
    """
    return _topics(Listings("").groups(catalog), limit)


def _topics(
    groups: list[_Group], limit: int, chosen_before: dict[str, tuple[object, list[str]]] | None = None
) -> dict[str, list[str]]:
    """`topic_words` from each server's word counts (see there); with `chosen_before`, a server whose
    words, weights and spreads are as last time keeps its words without ranking them again."""
    memo = chosen_before if chosen_before is not None else {}
    vocabulary: set[str] = set()
    for group in groups:
        vocabulary.update(group.name_words)
    weights: dict[str, dict[str, float]] = {}
    for group in groups:
        # Sums of whole and quarter counts: exact, whatever the order the tools are counted in.
        counter = {word: count * _NAME_WORD_WEIGHT for word, count in group.name_words.items()}
        for word, count in group.description_words.items():
            if word in vocabulary:
                counter[word] = counter.get(word, 0.0) + count * _DESCRIPTION_WORD_WEIGHT
        own = group.server.lower()
        weights[group.server] = {word: weight for word, weight in counter.items() if word not in own}
    spread = Counter(word for counter in weights.values() for word in counter)
    total = len(weights)
    topics: dict[str, list[str]] = {}
    for server, counter in weights.items():
        key = (limit, total, tuple(counter.items()), tuple(spread[word] for word in counter))
        before = memo.get(server)
        if before is not None and before[0] == key:
            topics[server] = before[1]
            continue
        scored = sorted(
            ((weight * math.log(1 + total / spread[word]), word) for word, weight in counter.items()),
            key=lambda item: (-item[0], item[1]),
        )
        chosen: dict[str, str] = {}  # stem -> the first (best) word with it: "issue" hides "issues"
        for _score, word in scored:
            chosen.setdefault(_stem(word), word)
            if len(chosen) == limit:
                break
        topics[server] = list(chosen.values())
        memo[server] = (key, topics[server])
    for server in memo.keys() - topics.keys():
        memo.pop(server, None)
    return topics


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    return (_STEMS.terms(word) or [word])[0]


def _words(text: str) -> frozenset[str]:
    """The distinct topic-worthy words of a tool name or description, cached for short texts (the same texts
    recur on many servers): 65,536 cached descriptions of 8,000 characters would hold 2 GB."""
    return _cached_words(text) if len(text) <= _CACHED_TEXT_CHARS else _words_of(text)


_CACHED_TEXT_CHARS = 1_000


@functools.lru_cache(maxsize=1 << 16)
def _cached_words(text: str) -> frozenset[str]:
    return _words_of(text)


def _words_of(text: str) -> frozenset[str]:
    return frozenset(
        word
        for word in split_words(text)
        if len(word) > 2 and not word.isdigit() and word not in STOPWORDS and word not in _GENERIC
    )


def _count(tools: Sequence[ToolEntry]) -> str:
    return "1 tool" if len(tools) == 1 else f"{len(tools)} tools"
