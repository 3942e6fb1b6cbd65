"""Session accounting: what one spawn's tools cost over its whole session, in its mode and in the other.

A model receives its tool definitions (and, in search mode, the directory) with every request it is
sent, so what a mode costs depends on how many requests (*rounds*) a task takes, and in search mode on
its searches and expands. This module turns what the gateway saw of one session into tokens, with the
counterfactual cost of the other mode for the same session. Pure: no I/O, no clock but the one passed in.

Rounds (an estimate: the gateway sees MCP requests, not model requests). Tool calls are grouped into
*batches*: a call that arrives while another call of the spawn is in flight, or less than `BATCH_GAP_S`
after the previous response, belongs to the previous call's batch (a model asking for several tools at
once, run concurrently or one after the other); any later call starts a new batch. Each batch ends one
model round, and the last round (the answer) calls nothing, so `rounds = batches + 1`. `tools/list` is
never a round of its own: a client lists before the round that uses the list.

The cost model (tokens of the tools part of each request; the counting rule is `_tokens.py`):

    full mode     every round sends every definition the profile sees:   rounds_full x full_tokens
    search mode   every round sends the search base (directory prompt, the three meta-tools, the pinned
                  tools) plus every schema `expand_tools` handed over in an earlier round; each
                  `tool_search` result is paid once. An expand's result *is* those schemas, so it is
                  counted as carried schemas from the next round on, not again as a result.
    not counted   tool-call results, the task and the rest of the conversation: the same in both modes
                  (call results are recorded as `call_result_tokens`, outside both costs).

    counterfactual, full mode for a search-mode session: the same session without its batches that only
        searched or expanded (a model that has every schema goes straight to the call).
    counterfactual, search mode for a full-mode session: before each batch that calls a tool neither
        pinned nor found yet, one batch of `tool_search` (one per such tool, each paying the mean search
        result) and one `expand_tools` batch (their schemas, carried from then on).
    saved = counterfactual - tokens: positive when the session's mode was the cheaper one.

    break-even: a profile's sessions cost the same in both modes when its catalog costs
        sum(search-mode tokens) / sum(full-mode rounds)
    tokens; below that, full mode is cheaper. That is the `threshold_tokens` these sessions argue for
    (the search base depends a little on the catalog through the directory; taken as measured).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._events import CallEvent, ExpandEvent, MetaEvent, SearchEvent

__all__ = [
    "BATCH_GAP_S",
    "DEFAULT_SEARCH_RESULT_TOKENS",
    "MAX_RECORDED_ACTIONS",
    "Action",
    "Batches",
    "SessionBasis",
    "SessionCost",
    "SessionRecorder",
    "action_of",
    "break_even",
    "mean_search_result_tokens",
    "needed_tools",
    "session_cost",
]

ActionKind = Literal["search", "expand", "call"]
ACTION_KINDS: tuple[str, ...] = ("search", "expand", "call")

BATCH_GAP_S = 0.15
"""Calls closer than this to the previous response belong to its batch. Shorter than any model round
(a hosted model's time to first token alone is 0.2 s or more), longer than a client's step between the
calls of one batch it runs one after the other (milliseconds)."""
DEFAULT_SEARCH_RESULT_TOKENS = 340
"""Estimated tokens of one `tool_search` result when a session measured none: up to 8 hits (the default
`search_limit`) of name, server, score and a one-line summary as JSON. benchmarks/sessions.py measured
a mean of 341 over 77 searches of published tools (274 for git and file tools, 674 for web tools with
long summaries); `orchestrator tune` prices with a profile's own measured mean when it has one."""
MAX_RECORDED_ACTIONS = 5_000
"""Actions kept per session. A real session makes tens to hundreds of requests; a runaway agent must not
grow the gateway's memory without bound. Past it, batches are still counted (rounds stay right) but
their actions are dropped, and the session says how many."""

Batches = tuple[tuple["Action", ...], ...]
"""A session's tool-call batches in order, each the actions (requests) it held."""


@dataclass(frozen=True)
class Action:
    """One request of a session: a search, an expand or a tool call, with what it returned."""

    kind: ActionKind
    result_tokens: int = 0
    """Tokens of the result text the model reads."""
    hits: int | None = None
    """tool_search: tools returned (0 is a miss); None for the other kinds and for refused searches."""
    tools: tuple[tuple[str, int], ...] = ()
    """expand_tools: (qualified name, schema tokens) of each schema handed over; a call: the tool called."""
    error: bool = False
    """A corrective error or an `isError` result (an errored search is not a hit nor a miss)."""

    @property
    def miss(self) -> bool:
        return self.kind == "search" and not self.error and self.hits == 0

    @property
    def searched(self) -> bool:
        """A search that ran (a hit or a miss)."""
        return self.kind == "search" and not self.error and self.hits is not None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "result_tokens": self.result_tokens}
        if self.hits is not None:
            data["hits"] = self.hits
        if self.tools:
            data["tools"] = {name: tokens for name, tokens in self.tools}
        if self.error:
            data["error"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        """Raises: ValueError naming the field that is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"action: expected an object, got {type(data).__name__}")
        kind = data.get("kind")
        if kind not in ACTION_KINDS:
            raise ValueError(f"action kind {kind!r}: expected one of {', '.join(ACTION_KINDS)}")
        tools = data.get("tools") or {}
        if not isinstance(tools, Mapping):
            raise ValueError("action tools: expected an object {name: schema tokens}")
        hits = data.get("hits")
        return cls(
            kind=kind,
            result_tokens=_count(data.get("result_tokens", 0), "action result_tokens"),
            hits=None if hits is None else _count(hits, "action hits"),
            tools=tuple((str(name), _count(tokens, f"action tools[{name}]")) for name, tokens in tools.items()),
            error=bool(data.get("error", False)),
        )


def action_of(event: MetaEvent) -> Action:
    """What one meta-tool request was, for the cost model: its kind, result tokens, what it found or handed
    over, and whether the agent got an error."""
    error = event.is_error
    if isinstance(event, SearchEvent):
        return Action("search", result_tokens=event.result_tokens, hits=None if error else len(event.hits), error=error)
    if isinstance(event, ExpandEvent):
        return Action("expand", result_tokens=event.result_tokens, tools=() if error else event.tools, error=error)
    assert isinstance(event, CallEvent)
    called = (event.tool,) if event.tool is not None else ()
    return Action("call", result_tokens=event.result_tokens, tools=called, error=error)


@dataclass(frozen=True)
class SessionBasis:
    """What one round costs this spawn's profile over its catalog, in each mode."""

    mode: Literal["full", "search"]
    """The mode the spawn ran in."""
    full_tokens: int
    """Every definition the profile sees: what full mode sends each round."""
    search_tokens: int
    """Directory prompt + the three meta-tools + pinned tools: what search mode sends each round before
    any expand."""
    pinned: tuple[str, ...] = ()
    """Tools search mode sends in full (no search or expand needed for them)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "full_tokens": self.full_tokens,
            "search_tokens": self.search_tokens,
            "pinned": list(self.pinned),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionBasis:
        """Raises: ValueError naming the field that is wrong."""
        mode = data.get("mode")
        if mode not in ("full", "search"):
            raise ValueError(f"basis mode {mode!r}: expected full or search")
        pinned = data.get("pinned") or []
        if not isinstance(pinned, list):
            raise ValueError("basis pinned: expected a list of tool names")
        return cls(
            mode=mode,
            full_tokens=_count(data.get("full_tokens"), "basis full_tokens"),
            search_tokens=_count(data.get("search_tokens"), "basis search_tokens"),
            pinned=tuple(str(name) for name in pinned),
        )


@dataclass(frozen=True)
class SessionCost:
    """One session's counts and tokens, in its mode and in the other (rules in the module docstring)."""

    mode: str
    rounds: int
    """Model rounds as measured (estimated from the requests, see the module docstring)."""
    searches: int
    misses: int
    expands: int
    calls: int
    errors: int
    full_rounds: int
    """Rounds in full mode: measured (full) or without the search/expand-only batches (search)."""
    search_rounds: int
    """Rounds in search mode: measured (search) or with a search and an expand batch added (full)."""
    full_mode_tokens: int
    search_mode_tokens: int
    search_result_tokens: int
    """tool_search results paid in search mode (measured, or estimated for a full-mode session)."""
    call_result_tokens: int
    """Tool-call results: the same in both modes, so in neither cost."""
    needed: tuple[str, ...] = ()
    """Tools the agent had to find (expanded, or called without being pinned), first use first."""
    dropped_actions: int = 0
    """Actions past MAX_RECORDED_ACTIONS (their tokens are missing from the costs)."""

    @property
    def tokens(self) -> int:
        """What the session cost in its own mode."""
        return self.full_mode_tokens if self.mode == "full" else self.search_mode_tokens

    @property
    def counterfactual(self) -> int:
        """What the same session would have cost in the other mode."""
        return self.search_mode_tokens if self.mode == "full" else self.full_mode_tokens

    @property
    def saved(self) -> int:
        """counterfactual - tokens: negative when the other mode would have been cheaper."""
        return self.counterfactual - self.tokens

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `GET /spawns/<id>` shows it under `session`."""
        return {
            "mode": self.mode,
            "rounds": self.rounds,
            "searches": self.searches,
            "misses": self.misses,
            "expands": self.expands,
            "calls": self.calls,
            "errors": self.errors,
            "tokens": self.tokens,
            "counterfactual_tokens": self.counterfactual,
            "saved_tokens": self.saved,
            "full_mode": {"rounds": self.full_rounds, "tokens": self.full_mode_tokens},
            "search_mode": {
                "rounds": self.search_rounds,
                "tokens": self.search_mode_tokens,
                "search_result_tokens": self.search_result_tokens,
            },
            "call_result_tokens": self.call_result_tokens,
            "needed_tools": list(self.needed),
            "dropped_actions": self.dropped_actions,
        }


# --------------------------------------------------------------------------- the cost model


def session_cost(
    basis: SessionBasis, batches: Batches, *, search_result_tokens: int | None = None, dropped_actions: int = 0
) -> SessionCost:
    """Counts and tokens of one session, measured in its mode and counterfactual in the other.

    Args:
        basis: the per-round costs of the spawn's profile in each mode.
        batches: the session's tool-call batches (see `SessionRecorder`).
        search_result_tokens: tokens of one search result for the counterfactual search mode of a
            full-mode session; default: this session's measured mean, else DEFAULT_SEARCH_RESULT_TOKENS.
        dropped_actions: actions the recorder did not keep (reported, not estimated).
    """
    actions = [action for batch in batches for action in batch]
    searches = sum(1 for action in actions if action.searched)
    measured_mean = mean_search_result_tokens([batches])
    per_search = search_result_tokens if search_result_tokens is not None else measured_mean
    per_search = per_search if per_search is not None else DEFAULT_SEARCH_RESULT_TOKENS
    needed = needed_tools(basis, batches)
    rounds = len(batches) + 1
    if basis.mode == "search":
        search_rounds = rounds
        search_mode, search_results = _search_mode_tokens(basis.search_tokens, batches)
        full_rounds = rounds - sum(1 for batch in batches if batch and _finds_only(batch))
    else:
        full_rounds = rounds
        simulated = _with_discovery(basis, batches, per_search)
        search_rounds = len(simulated) + 1
        search_mode, search_results = _search_mode_tokens(basis.search_tokens, simulated)
    return SessionCost(
        mode=basis.mode,
        rounds=rounds,
        searches=searches,
        misses=sum(1 for action in actions if action.miss),
        expands=sum(1 for action in actions if action.kind == "expand" and not action.error),
        calls=sum(1 for action in actions if action.kind == "call"),
        errors=sum(1 for action in actions if action.error),
        full_rounds=full_rounds,
        search_rounds=search_rounds,
        full_mode_tokens=full_rounds * basis.full_tokens,
        search_mode_tokens=search_mode,
        search_result_tokens=search_results,
        call_result_tokens=sum(action.result_tokens for action in actions if action.kind == "call"),
        needed=needed,
        dropped_actions=dropped_actions,
    )


def _search_mode_tokens(base: int, batches: Batches) -> tuple[int, int]:
    """(search-mode tokens, of which search results) over `batches` plus the answer round."""
    carried: dict[str, int] = {}
    total = 0
    results = 0
    for batch in (*batches, ()):  # the answer round sends the tools too
        total += base + sum(carried.values())
        for action in batch:
            if action.kind == "search" and not action.error:
                results += action.result_tokens
            elif action.kind == "expand" and not action.error:
                carried.update(action.tools)
    return total + results, results


def _finds_only(batch: Sequence[Action]) -> bool:
    """A batch that only searched or expanded: a full-mode model would not have needed it."""
    return all(action.kind in ("search", "expand") for action in batch)


def _with_discovery(basis: SessionBasis, batches: Batches, per_search: int) -> Batches:
    """A full-mode session's batches as search mode would have run them: a search batch and an expand
    batch before each batch that calls tools neither pinned nor found yet."""
    known = set(basis.pinned)
    simulated: list[tuple[Action, ...]] = []
    for batch in batches:
        new: dict[str, int] = {}
        for action in batch:
            if action.kind == "call":
                for name, tokens in action.tools:
                    if name not in known:
                        new.setdefault(name, tokens)
        if new:
            simulated.append(tuple(Action("search", result_tokens=per_search, hits=1) for _ in new))
            simulated.append((Action("expand", tools=tuple(new.items())),))
            known.update(new)
        simulated.append(batch)
    return tuple(simulated)


def needed_tools(basis: SessionBasis, batches: Batches) -> tuple[str, ...]:
    """Tools the agent had to find in search mode: expanded, or called without being pinned (by first
    round of use, by name within a round, whose calls arrive in no set order; a call the tool answered
    with an error counts, a refused expand does not). What `orchestrator tune` counts to suggest pins."""
    pinned = set(basis.pinned)
    found: dict[str, None] = {}
    for batch in batches:
        names = {
            name
            for action in batch
            if action.kind != "search" and not (action.kind == "expand" and action.error)
            for name, _ in action.tools
        }
        for name in sorted(names - pinned):
            found.setdefault(name)
    return tuple(found)


def mean_search_result_tokens(sessions: Iterable[Batches]) -> int | None:
    """Mean tokens of a search result over the searches of `sessions` (None: no search ran)."""
    total = count = 0
    for batches in sessions:
        for batch in batches:
            for action in batch:
                if action.searched:
                    total += action.result_tokens
                    count += 1
    return round(total / count) if count else None


def break_even(costs: Iterable[SessionCost]) -> float | None:
    """The catalog size (tokens) at which `costs`' sessions cost the same in both modes:
    sum(search-mode tokens) / sum(full-mode rounds). None without sessions."""
    search = rounds = 0
    for cost in costs:
        search += cost.search_mode_tokens
        rounds += cost.full_rounds
    return search / rounds if rounds else None


# --------------------------------------------------------------------------- the round estimate


@dataclass
class _Recorded:
    batches: list[list[Action]] = field(default_factory=list)
    actions: int = 0
    dropped: int = 0
    lists: int = 0


_DROPPED_BATCH: list[Action] = []
"""The batch of every round begun past MAX_RECORDED_ACTIONS: nothing is ever added to it (`end` drops)."""


class SessionRecorder:
    """Groups one spawn's requests into batches (the round estimate in the module docstring) and keeps
    what each returned. Thread-safe: the gateway ends requests from its worker threads.

    Args:
        gap_s: calls closer than this to the previous response join its batch.
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(self, *, gap_s: float = BATCH_GAP_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._gap_s = gap_s
        self._clock = clock
        self._lock = threading.Lock()
        self._recorded = _Recorded()
        self._in_flight = 0
        self._last_end: float | None = None

    def begin(self) -> int:
        """A tool call arrived: the index of the batch it belongs to."""
        with self._lock:
            now = self._clock()
            batches = self._recorded.batches
            idle = self._in_flight == 0 and (self._last_end is None or now - self._last_end >= self._gap_s)
            if not batches or idle:
                # Past the cap no action is kept: the round is one shared empty batch, a pointer, not a list.
                batches.append([] if self._recorded.actions < MAX_RECORDED_ACTIONS else _DROPPED_BATCH)
            self._in_flight += 1
            return len(batches) - 1

    def end(self, batch: int, action: Action | None) -> None:
        """The call begun in `batch` was answered (`action`: what it was; None when it was cancelled)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._last_end = self._clock()
            if action is None:
                return
            if self._recorded.actions >= MAX_RECORDED_ACTIONS:
                self._recorded.dropped += 1
                return
            self._recorded.batches[batch].append(action)
            self._recorded.actions += 1

    def listed(self) -> None:
        """A tools/list request: counted, never a round of its own."""
        with self._lock:
            self._recorded.lists += 1

    @property
    def lists(self) -> int:
        return self._recorded.lists

    @property
    def dropped(self) -> int:
        return self._recorded.dropped

    def batches(self) -> Batches:
        """A snapshot of the batches so far."""
        with self._lock:
            return tuple(tuple(batch) for batch in self._recorded.batches)


MAX_COUNT = 10**15
"""Largest count or token figure read back from a spawn log (another process wrote it): sums of larger ones
overflow a float."""


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**20 else "a huge number"
        raise ValueError(f"{what}: expected a whole number from 0 to {MAX_COUNT:.0e}, got {shown}")
    return value
