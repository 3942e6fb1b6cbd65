"""Checks that make a server's tool definition and its JSON Schemas safe to use, before anything uses them.

Pure functions over plain JSON values (no I/O). A server's schema is untrusted input: `{"$ref": "#"}` makes
a validator recurse until the interpreter gives up, a schema nested hundreds of levels deep exhausts the
recursion limit of whatever walks it next (pydantic, `json.dumps`, jsonschema), and megabytes of schema
cost memory and tokens on every plan. Each check here is iterative, so the input cannot break the check
itself, and each problem is one line naming the field and the limit.

Used on each tool of a server's listing (`_session`: a tool that fails is dropped with its reason, the
server's other tools stay) and, through `schema_problem` and `json_depth`, wherever arguments are
validated against a schema (`_meta_tools`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "SchemaLimits",
    "json_depth",
    "ref_cycle",
    "schema_problem",
    "tool_problem",
]

DEFAULT_MAX_DEPTH = 64
"""Most JSON nesting levels (objects and arrays) in one schema. The deepest of the 590 real tools in the
development catalogs has 21; 64 leaves room and stays far below the ~200 levels at which pydantic's JSON
parser and Python's recursion limit start to fail."""
DEFAULT_MAX_BYTES = 256 * 1024
"""Largest schema, serialized. The largest of the 590 real tools is 12 KB; 256 KB is 20 times that, and a
schema this size already costs ~60,000 tokens when shipped to a model."""

_SAME_INSTANCE_LISTS = ("allOf", "anyOf", "oneOf")
"""Applicators whose subschemas apply to the same value: a `$ref` cycle through them never ends."""
_SAME_INSTANCE_SINGLE = ("not", "if", "then", "else")
_SAME_INSTANCE_MAPS = ("dependentSchemas", "dependencies")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
"""Keywords holding a map of subschemas that apply to parts of the value (or are only referenced)."""
_SCHEMA_LISTS = ("prefixItems", "items")
_SCHEMA_SINGLE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
_ANCHOR_KEYS = ("$anchor", "$dynamicAnchor")


@dataclass(frozen=True)
class SchemaLimits:
    """Bounds on one schema (`mcp.schema_max_depth`, `mcp.schema_max_bytes`)."""

    max_depth: int = DEFAULT_MAX_DEPTH
    """Most JSON nesting levels (objects and arrays)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Largest size, serialized as compact JSON (UTF-8)."""


def json_depth(value: Any, stop_at: int | None = None) -> int:
    """Nesting depth of a JSON value: 0 for a scalar, 1 for `{}` or `[]`, 2 for `{"a": []}`...

    Iterative, so a value nested 100,000 levels deep is measured without recursion; with `stop_at` it
    returns `stop_at + 1` as soon as the value is known to be deeper (the caller only wants to know that).
    """
    if not isinstance(value, Mapping | list | tuple):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if stop_at is not None and deepest > stop_at:
                return deepest
        children = node.values() if isinstance(node, Mapping) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list | tuple))
    return deepest


def schema_problem(schema: Any, limits: SchemaLimits | None = None, *, field: str = "inputSchema") -> str | None:
    """Why `schema` cannot be used, in one line naming `field`; None when it is safe.

    Checks, in order: it is a JSON object, nested at most `max_depth` levels, at most `max_bytes` long,
    every local `$ref` resolves, and no `$ref` cycle returns to a schema without descending into a
    property or item (such a cycle makes any validator recurse forever). Recursion that descends, like a
    tree whose `children` items refer back to the node, is fine: it ends with the value.
    """
    limits = limits or SchemaLimits()
    if not isinstance(schema, Mapping):
        return f"{field} is {_kind(schema)}, not an object"
    if json_depth(schema, limits.max_depth) > limits.max_depth:
        return f"{field} is nested more than {limits.max_depth} levels deep (schema_max_depth)"
    try:
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError) as exc:  # a value JSON cannot hold (a snapshot's odd input)
        return f"{field} is not plain JSON: {exc}"
    size = len(text.encode("utf-8", "replace"))
    if size > limits.max_bytes:
        return f"{field} is {size} bytes, over schema_max_bytes={limits.max_bytes}"
    if not any(f'"{key}"' in text for key in _REF_KEYS):
        return None  # most schemas: nothing refers to anything, so nothing can loop
    nodes = _index(schema)
    anchors = _anchors(nodes)
    unresolved = _first_unresolved_ref(schema, nodes, anchors)
    if unresolved is not None:
        return f"{field} has a $ref that does not resolve: {unresolved!r}"
    cycle = ref_cycle(schema, nodes, anchors)
    if cycle is not None:
        return f"{field} has a $ref cycle that never reaches a property or item: {' -> '.join(cycle)}"
    return None


def tool_problem(tool: Any, limits: SchemaLimits | None = None) -> str | None:
    """Why one `tools/list` entry (wire shape, camelCase keys) cannot be offered; None when it can.

    What MCP requires of a tool and what orchestrator relies on: an object with a non-empty string
    `name`, string (or absent) `title` and `description`, an `inputSchema` that is a safe object schema
    of `"type": "object"` or no `type` at all (`schema_problem`; some published servers leave it out, and
    the arguments of `tools/call` are an object anyway), an `outputSchema` that is one too if present, and
    `annotations` an object if present; not a tool that only runs as an MCP task (`execution.taskSupport`
    "required", 2025-11-25), since orchestrator calls tools plainly.
    """
    if not isinstance(tool, Mapping):
        return f"the tool is {_kind(tool)}, not an object"
    name = tool.get("name")
    if not isinstance(name, str):
        return "name is missing" if name is None else f"name is {_kind(name)} ({str(name)[:40]}), not a string"
    if not name:
        return "name is empty"
    for key in ("title", "description"):
        value = tool.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} is {_kind(value)}, not a string"
    if "inputSchema" not in tool:
        return "inputSchema is missing"
    problem = schema_problem(tool["inputSchema"], limits, field="inputSchema")
    if problem is not None:
        return problem
    kind = tool["inputSchema"].get("type", "object")  # absent: read as "object" (see the module docstring)
    if kind != "object":
        return f'inputSchema.type is {json.dumps(kind, default=str)[:40]}, not "object"'
    output = tool.get("outputSchema")
    if output is not None:
        problem = schema_problem(output, limits, field="outputSchema")
        if problem is not None:
            return problem
    annotations = tool.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        return f"annotations is {_kind(annotations)}, not an object"
    execution = tool.get("execution")
    if isinstance(execution, Mapping) and execution.get("taskSupport") == "required":
        # 2025-11-25 tasks: such a tool answers a plain tools/call with an error ("requires task
        # augmentation"); orchestrator calls tools plainly, so it would only ever fail.
        return 'execution.taskSupport is "required": it only runs as an MCP task, which orchestrator does not run'
    return None


def ref_cycle(
    schema: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    anchors: Mapping[str, str] | None = None,
) -> list[str] | None:
    """A `$ref` cycle that applies a schema to the same value again, as JSON pointers (first == last).

    The graph: each subschema points to the schemas it applies to the very same value (its local `$ref`
    target, its `allOf`/`anyOf`/`oneOf` members, `not`, `if`/`then`/`else`, `dependentSchemas`). A cycle
    in it is endless recursion for every validator. Edges through `properties`, `items` and the like
    descend into the value and cannot loop forever, so they are not in the graph. Iterative depth-first
    search; the schema's depth must already be bounded (`schema_problem` checks it first). `nodes` and
    `anchors` (from the same schema) save indexing it twice.
    """
    nodes = _index(schema) if nodes is None else nodes
    anchors = _anchors(nodes) if anchors is None else anchors
    edges: dict[str, list[str]] = {}
    for pointer, node in nodes.items():
        targets = [child for child, value in _same_instance_children(pointer, node) if isinstance(value, Mapping)]
        for ref in _refs(node):
            target = _resolve(ref, schema, anchors)
            if target is not None and target in nodes:
                targets.append(target)
        edges[pointer] = targets
    done: set[str] = set()
    for start in nodes:
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        iterators: list[Iterator[str]] = [iter(edges[start])]
        while iterators:
            following = next(iterators[-1], None)
            if following is None:
                iterators.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if following in on_path:
                return [*path[path.index(following) :], following]
            if following in done:
                continue
            path.append(following)
            on_path.add(following)
            iterators.append(iter(edges[following]))
    return None


# ---------------------------------------------------------------------- helpers


def _kind(value: Any) -> str:
    """How a wrong value is named in a reason: `a string`, `a list`, `null`..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def _index(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every subschema (object) by its JSON pointer (`#`, `#/properties/a`...), walking only schema keywords,
    so a `default` or `enum` value that happens to hold `"$ref"` is never read as a schema. A local `$ref`
    into an unknown keyword is followed too, so its target is indexed."""
    nodes: dict[str, Mapping[str, Any]] = {}
    stack: list[tuple[str, Any]] = [("#", schema)]
    while stack:
        pointer, node = stack.pop()
        if not isinstance(node, Mapping) or pointer in nodes:
            continue
        nodes[pointer] = node
        stack.extend(_subschemas(pointer, node))
        for ref in _refs(node):
            target = _resolve(ref, schema, {})
            if target is not None and target not in nodes:
                stack.append((target, _lookup(schema, target)))
    return nodes


def _anchors(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """`#name` -> pointer, from `$anchor`, `$dynamicAnchor` and draft-07 plain-name `$id` fragments."""
    anchors: dict[str, str] = {}
    for pointer, node in nodes.items():
        for key in _ANCHOR_KEYS:
            if isinstance(node.get(key), str):
                anchors.setdefault(f"#{node[key]}", pointer)
        identifier = node.get("$id", node.get("id"))
        if isinstance(identifier, str) and identifier.startswith("#") and len(identifier) > 1:
            anchors.setdefault(identifier, pointer)
    return anchors


def _subschemas(pointer: str, node: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every direct subschema of `node` with its pointer, same-value or descending."""
    yield from _same_instance_children(pointer, node)
    for key in _SCHEMA_MAPS:
        members = node.get(key)
        if isinstance(members, Mapping):
            for name, member in members.items():
                yield f"{pointer}/{key}/{_escape(str(name))}", member
    yield from _list_members(pointer, node, _SCHEMA_LISTS)
    for key in _SCHEMA_SINGLE:
        if isinstance(node.get(key), Mapping):
            yield f"{pointer}/{key}", node[key]


def _lookup(root: Mapping[str, Any], pointer: str) -> Any:
    node: Any = root
    for token in pointer[2:].split("/") if pointer != "#" else ():
        token = _unescape(token)
        node = node[int(token)] if isinstance(node, list | tuple) else node[token]
    return node


def _list_members(pointer: str, node: Mapping[str, Any], keys: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Each member of the lists `node` holds under `keys`, with its pointer."""
    for key in keys:
        members = node.get(key)
        if isinstance(members, list | tuple):
            for index, member in enumerate(members):
                yield f"{pointer}/{key}/{index}", member


def _same_instance_children(pointer: str, node: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    yield from _list_members(pointer, node, _SAME_INSTANCE_LISTS)
    for key in _SAME_INSTANCE_SINGLE:
        if key in node:
            yield f"{pointer}/{key}", node[key]
    for key in _SAME_INSTANCE_MAPS:
        members = node.get(key)
        if isinstance(members, Mapping):
            for name, member in members.items():
                if isinstance(member, Mapping):  # draft-07 `dependencies` may also hold property lists
                    yield f"{pointer}/{key}/{_escape(str(name))}", member


def _refs(node: Mapping[str, Any]) -> Iterator[str]:
    for key in _REF_KEYS:
        value = node.get(key)
        if isinstance(value, str):
            yield value


def _resolve(ref: str, root: Mapping[str, Any], anchors: Mapping[str, str]) -> str | None:
    """The pointer a local `$ref` names (`#`, `#/a/b`, `#anchor`), normalised; None when it does not resolve.

    References to other documents (`other.json#/x`, `https://...`) are not followed: they are neither a
    local cycle nor a local dangling reference, and validators do not fetch them.
    """
    if ref == "#" or ref == "":
        return "#"
    if ref.startswith("#/"):
        node: Any = root
        tokens = [_unescape(unquote(token)) for token in ref[2:].split("/")]
        for token in tokens:
            if isinstance(node, Mapping) and token in node:
                node = node[token]
            elif isinstance(node, list | tuple) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return None
        return "#/" + "/".join(_escape(token) for token in tokens)
    if ref.startswith("#"):
        return anchors.get(ref)
    return None


def _first_unresolved_ref(
    schema: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], anchors: Mapping[str, str]
) -> str | None:
    for node in nodes.values():
        for ref in _refs(node):
            if ref.startswith("#") and _resolve(ref, schema, anchors) is None:
                return ref
    return None


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")
