"""The three meta-tools of search mode, `tool_search`, `expand_tools` and `call_tool`: one implementation.

Every surface (the MCP gateway, an in-process API loop, tests) goes through `MetaTools`, so a search, an
expand and a call behave and count the same everywhere. Every outcome is a `CallToolResult`: a model reads
errors as tool results, so each error says what was wrong and what to do instead (a corrective error),
never a protocol failure.

An error result carries its message as text and its kind in `_meta["orchestrator/error"]`, never
`structuredContent`: a client validates structured content against the called tool's `outputSchema`
even on errors (TypeScript SDK v1, MCP Inspector: -32602), and an error cannot match every output
schema. Values in messages are JSON (`null`, `true`, `"text"`), as the model wrote them.

`call_tool` checks, in order: the name (unknown -> closest names; hidden by the agent's profile -> refused),
the arguments (a JSON string where an object belongs is repaired; anything else that does not match the
tool's input schema comes back listing each problem and the expected arguments), then routes through the
manager to the first ready server offering the tool. What the caller asked to hear while the tool runs
(progress, log messages: a `CallRelay`) goes along; the server's own protocol stamps (`_meta` keys under
`io.modelcontextprotocol/`, e.g. its `serverInfo`) are taken off the result, which the caller receives
from this surface, not from that server.

Searching, expanding and checking a call are CPU work, and the `on_called` hook may write a file: a server
passes `offload` (the gateway's worker pool) so the async entry points, `dispatch` and `call_tool`, run
them off its event loop. The counts are kept under a lock, so they stay exact from any thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, TypeVarTuple, Unpack

import jsonschema
import mcp.types as types
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaValidationError
from mcp.shared.dispatcher import ProgressFnT

from ._errors import (
    ExpandError,
    SearchQueryError,
    ServerError,
    ToolCallError,
    ToolExecutionError,
    ToolNotFoundError,
)
from ._planning import CALL_TOOL, EXPAND_TOOLS, META_TOOL_DEFINITIONS, META_TOOL_NAMES, TOOL_SEARCH
from ._tokens import compact_json
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .protocols.mcp._schemas import SchemaLimits, json_depth, schema_problem
from .search._engine import ToolSearchEngine

__all__ = [
    "CALL_TOOL",
    "ERROR_META_KEY",
    "EXPAND_TOOLS",
    "META_TOOL_NAMES",
    "TOOL_SEARCH",
    "CallRelay",
    "MetaStats",
    "MetaTools",
    "Offload",
    "ToolRouter",
    "Visibility",
    "error_kind",
    "error_result",
    "meta_tool_definitions",
    "without_upstream_stamps",
]

_EXPECTED_LIMIT = 12
# Parameters listed in an "expected arguments" hint; the model can expand_tools for the rest.
ERROR_META_KEY = "orchestrator/error"
# `_meta` key of a corrective error result holding its kind (`invalid_arguments`, `unknown_tool`, ...);
# `_meta` because `structuredContent` would be checked against the called tool's output schema.
_PROTOCOL_META_PREFIX = "io.modelcontextprotocol/"
# Reserved `_meta` keys a server stamps on its own results (serverInfo at 2026-07-28): they describe the
# upstream hop, so they are not passed on.

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
ResultT = TypeVar("ResultT", bound=types.Result)


def meta_tool_definitions() -> list[dict[str, Any]]:
    """`tool_search`, `expand_tools` and `call_tool` as sent to a model (in that order)."""
    return [dict(definition) for definition in META_TOOL_DEFINITIONS]


LogSink = Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]


@dataclass(frozen=True)
class CallRelay:
    """What the caller's request asks to hear while the tool runs; carried to the server's call."""

    progress: ProgressFnT | None = None
    """Receives the server's progress notifications for this call (the caller sent a progress token)."""
    log_level: types.LoggingLevel | None = None
    """The lowest level of log messages the caller wants during the call (None: none)."""
    on_log: LogSink | None = None
    """Receives the server's log messages sent while this call runs."""

    def options(self) -> dict[str, Any]:
        """Keyword arguments of `ToolRouter.call_tool` for this relay."""
        options: dict[str, Any] = {}
        if self.progress is not None:
            options["progress_callback"] = self.progress
        if self.log_level is not None and self.on_log is not None:
            options["meta"] = {types.LOG_LEVEL_META_KEY: self.log_level}
            options["on_log"] = self.on_log
        return options


class ToolRouter(Protocol):
    """What call routing needs from the manager (`MCPManager` satisfies it). The keyword arguments are
    only passed when a `CallRelay` asks for them."""

    def is_ready(self, server: str) -> bool: ...

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        progress_callback: ProgressFnT | None = None,
        meta: dict[str, Any] | None = None,
        on_log: LogSink | None = None,
    ) -> types.CallToolResult: ...


class Visibility(Protocol):
    """What an agent profile decides: which tools it sees and which servers its calls may use."""

    def visible(self, entry: ToolEntry) -> bool: ...

    def routes(self, entry: ToolEntry) -> tuple[str, ...]: ...


class Offload(Protocol):
    """Runs a synchronous function off the event loop and awaits its result (`Gateway.run_sync`)."""

    def __call__(self, func: Callable[[Unpack[Ts]], T], /, *args: *Ts) -> Awaitable[T]: ...


@dataclass
class MetaStats:
    """Per-agent counts for the spawn summary (telemetry counts the same events where they happen)."""

    searches: int = 0
    expands: int = 0
    calls: int = 0
    """Calls dispatched to a server (the tool may still report an error)."""
    errors: int = 0
    """Corrective errors returned before or instead of a dispatch."""
    called: list[str] = field(default_factory=list)
    """Qualified names of tools called without error, most recent last, each once."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "searches": self.searches,
            "expands": self.expands,
            "calls": self.calls,
            "errors": self.errors,
            "called": list(self.called),
        }


class _Corrective(Exception):
    """Internal: a model-facing error; becomes an `isError` result carrying `kind` and the message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MetaTools:
    """The meta-tools over one agent's view of the catalog.

    Args:
        engine: search over the tools this agent may see (its catalog is the visible catalog).
        router: the manager; `None` for a surface that only searches (calls then fail clearly).
        full_catalog: every tool (or a callable giving the current one); tells a hidden tool from an
            unknown one. Defaults to the engine's catalog (nothing is hidden).
        visibility: the agent profile's decisions; `None` sees everything and routes anywhere.
        agent: the profile name, quoted in refusals.
        on_called: called with the qualified name after each call that did not fail (task history).
        offload: where `dispatch` and `call_tool` run searches, expands, call checks and `on_called`
            (a worker pool); None runs them inline, on the caller's event loop.
        search_offered: whether the agent was given `tool_search` (False in full mode: hints then point
            at the listed tools instead); a callable is asked at each error.
        names: maps a name the agent was given for a tool (a client's short name) to its qualified name;
            None when the agent sees qualified names only.
        schema_limits: the configured `mcp.schema_max_depth` / `schema_max_bytes` (`MCPManager.schema_limits`);
            call arguments nested deeper than its depth are refused before jsonschema recurses into them.
    """

    def __init__(
        self,
        engine: ToolSearchEngine,
        router: ToolRouter | None = None,
        *,
        full_catalog: ToolCatalog | Callable[[], ToolCatalog] | None = None,
        visibility: Visibility | None = None,
        agent: str = "default",
        on_called: Callable[[str], None] | None = None,
        offload: Offload | None = None,
        search_offered: bool | Callable[[], bool] = True,
        names: Callable[[str], str | None] | None = None,
        schema_limits: SchemaLimits | None = None,
    ) -> None:
        self._engine = engine
        self._limits = schema_limits or SchemaLimits()
        self._router = router
        self._full = full_catalog
        self._visibility = visibility
        self._agent = agent
        self._on_called = on_called
        self._offload = offload
        self._search_offered = search_offered
        self._names = names
        self._validators: dict[str, Any] = {}
        self._lock = threading.Lock()  # the counts, when searches run in several worker threads
        self.stats = MetaStats()

    # ------------------------------------------------------------------ the three tools

    def tool_search(self, query: Any, limit: Any = None) -> types.CallToolResult:
        """Names, summaries and scores of the best matches: `{"query", "outcome", "hits": [...]}`
        (`SearchHit.to_result`: kept short, since it stays in the agent's context)."""
        try:
            if not isinstance(query, str):
                raise _Corrective("invalid_arguments", "tool_search needs 'query' as a string of keywords.")
            k = _positive_int(limit, "limit") if limit is not None else None  # None: the engine's search_limit
            hits = self._engine.search(query, k)
        except SearchQueryError as exc:
            return self._error("invalid_query", f"{exc}. Send a short list of keywords (what the tool does).")
        except _Corrective as exc:
            return self._error(exc.kind, str(exc))
        with self._lock:
            self.stats.searches += 1
        payload = {
            "query": query,
            "outcome": "hit" if hits else "miss",
            "hits": [hit.to_result() for hit in hits],
        }
        return _structured(payload)

    def expand_tools(self, names: Any) -> types.CallToolResult:
        """Full definitions of the named tools: `{"tools": [{"name", "description", "input_schema"}]}`."""
        try:
            wanted = _name_list(names)
            for name in wanted:
                self._check_visible(name)
            definitions = self._engine.expand_tools(wanted)
        except ToolNotFoundError as exc:
            return self._error("unknown_tool", f"{exc}. Use tool_search to find tool names.")
        except ExpandError as exc:
            return self._error("too_many", f"{exc}. Ask for fewer names at once.")
        except _Corrective as exc:
            return self._error(exc.kind, str(exc))
        with self._lock:
            self.stats.expands += 1
        return _structured({"tools": definitions})

    async def call_tool(
        self, name: Any, arguments: Any = None, *, relay: CallRelay | None = None
    ) -> types.CallToolResult:
        """Validate `arguments` against the tool's input schema, then run it on the first ready server
        (with what `relay` asks to hear while it runs)."""
        checked = await self._run(self._checked_call, name, arguments)
        if isinstance(checked, types.CallToolResult):
            return checked
        entry, args, server = checked
        if self._router is None:
            return self._error("unavailable", f"tool {entry.name!r} cannot be called here (no live servers).")
        with self._lock:
            self.stats.calls += 1
        options = relay.options() if relay is not None else {}
        try:
            result = await self._router.call_tool(server, entry.tool, args, **options)
        except ToolExecutionError as exc:
            tool_result = getattr(exc, "result", None)
            if isinstance(tool_result, types.CallToolResult):
                return without_upstream_stamps(tool_result)
            return self._error("tool_error", str(exc))
        except (ServerError, ToolCallError) as exc:
            return self._error("call_failed", f"{exc}. Try again later or use another tool.")
        if not result.is_error:
            await self._run(self._remember, entry.name)
        return without_upstream_stamps(result)

    async def dispatch(
        self, name: str, arguments: Mapping[str, Any] | Any, *, relay: CallRelay | None = None
    ) -> types.CallToolResult:
        """Whatever tool name a model used: a meta-tool, or an expanded tool called directly (API loops)."""
        args = _repaired_object(arguments) if not isinstance(arguments, Mapping) else dict(arguments)
        if not isinstance(args, dict):
            return self._error("invalid_arguments", f"arguments for {name!r} must be a JSON object.")
        if name == TOOL_SEARCH:
            return await self._run(self.tool_search, args.get("query"), args.get("limit"))
        if name == EXPAND_TOOLS:
            return await self._run(self.expand_tools, args.get("names"))
        if name == CALL_TOOL:
            return await self.call_tool(args.get("name"), args.get("arguments"), relay=relay)
        return await self.call_tool(name, args, relay=relay)

    async def _run(self, func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """`func(*args)` through `offload`, or inline without one."""
        if self._offload is None:
            return func(*args)
        return await self._offload(func, *args)

    # ------------------------------------------------------------------ checks

    def _checked_call(self, name: Any, arguments: Any) -> tuple[ToolEntry, dict[str, Any], str] | types.CallToolResult:
        """The tool, its checked arguments and the server to call; or the corrective error result."""
        try:
            entry = self._resolve(name)
            return entry, self._checked_arguments(entry, arguments), self._pick_server(entry)
        except _Corrective as exc:
            return self._error(exc.kind, str(exc))

    def _resolve(self, name: Any) -> ToolEntry:
        if not isinstance(name, str) or not name.strip():
            raise _Corrective("invalid_arguments", "call_tool needs 'name': the qualified name of a tool.")
        if name in META_TOOL_NAMES:
            raise _Corrective("invalid_arguments", f"{name} is a meta-tool: call it directly, not via call_tool.")
        if self._names is not None:
            name = self._names(name) or name
        entry = self._engine.catalog.lookup(name)
        if entry is None:
            self._check_visible(name)
            raise _Corrective("unknown_tool", self._unknown_message(name))
        return entry

    def _check_visible(self, name: str) -> None:
        """Refuse a tool that exists but that this agent's profile hides (never reveals its schema)."""
        if self._engine.catalog.lookup(name) is not None:
            return
        full = self._full() if callable(self._full) else self._full
        if full is not None and full.lookup(name) is not None:
            raise _Corrective(
                "hidden_tool",
                f"tool {name!r} is not available to agent {self._agent!r} (its profile hides it: "
                f"agents.{self._agent}.allow/deny/servers). {self._find_hint('a tool this agent may use')}",
            )

    def _unknown_message(self, name: str) -> str:
        close = self._engine.closest(name)
        hint = f" Closest names: {', '.join(close)}." if close else ""
        return f"unknown tool {name!r}.{hint} {self._find_hint('the right tool name')}"

    def _find_hint(self, what: str) -> str:
        """Where to look instead: tool_search when the agent has it, else the tools it was listed."""
        offered = self._search_offered() if callable(self._search_offered) else self._search_offered
        if offered:
            return f"Use tool_search to find {what}."
        return f"Use one of the tools you were given (tools/list) to find {what}."

    def _checked_arguments(self, entry: ToolEntry, arguments: Any) -> dict[str, Any]:
        """The arguments as an object that satisfies the input schema, repaired where that is unambiguous."""
        args = _repaired_object(arguments)
        if not isinstance(args, dict):
            raise _Corrective(
                "invalid_arguments",
                f"arguments for {entry.name} must be a JSON object, got {_kind(arguments)}. "
                f"Expected: {_expected(entry.input_schema)}.",
            )
        limits = self._limits
        if json_depth(args, limits.max_depth) > limits.max_depth:  # jsonschema recurses per level
            raise _Corrective(
                "invalid_arguments",
                f"arguments for {entry.name} are nested more than {limits.max_depth} levels deep. "
                f"Expected: {_expected(entry.input_schema)}.",
            )
        validator = self._validator(entry)
        if validator is None:
            return args
        errors = list(validator.iter_errors(args))
        if errors and _repair_nested(args, errors, entry.input_schema):
            errors = list(validator.iter_errors(args))
        if errors:
            problems = "; ".join(_describe(error) for error in sorted(errors, key=_error_order))
            raise _Corrective(
                "invalid_arguments",
                f"arguments for {entry.name} do not match its input schema: {problems}. "
                f"Expected: {_expected(entry.input_schema)}. Fix the arguments and call again.",
            )
        return args

    def _validator(self, entry: ToolEntry) -> Any:
        """A cached jsonschema validator for the entry's schema; `None` when the schema itself is broken."""
        key = entry.digest
        if key not in self._validators:
            if schema_problem(entry.input_schema) is not None:  # e.g. a `$ref` cycle: validating would recurse
                self._validators[key] = None  # the server validates for itself
                return None
            try:
                cls = jsonschema.validators.validator_for(entry.input_schema, default=jsonschema.Draft202012Validator)
                cls.check_schema(entry.input_schema)
                self._validators[key] = cls(entry.input_schema)
            except (SchemaError, TypeError, ValueError, LookupError):  # boundary: a server's broken schema
                self._validators[key] = None  # the server validates for itself
        return self._validators[key]

    def _pick_server(self, entry: ToolEntry) -> str:
        """The first ready server offering the tool that the profile allows (duplicates -> first healthy)."""
        servers = self._visibility.routes(entry) if self._visibility is not None else entry.servers
        if not servers:
            raise _Corrective("hidden_tool", f"tool {entry.name!r}: no server this agent may use offers it.")
        if self._router is not None:
            for server in servers:
                if self._router.is_ready(server):
                    return server
        return servers[0]

    def _remember(self, name: str) -> None:
        with self._lock:
            if name in self.stats.called:
                self.stats.called.remove(name)
            self.stats.called.append(name)
        if self._on_called is not None:
            self._on_called(name)

    def _error(self, kind: str, message: str) -> types.CallToolResult:
        with self._lock:
            self.stats.errors += 1
        return error_result(kind, message)


def error_result(kind: str, message: str) -> types.CallToolResult:
    """A corrective error: the message as text, the kind in `_meta` (see the module docstring)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)],
        is_error=True,
        _meta={ERROR_META_KEY: kind},
    )


def error_kind(result: types.CallToolResult) -> str | None:
    """The kind of a corrective error result (None for any other result)."""
    kind = (result.meta or {}).get(ERROR_META_KEY)
    return kind if isinstance(kind, str) else None


def without_upstream_stamps(result: ResultT) -> ResultT:
    """A server's result without the `_meta` keys its protocol stack stamped on it (its identity), for
    passing it on as the caller's own surface's result (tools, resources, prompts)."""
    meta = result.meta
    if not meta or not any(key.startswith(_PROTOCOL_META_PREFIX) for key in meta):
        return result
    kept = {key: value for key, value in meta.items() if not key.startswith(_PROTOCOL_META_PREFIX)}
    return result.model_copy(update={"meta": kept or None})


# ---------------------------------------------------------------------- pure helpers


def _structured(payload: dict[str, Any]) -> types.CallToolResult:
    """Structured content plus the same JSON as text, for clients that read only text (MCP advice). The
    text is compact JSON: it is what most agent CLIs put into the model's context."""
    text = compact_json(payload)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=payload)


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Corrective("invalid_arguments", f"'{key}' must be a positive integer, got {_json(value)}.")
    return value


def _name_list(names: Any) -> list[str]:
    """`names` as a list of strings; a JSON-encoded list or a single name is accepted as the model meant it."""
    if isinstance(names, str):
        decoded = _json_or_none(names)
        names = decoded if isinstance(decoded, list) else [names]
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise _Corrective("invalid_arguments", "expand_tools needs 'names': a list of tool names from tool_search.")
    return names


def _repaired_object(arguments: Any) -> Any:
    """`None` -> `{}`; a string holding a JSON object -> that object (a common model mistake)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        decoded = _json_or_none(arguments)
        if isinstance(decoded, dict):
            return decoded
        if arguments.strip() == "":
            return {}
    return arguments


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
            decoded = _json_or_none(value)
            if isinstance(decoded, dict | list) and isinstance(key, str):
                args[key] = decoded
                changed = True
    return changed


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _describe(error: SchemaValidationError) -> str:
    path = ".".join(str(part) for part in error.absolute_path)
    message = _json_message(error)
    if len(message) > 200:
        message = message[:197] + "..."
    return f"at '{path}': {message}" if path else message


def _json_message(error: SchemaValidationError) -> str:
    """jsonschema's message with the values it quotes in Python spelling (`None`, `True`, `'x'`, `{'a': 1}`)
    written as JSON instead (`null`, `true`, `"x"`, `{"a": 1}`): the model wrote JSON and reads JSON."""
    message = str(error.message)
    values = [error.instance, error.validator_value]
    if isinstance(error.validator_value, list):
        values.extend(error.validator_value)
    if isinstance(error.instance, dict) and error.validator in ("required", "additionalProperties"):
        values.extend(error.instance)  # the property names these messages quote
    for value in sorted(values, key=lambda item: -len(repr(item))):  # longest first: no partial replacement
        python, json_text = repr(value), _json(value)
        if python != json_text and python in message:
            message = message.replace(python, json_text)
    return message


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def _error_order(error: SchemaValidationError) -> tuple[str, str]:
    return (".".join(str(part) for part in error.absolute_path), error.message)


def _expected(schema: Mapping[str, Any]) -> str:
    """A one-line summary of the parameters: `name: type (required)`, in schema order."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "{} (no arguments)"
    required = set(schema.get("required") or ())
    parts = []
    for key, spec in list(properties.items())[:_EXPECTED_LIMIT]:
        kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
        kind = "|".join(kind) if isinstance(kind, list) else str(kind)
        parts.append(f"{key}: {kind}{' (required)' if key in required else ''}")
    more = len(properties) - _EXPECTED_LIMIT
    if more > 0:
        parts.append(f"... {more} more (see expand_tools)")
    return "{" + ", ".join(parts) + "}"


def _kind(value: Any) -> str:
    return {str: "a string", list: "a list", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
