"""The ranking rules of hybrid search, as pure functions: no model, no files, no state.

tool_text / entry_text   what a tool is embedded as (a ToolText: one text per model)
query_sentences          a request is embedded sentence by sentence; a tool scores its best sentence
blend                    lexical score and cosine, each normalised by the query's best
admitted                 the floor that keeps hybrid from padding results with unrelated tools
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lexical import split_words

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ...protocols.mcp._catalog import ToolEntry

__all__ = [
    "DESCRIPTION_WORDS",
    "MAX_QUERY_SENTENCES",
    "MULTILINGUAL_DESCRIPTION_WORDS",
    "ToolText",
    "admitted",
    "blend",
    "entry_text",
    "multilingual_text",
    "query_sentences",
    "tool_text",
]

DESCRIPTION_WORDS = 80
"""Tool descriptions are cut here before embedding, so the label after them (server, name, parameters)
still fits in the model's 128-token window (docs/tool-search.md)."""
MULTILINGUAL_CHARS = 1_000
"""Most characters USE multilingual v3 reads of one text: it reads every character (about 86 us each, and
no run option stops it), so a few words thousands of characters long held a search 0.5-0.7 s and a
catalog update 3 s (found by red-teaming). Forty words and a label are a few hundred characters."""
MULTILINGUAL_DESCRIPTION_WORDS = 40
"""USE multilingual v3 reads a tool as its description cut here and the label without parameter names: it
averages over every word, so a long text dilutes the few that say what the tool does (docs/tool-search.md)."""
MAX_QUERY_SENTENCES = 16
"""Sentences of one request embedded separately. The engine ranks requests over 1,000 characters step by
step and hands the blend only their best few steps (`_engine.MAX_EMBEDDED_STEPS`), so this bounds the rest."""

_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+|\n+")


class ToolText(str):
    """A tool's text as all-MiniLM-L6-v2 reads it (the string itself, and the vector cache's key), carrying
    in `multilingual` what USE multilingual v3 reads. A plain string (a query sentence) is read alike by both.

    The multilingual text is made from the same fields by fixed rules, so the string alone determines it
    and keys the cache for both.
    """

    multilingual: str

    def __new__(cls, text: str, multilingual: str) -> ToolText:
        self = super().__new__(cls, text)
        self.multilingual = multilingual
        return self


def multilingual_text(text: str) -> str:
    """What USE multilingual v3 reads of `text`: a ToolText's `multilingual`, any other string as it is, cut
    at MULTILINGUAL_CHARS characters."""
    return (text.multilingual if isinstance(text, ToolText) else text)[:MULTILINGUAL_CHARS]


def tool_text(server: str, name: str, description: str | None, parameters: Iterable[str] = ()) -> ToolText:
    """The text embedded for one tool: its description, then server, split name and parameter names.

    The description leads and is cut at DESCRIPTION_WORDS words, so the label in parentheses survives the
    model's token cut even after a long description. Names are split the way the lexical analyzer splits
    them (`split_words`). Example: `("github", "create_issue", "Create an issue", ["owner", "repo"])`
    gives `"Create an issue (github create issue, with owner, repo)"`, and for USE multilingual v3
    (`multilingual`, at most MULTILINGUAL_DESCRIPTION_WORDS words, no parameters) `"Create an issue
    (github create issue)"`.
    """
    words = " ".join(split_words(name)) or name
    label = f"{server} {words}"
    params = ", ".join(" ".join(split_words(p)) or p for p in parameters)
    described = (description or "").split()
    text = " ".join(described[:DESCRIPTION_WORDS])
    short = " ".join(described[:MULTILINGUAL_DESCRIPTION_WORDS])
    full_label = f"{label}, with {params}" if params else label
    return ToolText(f"{text} ({full_label})" if text else full_label, f"{short} ({label})" if short else label)


def entry_text(entry: ToolEntry) -> ToolText:
    """`tool_text` of a catalog entry: its first server, tool name, description and top-level parameters."""
    properties = entry.input_schema.get("properties") if isinstance(entry.input_schema, dict) else None
    names = [str(name) for name in properties] if isinstance(properties, dict) else []
    return tool_text(entry.server, entry.tool, entry.description, names)


def query_sentences(query: str) -> list[str]:
    """The sentences of a request (split after `.`, `?` or `!` and at line breaks), each embedded alone.

    A request often asks for several things ("Delete my 7 am alarm. My username is foo and my password is
    bar."); one vector of the whole leans to the main intent, while each tool is best matched by the
    sentence about it. One-word fragments ("Yes.") are dropped unless nothing else is left, and at most
    MAX_QUERY_SENTENCES are kept (the rest joins the last).
    """
    parts = [part.strip() for part in _SENTENCE_BREAK.split(query) if part and part.strip()]
    kept = [part for part in parts if len(part.split()) > 1] or [" ".join(query.split())]
    if len(kept) > MAX_QUERY_SENTENCES:
        kept = [*kept[: MAX_QUERY_SENTENCES - 1], " ".join(kept[MAX_QUERY_SENTENCES - 1 :])]
    return kept


def blend(lexical: NDArray[Any], cosines: NDArray[Any], weight: float) -> NDArray[np.float32]:
    """Hybrid scores: `(1 - weight) * lexical / max(lexical) + weight * cosine / max(cosine)`.

    Each signal is normalised by the query's best, so a weight means the same for every query and both
    parts reach 1 at their own best tool; with no lexical match at all the lexical part is 0. Negative
    scores count as 0: negative cosines (unrelated text), and BM25Okapi's negative scores for words in most
    of a small catalog's tools.
    """
    lex = np.maximum(np.asarray(lexical, dtype=np.float32), 0.0)
    cos = np.clip(np.asarray(cosines, dtype=np.float32), 0.0, 1.0)
    return ((1.0 - weight) * _by_max(lex) + weight * _by_max(cos)).astype(np.float32)


def _by_max(values: NDArray[np.float32]) -> NDArray[np.float32]:
    top = float(values.max()) if values.size else 0.0
    return values / top if top > 0 else np.zeros_like(values)


def admitted(lexical: NDArray[Any], cosines: NDArray[Any], floor: float) -> NDArray[np.bool_]:
    """Tools that may appear in hybrid results: any lexical match, or a cosine at least `floor`.

    `lexical` is a score per tool (positive: matched) or a boolean mask of the tools that share a word
    with the query (what the engine passes: a match can score <= 0 in BM25Okapi).

    So a query that shares no word with any tool and reaches the floor nowhere is still a miss, and a
    query with few lexical matches is not padded with unrelated tools.
    """
    return (np.asarray(lexical) > 0) | (np.asarray(cosines) >= floor)
