"""Tool definitions in the shapes agents consume: MCP `Tool` objects, Anthropic `tools`, OpenAI function tools.

Input is the definition a plan carries (`{"name", "description", "input_schema"}`, as
`ToolEntry.definition()` gives it) or a catalog `ToolEntry` (which also has title, output schema and
annotations for MCP). Output stays inside each provider's limits:

- the name is checked (never rewritten here: normalization already made it provider-safe, and a silently
  different name could not be routed back; `ClientNames` gives the shorter names a prefixing client needs);
- the description is shortened at a word boundary when it is over the provider's limit;
- the input schema is repaired where the provider rejects what MCP allows (`provider_schema`): an object
  at the top without `oneOf`/`anyOf`/`allOf`/`enum`/`const`/`not` there (both providers), and for OpenAI
  an `items` on every array;
- OpenAI's 128 tools per request (`OPENAI_TOOL_LIMIT`) is checked; planning keeps a profile under it
  (`tool_search.max_tools`, docs/spawning.md).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import mcp.types as types

from ._clients import OPENAI_TOOL_LIMIT
from ._errors import OrchestratorError
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .protocols.mcp._normalization import MIN_NAME_LENGTH, hashed_name, sanitize_title

__all__ = [
    "ANTHROPIC_DESCRIPTION_LIMIT",
    "ANTHROPIC_NAME_PATTERN",
    "MCP_DESCRIPTION_LIMIT",
    "MCP_NAME_PATTERN",
    "OPENAI_DESCRIPTION_LIMIT",
    "OPENAI_NAME_PATTERN",
    "OPENAI_TOOL_LIMIT",
    "ClientNames",
    "ProviderFormat",
    "clip_description",
    "provider_schema",
    "render_tools",
    "to_anthropic",
    "to_mcp_tool",
    "to_openai",
]

ProviderFormat = Literal["mcp", "anthropic", "openai"]

ANTHROPIC_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Anthropic Messages API reference, `tools[].name`: "Must match the regex ^[a-zA-Z0-9_-]{1,64}$" (a dotted
name is rejected with HTTP 400 "String should match pattern ...")."""
ANTHROPIC_DESCRIPTION_LIMIT = 2048
"""The Messages API reference documents no maximum for `tools[].description`; Claude Code, the main consumer
of these definitions, cuts MCP tool descriptions at 2 KB (Claude Code MCP docs), so that is the cap here."""
OPENAI_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""OpenAI API reference, `tools[].function.name`: "Must be a-z, A-Z, 0-9, or contain underscores and dashes,
with a maximum length of 64"."""
OPENAI_DESCRIPTION_LIMIT = 1024
"""OpenAI Chat Completions rejects longer descriptions: "Invalid 'tools[i].function.description': string too
long. Expected a string with maximum length 1024" (error code `string_above_max_length`)."""
MCP_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
"""MCP specification 2025-11-25, Tool names: 1 to 128 characters of ASCII letters, digits, `_`, `-` and `.`."""
MCP_DESCRIPTION_LIMIT = 2048
"""The MCP spec sets no limit; Claude Code truncates MCP tool descriptions at 2 KB, so the gateway never
relies on text past that point."""

TOP_LEVEL_FORBIDDEN = ("oneOf", "anyOf", "allOf", "enum", "const", "not")
"""OpenAI: "schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'const'/'not' at the
top level"; Anthropic: "input_schema does not support oneOf, allOf, or anyOf at the top level"."""
_UNIONS = ("oneOf", "anyOf", "allOf")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMA_SINGLE = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains")
_ANY_ITEMS: dict[str, Any] = {}
"""What an array without `items` gets for OpenAI ("array schema missing items" otherwise): any item, which
is what JSON Schema already meant by leaving `items` out."""

_ELLIPSIS = " …"
_WORD_BREAK_MIN = 0.8
"""Cut at the last space only when that keeps at least 80% of the allowed length; otherwise mid-word."""
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
        "input_schema": provider_schema(schema, "anthropic"),
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
            "parameters": provider_schema(schema, "openai"),
        },
    }


def provider_schema(schema: Mapping[str, Any], provider: Literal["anthropic", "openai"]) -> dict[str, Any]:
    """`schema` as the provider accepts it; the input is never changed, and an acceptable schema comes back equal.

    At the top: `"type": "object"` with `properties`; a top-level union (`oneOf`/`anyOf`/`allOf`) becomes
    one object with every branch's properties (none of them required, as each branch asked for different
    ones), and `enum`/`const`/`not` there are dropped. The server still validates the call. For OpenAI,
    every array, at any depth, gets `items` (any value) when it has none.
    """
    top = dict(schema)
    if any(key in top for key in TOP_LEVEL_FORBIDDEN):
        top = _flattened(top)
    top["type"] = "object"
    if not isinstance(top.get("properties"), Mapping):
        top["properties"] = {}
    if provider == "openai":
        top = _with_items(top)
    return top


def to_mcp_tool(
    definition: Definition, name: str | None = None, provider: Literal["anthropic", "openai"] | None = None
) -> types.Tool:
    """One MCP `Tool`; from a `ToolEntry` it keeps title, output schema and annotations as the server gave them.

    `name` lists it under another name (a `ClientNames` short name) instead of its qualified name;
    `provider` repairs the input schema for the model API the client forwards it to (`provider_schema`).
    """
    qualified, description, schema = _parts(definition)
    name = qualified if name is None else name
    if provider is not None:
        schema = provider_schema(schema, provider)
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
    """Every definition in one provider's shape (MCP gives `Tool` objects, the others JSON dicts).

    Raises:
        OrchestratorError: a name the provider rejects, or more tools than OpenAI takes in one request.
    """
    converters: dict[str, Callable[[Definition], Any]] = {
        "mcp": to_mcp_tool,
        "anthropic": to_anthropic,
        "openai": to_openai,
    }
    convert = converters[fmt]
    rendered = [convert(definition) for definition in definitions]
    if fmt == "openai" and len(rendered) > OPENAI_TOOL_LIMIT:
        raise OrchestratorError(
            f"{len(rendered)} tools is over OpenAI's {OPENAI_TOOL_LIMIT} per request: plan with "
            "tool_search.max_tools (or the profile's client: codex) so the tools go out in search mode"
        )
    return rendered


class ClientNames:
    """The names a client with a prefix is given: every tool's qualified name, shortened where
    `<prefix><name>` would pass the model API's 64 characters.

    A qualified name that fits is kept; a longer one becomes `qualified_name(server, tool, budget)`, the
    normalization's own hashed form (readable start, `-`, 12 hex digits of the original server and tool
    names) cut to the budget, so it depends only on that tool and the budget: unique, and the same in
    every listing. Should two short names still meet (about 2^-48), the later by (server, tool) is
    re-hashed, as normalization does.

    Raises:
        OrchestratorError: `budget` is below MIN_NAME_LENGTH (the prefix is too long to fit names after it).
    """

    def __init__(self, catalog: ToolCatalog, budget: int) -> None:
        if budget < MIN_NAME_LENGTH:
            raise OrchestratorError(
                f"a client prefix leaves {budget} characters for tool names, fewer than {MIN_NAME_LENGTH}: "
                "shorten gateway.server_name or the profile's tool_prefix"
            )
        self.budget = budget
        self._short: dict[str, str] = {}
        self._qualified: dict[str, str] = {}
        long = []
        for entry in catalog:
            if len(entry.name) <= budget:
                self._qualified[entry.name] = entry.name
            else:
                long.append(entry)
        for entry in sorted(long, key=lambda item: (item.server, item.tool)):
            attempt = 0
            short = hashed_name(entry.server, entry.tool, max_length=budget)
            while short in self._qualified:
                attempt += 1
                short = hashed_name(entry.server, entry.tool, max_length=budget, attempt=attempt)
            self._short[entry.name] = short
            self._qualified[short] = entry.name

    def name(self, qualified: str) -> str:
        """What the client lists for this qualified name."""
        return self._short.get(qualified, qualified)

    def qualified(self, name: str) -> str | None:
        """The qualified name behind a listed name (None: not a name this listing gave)."""
        return self._qualified.get(name)

    @property
    def shortened(self) -> dict[str, str]:
        """Qualified name -> short name, for the tools that needed one."""
        return dict(self._short)


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
    copied: dict[str, Any] = dict(schema)
    copied.setdefault("type", "object")
    return copied


def _flattened(schema: dict[str, Any]) -> dict[str, Any]:
    """A top-level union as one object: the properties of every branch (first wins), nothing required."""
    properties: dict[str, Any] = (
        dict(schema.get("properties") or {}) if isinstance(schema.get("properties"), Mapping) else {}
    )
    required = list(schema.get("required") or []) if isinstance(schema.get("required"), list) else []
    for key in _UNIONS:
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            if isinstance(branch, Mapping) and isinstance(branch.get("properties"), Mapping):
                for name, spec in branch["properties"].items():
                    properties.setdefault(name, spec)
            if key == "allOf" and isinstance(branch, Mapping) and isinstance(branch.get("required"), list):
                required.extend(name for name in branch["required"] if name not in required)  # allOf: all apply
    flat = {key: value for key, value in schema.items() if key not in TOP_LEVEL_FORBIDDEN}
    flat["properties"] = properties
    if required:
        flat["required"] = required
    else:
        flat.pop("required", None)
    return flat


def _with_items(schema: Any) -> Any:
    """A copy in which every array schema has `items` (only the parts that change are copied)."""
    if not isinstance(schema, Mapping):
        return schema
    changed: dict[str, Any] = {}
    kind = schema.get("type")
    if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in schema:
        changed["items"] = dict(_ANY_ITEMS)
    for key in _SUBSCHEMA_SINGLE:
        if isinstance(schema.get(key), Mapping):
            repaired = _with_items(schema[key])
            if repaired is not schema[key]:
                changed[key] = repaired
    for key in _SUBSCHEMA_MAPS:
        children = schema.get(key)
        if isinstance(children, Mapping):
            repaired_map = {name: _with_items(child) for name, child in children.items()}
            if any(repaired_map[name] is not children[name] for name in children):
                changed[key] = repaired_map
    for key in _SUBSCHEMA_LISTS:
        children = schema.get(key)
        if isinstance(children, list):
            repaired_list = [_with_items(child) for child in children]
            if any(new is not old for new, old in zip(repaired_list, children, strict=True)):
                changed[key] = repaired_list
    if not changed:
        return schema
    return {**schema, **changed}


def _check_name(name: str, pattern: re.Pattern[str], provider: str) -> None:
    if pattern.fullmatch(name) is None:
        raise OrchestratorError(f"tool name {name!r} is not valid for {provider} (must match {pattern.pattern})")


_ANNOTATION_KEYS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The annotations MCP defines; other keys a server adds are untrusted text no client needs."""


def _annotations(raw: Mapping[str, Any]) -> types.ToolAnnotations | None:
    """The server's annotations as the SDK model: the MCP-defined keys only, the title one line sanitized as
    the catalog sanitizes titles (role turns, tags and template tokens made inert); odd ones (wrong types)
    are dropped, never fatal."""
    kept = {key: raw[key] for key in _ANNOTATION_KEYS if key in raw}
    if "title" in kept:
        kept["title"] = sanitize_title(kept["title"])
    try:
        return types.ToolAnnotations.model_validate(kept)
    except ValueError:
        return None
