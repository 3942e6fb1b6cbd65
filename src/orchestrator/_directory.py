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

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ._tokens import count_tokens
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .search._lexical import STOPWORDS, Analyzer, split_words

__all__ = ["DIRECTORY_HEADER", "Directory", "DirectoryLevel", "build_directory", "topic_words"]

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


def build_directory(catalog: ToolCatalog, budget_tokens: int, encoding: str) -> Directory:
    """The most detailed listing of `catalog` that fits `budget_tokens` (see the module docstring)."""
    tried: list[tuple[DirectoryLevel, int]] = []
    for level, text in _candidates(catalog):
        tokens = count_tokens(text, encoding)
        if tokens <= budget_tokens:
            return Directory(level, text, tokens, tuple(tried))
        tried.append((level, tokens))
    level, tokens = tried.pop()
    return Directory(level, text, tokens, tuple(tried), over_budget=True)


def _candidates(catalog: ToolCatalog) -> list[tuple[DirectoryLevel, str]]:
    """Listings from most to least detailed; built lazily would save little, the catalog is cached."""
    by_server = _tools_by_server(catalog)
    lines = [f"{entry.name} - {entry.summary}" if entry.summary else entry.name for entry in catalog]
    names = [f"{server} ({_count(tools)}): {', '.join(t.name for t in tools)}" for server, tools in by_server]
    out: list[tuple[DirectoryLevel, str]] = [("lines", "\n".join(lines)), ("names", "\n".join(names))]
    topics = topic_words(catalog, max(TOPIC_WORDS))
    for count in TOPIC_WORDS:
        server_lines = []
        for server, tools in by_server:
            words = topics.get(server, [])[:count]
            suffix = f": {', '.join(words)}" if words else ""
            server_lines.append(f"{server} ({_count(tools)}){suffix}")
        out.append(("servers", "\n".join(server_lines)))
    return out


def _tools_by_server(catalog: ToolCatalog) -> list[tuple[str, list[ToolEntry]]]:
    """Each server with every tool it offers (a tool offered by several servers is under each)."""
    grouped: dict[str, list[ToolEntry]] = {}
    for entry in catalog:
        for server in entry.servers:
            grouped.setdefault(server, []).append(entry)
    return sorted(grouped.items())


def topic_words(catalog: ToolCatalog, limit: int) -> dict[str, list[str]]:
    """Per server, the words its tools are about, best first, in a fixed order.

    Words of tool names count fully; description words count a quarter, and only when some tool in the
    catalog has them in its name (so prose like "although" never becomes a topic). Weighted by tf-idf
    over servers; generic verbs, stopwords and the server's own name are left out; ties by the word.
    """
    grouped = _tools_by_server(catalog)
    name_vocabulary = {word for entry in catalog for word in _words(entry.tool)}
    weights: dict[str, dict[str, float]] = {}
    for server, tools in grouped:
        counter: dict[str, float] = {}
        for entry in tools:
            name_words = set(_words(entry.tool))
            for word in name_words:
                counter[word] = counter.get(word, 0.0) + _NAME_WORD_WEIGHT
            for word in set(_words(entry.description)) & name_vocabulary - name_words:
                counter[word] = counter.get(word, 0.0) + _DESCRIPTION_WORD_WEIGHT
        own = server.lower()
        weights[server] = {word: weight for word, weight in counter.items() if word not in own}
    spread = Counter(word for counter in weights.values() for word in counter)
    total = len(weights)
    topics: dict[str, list[str]] = {}
    for server, counter in weights.items():
        scored = sorted(
            ((weight * math.log(1 + total / spread[word]), word) for word, weight in counter.items()),
            key=lambda item: (-item[0], item[1]),
        )
        chosen: dict[str, str] = {}  # stem -> the first (best) word with it: "issue" hides "issues"
        for _score, word in scored:
            stem = (_STEMS.terms(word) or [word])[0]
            chosen.setdefault(stem, word)
            if len(chosen) == limit:
                break
        topics[server] = list(chosen.values())
    return topics


def _words(text: str) -> Sequence[str]:
    return [
        word
        for word in split_words(text)
        if len(word) > 2 and not word.isdigit() and word not in STOPWORDS and word not in _GENERIC
    ]


def _count(tools: Sequence[ToolEntry]) -> str:
    return "1 tool" if len(tools) == 1 else f"{len(tools)} tools"
