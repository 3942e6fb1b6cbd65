"""Tool definitions in the shapes agents consume: MCP `Tool` objects, Anthropic `tools`, OpenAI function tools.

Input is the definition a plan carries (`{"name", "description", "input_schema"}`, as
`ToolEntry.definition()` gives it) or a catalog `ToolEntry` (which also has title, output schema and
annotations for MCP). Output stays inside each provider's limits: the name is checked (never rewritten:
normalization already made it provider-safe, and a silently different name could not be routed back),
the description is shortened at a word boundary when it is over the provider's limit. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import mcp.types as types

from ._errors import OrchestratorError
from .protocols.mcp._catalog import ToolEntry

__all__ = [
    "ANTHROPIC_DESCRIPTION_LIMIT",
    "ANTHROPIC_NAME_PATTERN",
    "MCP_DESCRIPTION_LIMIT",
    "MCP_NAME_PATTERN",
    "OPENAI_DESCRIPTION_LIMIT",
    "OPENAI_NAME_PATTERN",
    "ProviderFormat",
    "clip_description",
    "render_tools",
    "to_anthropic",
    "to_mcp_tool",
    "to_openai",
]

ProviderFormat = Literal["mcp", "anthropic", "openai"]

ANTHROPIC_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Anthropic Messages API reference, `tools[].name`: "Must match the regex ^[a-zA-Z0-9_-]{1,64}$" (a dotted
# name is rejected with HTTP 400 "String should match pattern ...").
ANTHROPIC_DESCRIPTION_LIMIT = 2048
# The Messages API reference documents no maximum for `tools[].description`; Claude Code, the main consumer
# of these definitions, cuts MCP tool descriptions at 2 KB (Claude Code MCP docs), so that is the cap here.
OPENAI_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# OpenAI API reference, `tools[].function.name`: "Must be a-z, A-Z, 0-9, or contain underscores and dashes,
# with a maximum length of 64."
OPENAI_DESCRIPTION_LIMIT = 1024
# OpenAI Chat Completions rejects longer descriptions: "Invalid 'tools[i].function.description': string too
# long. Expected a string with maximum length 1024" (error code `string_above_max_length`).
MCP_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# MCP specification 2025-11-25, Tool names: 1 to 128 characters of ASCII letters, digits, `_`, `-` and `.`.
MCP_DESCRIPTION_LIMIT = 2048
# The MCP spec sets no limit; Claude Code truncates MCP tool descriptions at 2 KB, so the gateway never
# relies on text past that point.

_ELLIPSIS = " …"
_WORD_BREAK_MIN = 0.8
# Cut at the last space only when that keeps at least 80% of the allowed length; otherwise mid-word.
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

Definition = Mapping[str, Any] | ToolEntry


def clip_description(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters, else its start cut at a word boundary plus " …"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(_ELLIPSIS)]
    space = cut.rfind(" ")
    if space >= (limit - len(_ELLIPSIS)) * _WORD_BREAK_MIN:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def to_anthropic(definition: Definition) -> dict[str, Any]:
    """One Anthropic Messages API tool: `{"name", "description", "input_schema"}`."""
    name, description, schema = _parts(definition)
    _check_name(name, ANTHROPIC_NAME_PATTERN, "Anthropic")
    return {
        "name": name,
        "description": clip_description(description, ANTHROPIC_DESCRIPTION_LIMIT),
        "input_schema": schema,
    }


def to_openai(definition: Definition) -> dict[str, Any]:
    """One OpenAI function tool: `{"type": "function", "function": {"name", "description", "parameters"}}`."""
    name, description, schema = _parts(definition)
    _check_name(name, OPENAI_NAME_PATTERN, "OpenAI")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": clip_description(description, OPENAI_DESCRIPTION_LIMIT),
            "parameters": schema,
        },
    }


def to_mcp_tool(definition: Definition) -> types.Tool:
    """One MCP `Tool`; from a `ToolEntry` it keeps title, output schema and annotations as the server gave them."""
    name, description, schema = _parts(definition)
    _check_name(name, MCP_NAME_PATTERN, "MCP")
    extra: dict[str, Any] = {}
    if isinstance(definition, ToolEntry):
        extra = {"title": definition.title, "output_schema": definition.output_schema}
        if definition.annotations:
            extra["annotations"] = _annotations(definition.annotations)
    return types.Tool(
        name=name,
        description=clip_description(description, MCP_DESCRIPTION_LIMIT),
        input_schema=schema,
        **{key: value for key, value in extra.items() if value is not None},
    )


def render_tools(definitions: Iterable[Definition], fmt: ProviderFormat) -> list[Any]:
    """Every definition in one provider's shape (MCP gives `Tool` objects, the others JSON dicts)."""
    convert = {"mcp": to_mcp_tool, "anthropic": to_anthropic, "openai": to_openai}[fmt]
    return [convert(definition) for definition in definitions]


def _parts(definition: Definition) -> tuple[str, str, dict[str, Any]]:
    if isinstance(definition, ToolEntry):
        return definition.name, definition.description, _object_schema(definition.input_schema)
    description = definition.get("description")
    schema = definition.get("input_schema", definition.get("inputSchema"))
    return (
        str(definition.get("name", "")),
        description if isinstance(description, str) else "",
        _object_schema(schema),
    )


def _object_schema(schema: Any) -> dict[str, Any]:
    """Providers require an object schema at the top; a tool without one takes no arguments."""
    if not isinstance(schema, Mapping):
        return dict(_EMPTY_SCHEMA)
    schema = dict(schema)
    schema.setdefault("type", "object")
    return schema


def _check_name(name: str, pattern: re.Pattern[str], provider: str) -> None:
    if pattern.fullmatch(name) is None:
        raise OrchestratorError(f"tool name {name!r} is not valid for {provider} (must match {pattern.pattern})")


def _annotations(raw: Mapping[str, Any]) -> types.ToolAnnotations | None:
    """The server's annotations as the SDK model; odd ones (wrong types) are dropped, never fatal."""
    try:
        return types.ToolAnnotations.model_validate(dict(raw))
    except ValueError:
        return None
