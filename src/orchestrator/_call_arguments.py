"""Checking a tool call's arguments against the tool's input schema, and repairing common model mistakes.

Models often send arguments as a JSON string where an object belongs, or a nested object as a string; those
are repaired when the intent is unambiguous. Anything else that does not match the schema comes back as
one `ArgumentProblem` listing every problem and the expected arguments, written as JSON (`null`, `"x"`),
the way the model wrote them, so the model can fix its call. The schema itself is a server's text: one that
jsonschema cannot use (or whose `$ref`s cycle) is skipped, and the server validates for itself.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaValidationError

from ._untrusted import json_or_none
from .protocols.mcp._catalog import ToolEntry
from .protocols.mcp._schemas import SchemaLimits, json_depth, schema_problem

__all__ = ["ArgumentChecker", "ArgumentProblem", "describe_value", "expected_arguments", "repaired_object"]

EXPECTED_LIMIT = 12
"""Parameters listed in an "expected arguments" hint; the model can expand_tools for the rest."""
PROBLEM_CHARS = 200
"""Longest description of one schema problem in an error message."""
QUOTED_VALUES = 64
"""Values of an error looked for in its message (a message shows only its first PROBLEM_CHARS)."""


class ArgumentProblem(Exception):
    """The arguments cannot be used; the message says what to fix (model-facing, one line)."""


VALIDATORS_KEPT = 4096
"""Validators kept process-wide (the oldest dropped first): one per tool definition called."""


class ArgumentChecker:
    """Checks call arguments against tools' input schemas.

    Validators are shared by every checker in the process, one per tool definition (its digest): each
    spawn has its own checker, and checking a schema against the metaschema costs more than most calls.

    Args:
        limits: `mcp.schema_max_depth` bounds how deep arguments may nest before jsonschema recurses into
            them.
    """

    _validators: ClassVar[dict[str, Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, limits: SchemaLimits | None = None) -> None:
        self._limits = limits or SchemaLimits()

    def check(self, entry: ToolEntry, arguments: Any) -> dict[str, Any]:
        """The arguments as an object that satisfies the input schema, repaired where that is unambiguous.

        Raises:
            ArgumentProblem: not an object, nested too deep, or not matching the schema.
        """
        args = repaired_object(arguments)
        if not isinstance(args, dict):
            raise ArgumentProblem(
                f"arguments for {entry.name} must be a JSON object, got {_kind(arguments)}. "
                f"Expected: {expected_arguments(entry.input_schema)}."
            )
        depth = self._limits.max_depth
        if json_depth(args, depth) > depth:  # jsonschema recurses per level
            raise ArgumentProblem(
                f"arguments for {entry.name} are nested more than {depth} levels deep. "
                f"Expected: {expected_arguments(entry.input_schema)}."
            )
        validator = self._validator(entry)
        if validator is None:
            return args
        errors = list(validator.iter_errors(args))
        if errors and _repair_nested(args, errors, entry.input_schema):
            errors = list(validator.iter_errors(args))
        if errors:
            problems = "; ".join(_describe(error) for error in sorted(errors, key=_error_order))
            raise ArgumentProblem(
                f"arguments for {entry.name} do not match its input schema: {problems}. "
                f"Expected: {expected_arguments(entry.input_schema)}. Fix the arguments and call again."
            )
        return args

    def _validator(self, entry: ToolEntry) -> Any:
        """A cached validator for the entry's schema; None when the schema itself is broken."""
        key = entry.digest
        with self._lock:
            if key in self._validators:
                return self._validators[key]
        validator: Any = None
        # A `$ref` cycle would make validation recurse without end: the server validates for itself.
        if schema_problem(entry.input_schema) is None:
            try:
                cls = jsonschema.validators.validator_for(entry.input_schema, default=jsonschema.Draft202012Validator)
                cls.check_schema(entry.input_schema)
                validator = _linear_unique_items(cls)(entry.input_schema)
            except (SchemaError, TypeError, ValueError, LookupError):  # boundary: a server's broken schema
                validator = None
        with self._lock:
            while len(self._validators) >= VALIDATORS_KEPT:
                del self._validators[next(iter(self._validators))]
            self._validators[key] = validator
        return validator


_LINEAR_CLASSES: dict[type, type] = {}
"""jsonschema validator class -> the same with `_unique_items` (made once per class)."""


def _linear_unique_items(cls: Any) -> Any:
    """`cls` with `uniqueItems` checked in linear time (`_unique_items`)."""
    with ArgumentChecker._lock:
        found = _LINEAR_CLASSES.get(cls)
        if found is None:
            found = _LINEAR_CLASSES[cls] = jsonschema.validators.extend(cls, {"uniqueItems": _unique_items})  # type: ignore[no-untyped-call]
        return found


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
    """jsonschema's `uniqueItems` in linear time. Its own check compares items pairwise when they do not
    sort (objects): 4,000 of them held a worker thread, shared by every spawn, for half a minute. Items are
    equal as JSON Schema says: 1 and 1.0 are, true and 1 are not, an object's key order does not count."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_canonical(item), sort_keys=True)
        if key in seen:
            yield SchemaValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """`value` with every whole float as an int, so equal JSON numbers write the same text."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def repaired_object(arguments: Any) -> Any:
    """`None` -> `{}`; a string holding a JSON object -> that object (a common model mistake)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        decoded = json_or_none(arguments)
        if isinstance(decoded, dict):
            return decoded
        if arguments.strip() == "":
            return {}
    return arguments


def expected_arguments(schema: Mapping[str, Any]) -> str:
    """A one-line summary of the parameters: `name: type (required)`, in schema order."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "{} (no arguments)"
    required = set(schema.get("required") or ())
    parts = []
    for key, spec in list(properties.items())[:EXPECTED_LIMIT]:
        kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
        kind = "|".join(kind) if isinstance(kind, list) else str(kind)
        parts.append(f"{key}: {kind}{' (required)' if key in required else ''}")
    more = len(properties) - EXPECTED_LIMIT
    if more > 0:
        parts.append(f"... {more} more (see expand_tools)")
    return "{" + ", ".join(parts) + "}"


def describe_value(value: Any) -> str:
    """A value as JSON, the way a model wrote it (anything JSON cannot hold as its repr)."""
    return json.dumps(value, ensure_ascii=False, default=repr)


def _repair_nested(args: dict[str, Any], errors: Sequence[SchemaValidationError], schema: Mapping[str, Any]) -> bool:
    """Decode top-level string values whose schema wants an object or array; True when anything changed."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    changed = False
    for error in errors:
        if error.validator != "type" or len(error.absolute_path) != 1:
            continue
        key = error.absolute_path[0]
        value = args.get(key) if isinstance(key, str) else None
        spec = properties.get(key) if isinstance(properties, Mapping) else None
        wanted = spec.get("type") if isinstance(spec, Mapping) else None
        wanted_types = {wanted} if isinstance(wanted, str) else set(wanted or ())
        if isinstance(value, str) and wanted_types & {"object", "array"}:
            decoded = json_or_none(value)
            if isinstance(decoded, dict | list) and isinstance(key, str):
                args[key] = decoded
                changed = True
    return changed


def _describe(error: SchemaValidationError) -> str:
    path = ".".join(str(part) for part in error.absolute_path)
    message = _json_message(error)
    if len(message) > PROBLEM_CHARS:
        message = message[: PROBLEM_CHARS - 3] + "..."
    return f"at '{path}': {message}" if path else message


def _json_message(error: SchemaValidationError) -> str:
    """jsonschema's message with the values it quotes in Python spelling (`None`, `True`, `'x'`, `{'a': 1}`)
    written as JSON instead (`null`, `true`, `"x"`, `{"a": 1}`): the model wrote JSON and reads JSON.

    Only the start of the message is kept (what `_describe` shows, with room for the longer JSON spelling),
    and only the values quoted there are looked for: replacing each of 40,000 extra keys across the whole
    message of an `additionalProperties` error held a worker thread for tens of seconds."""
    message = str(error.message)[: PROBLEM_CHARS * 2]
    values = [error.instance, error.validator_value]
    if isinstance(error.validator_value, list):
        values.extend(itertools.islice(error.validator_value, QUOTED_VALUES))
    if isinstance(error.instance, dict) and error.validator in ("required", "additionalProperties"):
        values.extend(itertools.islice(error.instance, QUOTED_VALUES))  # the property names these messages quote
    # Longest first, so no value is replaced inside a longer one.
    for value in sorted(values, key=lambda item: -len(repr(item))):
        python, json_text = repr(value), describe_value(value)
        if python != json_text and python in message:
            message = message.replace(python, json_text)
    return message


def _error_order(error: SchemaValidationError) -> tuple[str, str]:
    return (".".join(str(part) for part in error.absolute_path), error.message)


def _kind(value: Any) -> str:
    return {str: "a string", list: "a list", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
