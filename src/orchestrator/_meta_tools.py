"""The three meta-tools of search mode, `tool_search`, `expand_tools` and `call_tool`: their whole contract.

This module owns what an agent is told and what it gets back: the definitions (`META_TOOL_DEFINITIONS`,
the same in a spawn's plan and the gateway's listing), the checks of their arguments, the limits (a
`tool_search` limit above SEARCH_LIMIT_MAX is lowered to it; a long unknown name is echoed cut short),
and the results. Every surface (the MCP gateway, an in-process API loop, tests) goes through `MetaTools`,
so a search, an expand and a call behave the same everywhere, and each emits one `MetaEvent`
(`_events.py`) that telemetry, the spawn's counts, session accounting and task histories consume.

Every outcome is a `CallToolResult`: a model reads errors as tool results, so each error says what was
wrong and what to do instead (a corrective error), never a protocol failure. An error result carries its
message as text and its kind in `_meta["orchestrator/error"]`, never `structuredContent`: a client validates
structured content against the called tool's `outputSchema` even on errors (TypeScript SDK v1, MCP
Inspector: -32602), and an error cannot match every output schema. Values in messages are JSON (`null`,
`true`, `"text"`), as the model wrote them.

`call_tool` checks, in order: the name (unknown -> closest names; hidden by the agent's profile -> refused),
the arguments (`_call_arguments.py`), then routes through the manager to the first ready server offering
the tool. What the caller asked to hear while the tool runs (progress, log messages: a `CallRelay`) goes
along; the server's own protocol stamps (`_meta` keys under `io.modelcontextprotocol/`, e.g. its
`serverInfo`) are taken off the result, which the caller receives from this surface, not from that server.

Searching, expanding, checking a call and the event listeners are CPU work or may write a file: a server
passes `offload` (the gateway's worker pool) so the async entry points, `dispatch` and `handle`, run them
off its event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, TypeVarTuple, Unpack

import mcp.types as types
from mcp.shared.dispatcher import ProgressFnT

from ._call_arguments import ArgumentChecker, ArgumentProblem, describe_value, repaired_object
from ._errors import ExpandError, SearchQueryError, ServerError, ToolCallError, ToolExecutionError, ToolNotFoundError
from ._events import Caller, CallEvent, EventListener, ExpandEvent, MetaEvent, RankedTool, SearchEvent
from ._telemetry import Telemetry, telemetry_listener
from ._tokens import TokenCounter, compact_json
from ._untrusted import is_number, json_or_none
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .protocols.mcp._normalization import one_line
from .protocols.mcp._schemas import SchemaLimits
from .protocols.mcp._session import LogSink
from .search._engine import ToolSearchEngine

__all__ = [
    "CALL_TOOL",
    "ERROR_META_KEY",
    "EXPAND_TOOLS",
    "META_TOOL_DEFINITIONS",
    "META_TOOL_NAMES",
    "NAME_ECHO_CHARS",
    "SEARCH_LIMIT_MAX",
    "TOOL_SEARCH",
    "CallRelay",
    "Handled",
    "MetaStats",
    "MetaTools",
    "Offload",
    "ToolRouter",
    "Visibility",
    "error_kind",
    "error_result",
    "event_counts",
    "meta_tool_definitions",
    "without_upstream_stamps",
]

TOOL_SEARCH = "tool_search"
EXPAND_TOOLS = "expand_tools"
CALL_TOOL = "call_tool"
META_TOOL_NAMES = frozenset({TOOL_SEARCH, EXPAND_TOOLS, CALL_TOOL})

SEARCH_LIMIT_MAX = 100
"""Most hits one `tool_search` returns, whatever `limit` asks for: no agent gets the whole catalog."""
NAME_ECHO_CHARS = 128
"""An unknown tool name longer than this (qualified names have at most 64) is echoed back cut to this
length, and only the cut name is looked up for close matches: a megabyte of name costs nothing."""
ERROR_META_KEY = "orchestrator/error"
"""`_meta` key of a corrective error result holding its kind (`invalid_arguments`, `unknown_tool`, ...);
`_meta` because `structuredContent` would be checked against the called tool's output schema."""
_PROTOCOL_META_PREFIX = "io.modelcontextprotocol/"
"""Reserved `_meta` keys a server stamps on its own results (serverInfo at 2026-07-28): they describe the
upstream hop, so they are not passed on."""

_OWN_META_PREFIX = "orchestrator/"
_UPSTREAM_ONLY = (_PROTOCOL_META_PREFIX, _OWN_META_PREFIX)
"""`_meta` key prefixes never passed on from a server's result."""

META_TOOL_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "name": TOOL_SEARCH,
        "description": (
            "Search the tools that are available but not loaded. Give a few words saying what you need; "
            "returns matching tool names with one-line summaries and scores, best first (no schemas). "
            "An exact tool name, or select:NAME, returns that tool."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in a few words."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_LIMIT_MAX,
                    "description": "Most results.",
                },
            },
            "required": ["query"],
        },
    },
    {
        "name": EXPAND_TOOLS,
        "description": (
            "Load the full definitions (description and input schema) of tools by their exact names, "
            "as returned by tool_search or listed in the directory, so they can be called."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "names": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "Exact tool names to load.",
                }
            },
            "required": ["names"],
        },
    },
    {
        "name": CALL_TOOL,
        "description": (
            "Run a tool found with tool_search. Pass its exact name and its arguments as a JSON object that "
            "matches the input schema expand_tools returned."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Qualified tool name, e.g. from a tool_search hit."},
                "arguments": {"type": "object", "description": "The tool's arguments, as its input schema says."},
            },
            "required": ["name"],
        },
    },
)
"""What search mode sends instead of the catalog, in this order; the gateway serves the same three."""

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
ResultT = TypeVar("ResultT", bound=types.Result)


def meta_tool_definitions() -> list[dict[str, Any]]:
    """`tool_search`, `expand_tools` and `call_tool` as sent to a model (in that order)."""
    return [dict(definition) for definition in META_TOOL_DEFINITIONS]


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


def event_counts(event: MetaEvent) -> dict[str, Any]:
    """What one event adds to a spawn's counts: `searches`, `expands`, `calls` (dispatched to a server, the
    tool may still report an error), `errors` (corrective errors) and `called` (tools called without error)."""
    ran = event.error is None
    called = isinstance(event, CallEvent) and event.outcome == "ok" and event.tool is not None
    return {
        "searches": int(isinstance(event, SearchEvent) and ran),
        "expands": int(isinstance(event, ExpandEvent) and ran),
        "calls": int(isinstance(event, CallEvent) and event.server is not None),
        "errors": int(not ran),
        "called": [event.tool[0]] if called and isinstance(event, CallEvent) and event.tool else [],
    }


@dataclass
class MetaStats:
    """One agent's meta-tool counts (`event_counts` summed): an event listener every `MetaTools` has."""

    searches: int = 0
    expands: int = 0
    calls: int = 0
    """Calls dispatched to a server (the tool may still report an error)."""
    errors: int = 0
    """Corrective errors returned before or instead of a dispatch."""
    called: list[str] = field(default_factory=list)
    """Qualified names of tools called without error, most recent last, each once."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __call__(self, event: MetaEvent) -> None:
        counts = event_counts(event)
        with self._lock:
            self.searches += counts["searches"]
            self.expands += counts["expands"]
            self.calls += counts["calls"]
            self.errors += counts["errors"]
            for name in counts["called"]:
                if name in self.called:
                    self.called.remove(name)
                self.called.append(name)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "searches": self.searches,
                "expands": self.expands,
                "calls": self.calls,
                "errors": self.errors,
                "called": list(self.called),
            }


@dataclass(frozen=True)
class Handled:
    """A meta-tool request's result and the event it emitted."""

    result: types.CallToolResult
    event: MetaEvent


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
        caller: who this agent is (its profile, and for a spawn its id and task): put on every event and
            quoted in refusals.
        listeners: receive every event (`_events.EventListener`), after telemetry and `stats`.
        telemetry: where searches and expands are counted (default: the engine's).
        counter: counts the tokens of each result (default: one for the engine's `tokenizer` setting).
        offload: where `dispatch` and `handle` run searches, expands, call checks and listeners (a worker
            pool); None runs them inline, on the caller's event loop.
        search_offered: whether the agent was given `tool_search` (False in full mode: hints then point
            at the listed tools instead); a callable is asked at each error.
        names: maps a name the agent was given for a tool (a client's short name) to its qualified name;
            None when the agent sees qualified names only.
        schema_limits: the configured `mcp.schema_max_depth` / `schema_max_bytes` (`MCPManager.schema_limits`);
            call arguments nested deeper than its depth are refused before jsonschema recurses into them.
        held: why a name the agent used is a tool held back from it (changed since pinned, or flagged), or
            None; such a name is refused with that reason instead of "unknown" (docs/security.md).
    """

    def __init__(
        self,
        engine: ToolSearchEngine,
        router: ToolRouter | None = None,
        *,
        full_catalog: ToolCatalog | Callable[[], ToolCatalog] | None = None,
        visibility: Visibility | None = None,
        caller: Caller | None = None,
        listeners: Sequence[EventListener] = (),
        telemetry: Telemetry | None = None,
        counter: TokenCounter | None = None,
        offload: Offload | None = None,
        search_offered: bool | Callable[[], bool] = True,
        names: Callable[[str], str | None] | None = None,
        schema_limits: SchemaLimits | None = None,
        held: Callable[[str], str | None] | None = None,
    ) -> None:
        self._engine = engine
        self._router = router
        self._full = full_catalog
        self._visibility = visibility
        self.caller = caller or Caller()
        self.stats = MetaStats()
        self._listeners: tuple[EventListener, ...] = (
            telemetry_listener(telemetry if telemetry is not None else engine.telemetry, search_offered),
            self.stats,
            *listeners,
        )
        self._counter = counter
        self._offload = offload
        self._search_offered = search_offered
        self._names = names
        self._held = held
        self._arguments = ArgumentChecker(schema_limits)

    # ------------------------------------------------------------------ the three tools

    def tool_search(self, query: Any, limit: Any = None) -> types.CallToolResult:
        """Names, summaries and scores of the best matches: `{"query", "outcome", "hits": [...]}`
        (`SearchHit.to_result`: kept short, since it stays in the agent's context)."""
        return self._search(query, limit).result

    def expand_tools(self, names: Any) -> types.CallToolResult:
        """Full definitions of the named tools: `{"tools": [{"name", "description", "input_schema"}]}`."""
        return self._expand(names).result

    async def call_tool(
        self, name: Any, arguments: Any = None, *, relay: CallRelay | None = None
    ) -> types.CallToolResult:
        """Validate `arguments` against the tool's input schema, then run it on the first ready server
        (with what `relay` asks to hear while it runs)."""
        return (await self._call(name, arguments, relay)).result

    async def dispatch(
        self, name: str, arguments: Mapping[str, Any] | Any, *, relay: CallRelay | None = None
    ) -> types.CallToolResult:
        """Whatever tool name a model used: a meta-tool, or an expanded tool called directly (API loops)."""
        return (await self.handle(name, arguments, relay=relay)).result

    async def handle(self, name: str, arguments: Mapping[str, Any] | Any, *, relay: CallRelay | None = None) -> Handled:
        """`dispatch`, also returning the request's event (a server's accounting pairs the two)."""
        started = time.monotonic()
        args = dict(arguments) if isinstance(arguments, Mapping) else repaired_object(arguments)
        if not isinstance(args, dict):
            message = f"arguments for {name!r} must be a JSON object."
            refused = _Corrective("invalid_arguments", message)
            return await self._run(self._refused, name, refused, started)
        if name == TOOL_SEARCH:
            return await self._run(self._search, args.get("query"), args.get("limit"))
        if name == EXPAND_TOOLS:
            return await self._run(self._expand, args.get("names"))
        if name == CALL_TOOL:
            return await self._call(args.get("name"), args.get("arguments"), relay)
        return await self._call(name, args, relay)

    # ------------------------------------------------------------------ each tool, with its event

    def _search(self, query: Any, limit: Any) -> Handled:
        started = time.monotonic()
        text = query if isinstance(query, str) else ""
        try:
            if not isinstance(query, str):
                raise _Corrective("invalid_arguments", "tool_search needs 'query' as a string of keywords.")
            # None: the engine's search_limit; above the maximum: the maximum.
            k = min(_positive_int(limit, "limit"), SEARCH_LIMIT_MAX) if limit is not None else None
            ranked = self._engine.rank(query, k)
        except SearchQueryError as exc:
            message = f"{exc}. Send a short list of keywords (what the tool does)."
            return self._refused(TOOL_SEARCH, _Corrective("invalid_query", message), started, query=text)
        except _Corrective as exc:
            return self._refused(TOOL_SEARCH, exc, started, query=text)
        hits = ranked.hits
        result = _structured(
            {"query": query, "outcome": "hit" if hits else "miss", "hits": [hit.to_result() for hit in hits]}
        )
        event = SearchEvent(
            caller=self.caller,
            outcome="hit" if hits else "miss",
            query=query,
            hits=tuple(RankedTool(hit.name, hit.server, hit.tool, rank, hit.score) for rank, hit in enumerate(hits, 1)),
            ranking=ranked.ranking,
            fallback=ranked.fallback,
            **self._measure(result, started),
        )
        return self._emit(result, event)

    def _expand(self, names: Any) -> Handled:
        started = time.monotonic()
        asked = _asked_names(names)
        try:
            wanted = _name_list(names)
            for name in wanted:
                self._check_echo(name)
                self._check_held(name)
                self._check_visible(name)
            definitions = self._engine.expand_tools(wanted)
        except ToolNotFoundError as exc:
            corrective = _Corrective("unknown_tool", f"{exc}. Use tool_search to find tool names.")
            return self._refused(EXPAND_TOOLS, corrective, started, names=asked)
        except ExpandError as exc:
            corrective = _Corrective("too_many", f"{exc}. Ask for fewer names at once.")
            return self._refused(EXPAND_TOOLS, corrective, started, names=asked)
        except _Corrective as exc:
            return self._refused(EXPAND_TOOLS, exc, started, names=asked)
        result = _structured({"tools": definitions})
        counter = self._token_counter()
        tools = tuple((str(definition["name"]), counter.definition(definition)) for definition in definitions)
        event = ExpandEvent(
            caller=self.caller, outcome="ok", names=asked, tools=tools, **self._measure(result, started)
        )
        return self._emit(result, event)

    async def _call(self, name: Any, arguments: Any, relay: CallRelay | None) -> Handled:
        started = time.monotonic()
        checked = await self._run(self._checked_call, name, arguments, started)
        if isinstance(checked, Handled):
            return checked
        entry, args, server = checked
        if self._router is None:
            refused = _Corrective("unavailable", f"tool {entry.name!r} cannot be called here (no live servers).")
            return await self._run(self._refused, entry.name, refused, started, entry)
        options = relay.options() if relay is not None else {}
        error: str | None = None
        try:
            result = without_upstream_stamps(await self._router.call_tool(server, entry.tool, args, **options))
        except ToolExecutionError as exc:
            tool_result = getattr(exc, "result", None)
            if isinstance(tool_result, types.CallToolResult):
                result = without_upstream_stamps(tool_result)
            else:
                error, result = "tool_error", error_result("tool_error", str(exc))
        except (ServerError, ToolCallError) as exc:
            error, result = "call_failed", error_result("call_failed", f"{exc}. Try again later or use another tool.")
        outcome = "error" if error else "tool_error" if result.is_error else "ok"
        return await self._run(self._called, entry, server, result, outcome, error, started)

    def _called(
        self,
        entry: ToolEntry,
        server: str,
        result: types.CallToolResult,
        outcome: str,
        error: str | None,
        started: float,
    ) -> Handled:
        event = CallEvent(
            caller=self.caller,
            outcome=outcome,
            error=error,
            name=entry.name,
            tool=(entry.name, self._token_counter().entry(entry)),
            server=server,
            **self._measure(result, started),
        )
        return self._emit(result, event)

    def _refused(
        self,
        name: Any,
        corrective: _Corrective,
        started: float,
        entry: ToolEntry | None = None,
        *,
        query: str = "",
        names: tuple[str, ...] = (),
    ) -> Handled:
        """The corrective error result for a request to `name`, and its event."""
        result = error_result(corrective.kind, str(corrective))
        common: dict[str, Any] = {"caller": self.caller, "outcome": "error", "error": corrective.kind}
        common.update(self._measure(result, started))
        event: MetaEvent
        if name == TOOL_SEARCH:
            event = SearchEvent(query=query, **common)
        elif name == EXPAND_TOOLS:
            event = ExpandEvent(names=names, **common)
        else:
            tool = (entry.name, self._token_counter().entry(entry)) if entry is not None else None
            event = CallEvent(name=name if isinstance(name, str) else "", tool=tool, **common)
        return self._emit(result, event)

    def _measure(self, result: types.CallToolResult, started: float) -> dict[str, Any]:
        """An event's tokens and timing fields for `result`, answered now."""
        text = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
        return {
            "result_tokens": self._token_counter().text(text) if text else 0,
            "started": started,
            "duration_s": max(0.0, time.monotonic() - started),
        }

    def _emit(self, result: types.CallToolResult, event: MetaEvent) -> Handled:
        for listener in self._listeners:
            listener(event)
        return Handled(result, event)

    def _token_counter(self) -> TokenCounter:
        if self._counter is None:
            self._counter = TokenCounter(self._engine.settings.tokenizer)
        return self._counter

    async def _run(self, func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """`func(*args)` through `offload`, or inline without one."""
        if self._offload is None:
            return func(*args)
        return await self._offload(func, *args)

    # ------------------------------------------------------------------ checks

    def _checked_call(
        self, name: Any, arguments: Any, started: float
    ) -> tuple[ToolEntry, dict[str, Any], str] | Handled:
        """The tool, its checked arguments and the server to call; or the refusal and its event."""
        entry: ToolEntry | None = None
        try:
            entry = self._resolve(name)
            args = self._arguments.check(entry, arguments)
            return entry, args, self._pick_server(entry)
        except ArgumentProblem as exc:
            return self._refused(name, _Corrective("invalid_arguments", str(exc)), started, entry)
        except _Corrective as exc:
            return self._refused(name, exc, started, entry)

    def _resolve(self, name: Any) -> ToolEntry:
        if not isinstance(name, str) or not name.strip():
            raise _Corrective("invalid_arguments", "call_tool needs 'name': the qualified name of a tool.")
        if name in META_TOOL_NAMES:
            raise _Corrective("invalid_arguments", f"{name} is a meta-tool: call it directly, not via call_tool.")
        self._check_echo(name)
        if self._names is not None:
            name = self._names(name) or name
        entry = self._engine.catalog.lookup(name)
        if entry is None:
            self._check_held(name)
            self._check_visible(name)
            raise _Corrective("unknown_tool", self._unknown_message(name))
        return entry

    def _check_echo(self, name: str) -> None:
        """Refuse a name over NAME_ECHO_CHARS that no tool has, echoing it cut short."""
        if len(name) <= NAME_ECHO_CHARS or self._full_catalog().lookup(name) is not None:
            return
        shown = f"{name[:NAME_ECHO_CHARS]}... ({len(name):,} characters)"
        raise _Corrective("unknown_tool", self._unknown_message(shown))

    def _check_held(self, name: str) -> None:
        """Refuse a tool held back from agents, naming why (not listed, so never offered to this agent)."""
        if self._held is None or self._engine.catalog.lookup(name) is not None:
            return
        reason = self._held(name)
        if reason is not None:
            raise _Corrective(
                "held_back",
                f"tool {name!r} is held back: {reason}. It cannot be used until a person reviews and approves it; "
                "tell the user (orchestrator tools diff / orchestrator tools approve).",
            )

    def _check_visible(self, name: str) -> None:
        """Refuse a tool that exists but that this agent's profile hides (never reveals its schema)."""
        if self._engine.catalog.lookup(name) is not None:
            return
        if self._full is not None and self._full_catalog().lookup(name) is not None:
            agent = self.caller.agent
            raise _Corrective(
                "hidden_tool",
                f"tool {name!r} is not available to agent {agent!r} (its profile hides it: "
                f"agents.{agent}.allow/deny/servers). {self._find_hint('a tool this agent may use')}",
            )

    def _full_catalog(self) -> ToolCatalog:
        full = self._full() if callable(self._full) else self._full
        return full if full is not None else self._engine.catalog

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
    """A server's result without the `_meta` keys its protocol stack stamped on it (its identity), nor the
    keys this gateway's own answers carry (`orchestrator/error`: a server must not pass its result off as
    the gateway's corrective error), for passing it on as the caller's own surface's result."""
    meta = result.meta
    if not meta or not any(key.startswith(_UPSTREAM_ONLY) for key in meta):
        return result
    kept = {key: value for key, value in meta.items() if not key.startswith(_UPSTREAM_ONLY)}
    return result.model_copy(update={"meta": kept or None})


def _structured(payload: dict[str, Any]) -> types.CallToolResult:
    """Structured content plus the same JSON as text, for clients that read only text (MCP advice). The
    text is compact JSON: it is what most agent CLIs put into the model's context."""
    text = compact_json(payload)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=payload)


def _positive_int(value: Any, key: str) -> int:
    """A positive integer, or one written as a string of (at most 18 ASCII) digits."""
    if isinstance(value, str) and is_number(value.strip()) and len(value.strip()) <= 18:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        shown = one_line(describe_value(value), NAME_ECHO_CHARS)
        raise _Corrective("invalid_arguments", f"'{key}' must be a positive integer, got {shown}.")
    return value


def _name_list(names: Any) -> list[str]:
    """`names` as a list of strings; a JSON-encoded list or a single name is accepted as the model meant it."""
    if isinstance(names, str):
        decoded = json_or_none(names)
        names = decoded if isinstance(decoded, list) else [names]
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise _Corrective("invalid_arguments", "expand_tools needs 'names': a list of tool names from tool_search.")
    return names


def _asked_names(names: Any) -> tuple[str, ...]:
    """The names an expand asked for, for its event (whatever shape the model sent them in)."""
    try:
        return tuple(name[:NAME_ECHO_CHARS] for name in _name_list(names))
    except _Corrective:
        return ()
