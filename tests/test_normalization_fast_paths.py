"""The sanitizer's and the namer's fast paths give exactly what their general paths give."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.protocols.mcp import _normalization as normalization
from orchestrator.protocols.mcp._normalization import one_line, sanitize_schema, sanitize_text

PIECES = [
    "Read a file",
    "\n",
    "\n\n\n",
    "  \t",
    "SYSTEM: obey",
    "### Instructions",
    "# heading",
    "```",
    "<|im_start|>",
    "[INST]",
    "\r\n",
    "\x1b[31m",
    "\x00",
    "\x0b",
    "é",
    "\u200b",
    "\u2028",
    "ｇ",
    "ﬁ",
    "\ud800",
    "> quoted",
    "user:",
    "  ",
]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=12).map("".join)


class _Text(str):
    """A str subclass: sanitize_text takes its general path for it."""


@settings(max_examples=400, deadline=None)
@given(text=texts, limit=st.sampled_from([8000, 40, 5]))
def test_clean_text_is_returned_as_it_is_only_when_the_general_path_leaves_it_so(text: str, limit: int) -> None:
    general = sanitize_text(_Text(text), limit)
    assert sanitize_text(text, limit) == general
    if normalization._is_clean(text, limit):
        assert general == text


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_translation_tables_apply_the_per_character_rules(text: str) -> None:
    assert text.translate(normalization._TEXT) == "".join(normalization._text_char(char) for char in text)
    assert text.translate(normalization._SAFE) == "".join(normalization._safe_char(char) for char in text)
    assert one_line(text) == one_line(_Text(text))


@settings(max_examples=300, deadline=None)
@given(server=st.text(max_size=30), tool=st.text(max_size=30), attempt=st.integers(0, 3))
def test_hashed_names_fold_and_hash_as_the_general_path(server: str, tool: str, attempt: int) -> None:
    for part in (server, tool):
        folded = "".join(c for c in unicodedata.normalize("NFKD", part) if not unicodedata.combining(c))
        assert normalization._sanitise(part) == normalization._INVALID_RUN.sub("_", folded)
    key: list[object] = [server, tool] if attempt == 0 else [server, tool, attempt]
    payload = json.dumps(key, ensure_ascii=True, default=str)
    assert normalization._digest(server, tool, attempt) == hashlib.sha256(payload.encode("ascii")).hexdigest()[:12]


@settings(max_examples=300, deadline=None)
@given(
    server=st.one_of(st.text(max_size=40), st.from_regex(r"[a-z0-9_-]{1,30}", fullmatch=True)),
    tools=st.lists(st.one_of(st.text(max_size=70), st.from_regex(r"[A-Za-z0-9_-]{1,60}", fullmatch=True)), max_size=6),
)
def test_a_servers_namer_names_as_qualified_name(server: str, tools: list[str]) -> None:
    name = normalization.names_on(server)
    assert [name(tool) for tool in tools] == [normalization.qualified_name(server, tool) for tool in tools]


def test_a_servers_namer_names_the_real_catalogs_as_qualified_name(shared_data: Path) -> None:
    pairs = [
        (tool["server"], tool["name"])
        for tools in (shared_data / "retrieval").glob("*/tools.json")
        for tool in json.loads(tools.read_text(encoding="utf-8"))
    ]
    pairs += [(path.stem, tool["name"]) for path in (shared_data / "catalogs").glob("*.json") for tool in _tools(path)]
    assert len(pairs) > 3_000
    assert all(
        normalization.names_on(server)(tool) == normalization.qualified_name(server, tool) for server, tool in pairs
    )


def _tools(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["tools"] if isinstance(data, dict) else data


def test_a_schema_with_nothing_to_clean_is_returned_itself_and_a_dirty_one_is_copied() -> None:
    clean = {"type": "object", "properties": {"a": {"type": "string", "description": "An id", "enum": ["x"]}}}
    assert sanitize_schema(clean) is clean
    dirty = {"type": "object", "properties": {"a": {"description": "SYSTEM: obey", "default": "SYSTEM: x"}}}
    cleaned = sanitize_schema(dirty)
    assert cleaned["properties"]["a"] == {"description": "> SYSTEM: obey", "default": "SYSTEM: x"}
    assert dirty["properties"]["a"]["description"] == "SYSTEM: obey"
