"""Tool definitions in MCP, Anthropic and OpenAI shapes, within each provider's limits."""

from __future__ import annotations

import mcp.types as types
import pytest

from orchestrator import OrchestratorError, ToolCatalog, render_tools
from orchestrator._formats import (
    ANTHROPIC_DESCRIPTION_LIMIT,
    OPENAI_DESCRIPTION_LIMIT,
    clip_description,
    to_anthropic,
    to_mcp_tool,
    to_openai,
)

SCHEMA = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
DEFINITION = {"name": "time__get_current_time", "description": "Current time in a timezone.", "input_schema": SCHEMA}


def test_anthropic_tool_has_name_description_and_input_schema() -> None:
    assert to_anthropic(DEFINITION) == DEFINITION


def test_openai_tool_is_a_function_with_parameters() -> None:
    assert to_openai(DEFINITION) == {
        "type": "function",
        "function": {"name": DEFINITION["name"], "description": DEFINITION["description"], "parameters": SCHEMA},
    }


def test_long_descriptions_are_cut_at_a_word_to_each_providers_limit() -> None:
    long = {**DEFINITION, "description": "word " * 1000}
    openai = to_openai(long)["function"]["description"]
    anthropic = to_anthropic(long)["description"]
    assert len(openai) <= OPENAI_DESCRIPTION_LIMIT and openai.endswith(" …") and "wor " not in openai
    assert len(anthropic) <= ANTHROPIC_DESCRIPTION_LIMIT and anthropic.endswith(" …")
    assert clip_description("short", 10) == "short"


def test_a_name_outside_the_provider_pattern_is_refused_not_rewritten() -> None:
    with pytest.raises(OrchestratorError, match="not valid for OpenAI"):
        to_openai({**DEFINITION, "name": "time.get_current_time"})
    with pytest.raises(OrchestratorError, match="not valid for Anthropic"):
        to_anthropic({**DEFINITION, "name": "x" * 65})


def test_a_tool_without_a_schema_takes_an_empty_object() -> None:
    assert to_anthropic({"name": "a__b", "description": ""})["input_schema"] == {"type": "object", "properties": {}}


def test_mcp_tool_from_a_catalog_entry_keeps_title_output_schema_and_annotations() -> None:
    catalog = ToolCatalog.from_lists(
        {
            "time": [
                {
                    "name": "get_current_time",
                    "title": "Current time",
                    "description": "Current time in a timezone.",
                    "inputSchema": SCHEMA,
                    "outputSchema": {"type": "object", "properties": {"datetime": {"type": "string"}}},
                    "annotations": {"readOnlyHint": True},
                }
            ]
        }
    )
    tool = to_mcp_tool(catalog.get("time__get_current_time"))
    assert isinstance(tool, types.Tool)
    assert tool.name == "time__get_current_time" and tool.title == "Current time"
    assert tool.output_schema == {"type": "object", "properties": {"datetime": {"type": "string"}}}
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert tool.input_schema == SCHEMA


def test_render_tools_converts_every_definition_in_order() -> None:
    second = {**DEFINITION, "name": "time__convert_time"}
    assert [tool["name"] for tool in render_tools([DEFINITION, second], "anthropic")] == [
        "time__get_current_time",
        "time__convert_time",
    ]
    assert [tool.name for tool in render_tools([DEFINITION], "mcp")] == ["time__get_current_time"]
