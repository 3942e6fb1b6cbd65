"""`orchestrator tune`: `threshold_tokens` and pins recommended from measured sessions.

Reads finished sessions from the spawn log (`gateway.spawn_log`, from the shared store when `store.url`
is set; or the file `--spawn-log PATH`) or from a Prometheus server that scrapes the gateway
(`--prometheus URL`), and the current catalog (the configured
servers, or `--catalog PATH`). Per agent profile it prints spawns by mode; rounds, searches, misses,
expands and calls per session; tokens per session as measured in each mode and as the other mode would
have cost; the recommended `threshold_tokens` (the break-even of the measured sessions, see
`orchestrator._accounting`) and pins (tools most sessions had to find), each with its reason and the
figures behind it. `--json` prints the same as one document.

Too little data (no sessions, or fewer than MIN_SESSIONS for every profile) is not an error: the
figures so far are printed, with a message saying what is missing, and the command exits 0.

Analysis (`analyze_records`, `analyze_prometheus`) is pure; reading the log, the catalog and Prometheus
is the I/O around it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._untrusted import json_or_none
from ..protocols.mcp._normalization import one_line
from ._common import bounded_get, console, loaded_config, print_json, print_table

if TYPE_CHECKING:
    from .._accounting import SessionCost
    from .._config import AgentProfile, Settings
    from .._spawnlog import SpawnLogRead, SpawnRecord
    from ..protocols.mcp._catalog import ToolCatalog

__all__ = [
    "MIN_SEARCHED_CALLS",
    "MIN_SESSIONS",
    "AgentAdvice",
    "ModeFigures",
    "PinAdvice",
    "SearchQuality",
    "TuneReport",
    "analyze_prometheus",
    "analyze_records",
    "register",
    "search_quality",
]

MIN_SESSIONS = 5
"""Sessions of a profile below which no recommendation is made: rounds and searches vary a lot from one
task to the next, and a handful of tasks says little about the next hundred."""
PIN_MIN_SHARE = 0.5
"""A tool is a pin candidate when at least this share of a profile's sessions had to find it ("most")."""
THRESHOLD_STEP = 100
"""A recommended threshold is rounded to this many tokens: the break-even is an estimate."""
DEFAULT_WINDOW = "7d"
"""With `--prometheus`: how far back the session counters are read (`increase(...[7d])`)."""
PROMETHEUS_TIMEOUT_S = 10.0
"""One instant query on a local Prometheus takes milliseconds; past this it is not answering."""
MODES = ("full", "search")
MIN_SEARCHED_CALLS = 20
"""Search-mode calls after a search below which search quality is reported but not judged."""
TOP5_TARGET = 0.8
"""Share of searched calls whose tool the search ranked in the top 5, below which tune says how to raise it
(the development sets' hybrid hit@5 is 0.87-0.92 on requests written as tasks)."""
BEYOND5_SHARE = 0.1
"""Share of searched calls that picked a tool ranked 6th or lower above which a larger `search_limit` pays."""
TOP5_RANKS = ("1", "2", "3", "4", "5")


@dataclass(frozen=True)
class ModeFigures:
    """Sessions measured in one mode, per session."""

    sessions: float
    rounds: float
    searches: float
    misses: float
    expands: float
    calls: float
    tokens: float
    """Tool tokens per session, as measured in this mode."""
    other_mode_tokens: float
    """What the same sessions would have cost per session in the other mode."""


@dataclass(frozen=True)
class PinAdvice:
    tool: str
    sessions: int
    """Sessions that had to find it (expanded it, or called it without a pin)."""
    share: float
    schema_tokens: int
    cost_per_session: float
    """Its schema in every search-mode round of every session."""
    saving_per_session: float
    """A search round and an expand round (and a search result) saved, in the sessions that needed it."""
    recommended: bool
    reason: str


@dataclass
class AgentAdvice:
    agent: str
    sessions: int
    by_mode: dict[str, ModeFigures]
    configured: bool
    """False when the profile is no longer in the configuration (figures only)."""
    catalog_tokens: int | None
    """The profile's visible catalog now, full definitions."""
    threshold_now: int | None
    mode_now: str | None
    tokens_per_session: dict[str, float] = field(default_factory=dict)
    """Every session costed in each mode (measured or counterfactual)."""
    break_even: float | None = None
    recommended_threshold: int | None = None
    mode_recommended: str | None = None
    threshold_reason: str = ""
    pins: list[PinAdvice] = field(default_factory=list)
    pins_reason: str = ""
    message: str | None = None
    """Why there is no recommendation (too few sessions), when there is none."""


@dataclass(frozen=True)
class SearchQuality:
    """Where the tools search-mode agents called stood in their latest search (`mcp_tool_search_call_rank`,
    or the trace store): hit@k on live traffic, without labels."""

    source: str
    calls_by_rank: dict[str, int]
    searched_calls: int
    """Calls made after a search (`unsearched` left out)."""
    found_first: float | None
    found_in_top_5: float | None
    advice: str


@dataclass
class TuneReport:
    source: str
    sessions: int
    agents: list[AgentAdvice]
    min_sessions: int = MIN_SESSIONS
    skipped_lines: int = 0
    first_problem: str | None = None
    message: str | None = None
    """Set when no profile has enough sessions for advice."""
    search_quality: SearchQuality | None = None


# --------------------------------------------------------------------------- analysis (pure)


@dataclass(frozen=True)
class _Current:
    """A profile over today's catalog: its size, threshold, mode and pins."""

    catalog_tokens: int
    threshold: int
    mode: str
    pinned: tuple[str, ...]
    schema_tokens: dict[str, int]


def _current(settings: Settings, profile: AgentProfile, catalog: ToolCatalog) -> _Current:
    from .._planning import ProfileFilter, SpawnPlanner, effective_tool_search, matches_item

    planner = SpawnPlanner(settings)
    visible = ProfileFilter.from_profile(profile).apply(catalog)
    search_settings = effective_tool_search(settings.mcp.tool_search, profile)
    tool_plan = planner.plan_tools(visible, search_settings)
    counter = planner.counter(search_settings.tokenizer)
    pinned = tuple(
        entry.name for entry in visible if matches_item(entry.name, entry.server, entry.tool, search_settings.pinned)
    )
    return _Current(
        catalog_tokens=tool_plan.full_tokens,
        threshold=search_settings.threshold_tokens,
        mode=tool_plan.mode,
        pinned=pinned,
        schema_tokens={entry.name: counter.entry(entry) for entry in visible},
    )


def analyze_records(
    records: list[SpawnRecord], settings: Settings, catalog: ToolCatalog, *, source: str, agent: str | None = None
) -> TuneReport:
    """Advice per agent profile from spawn-log records (the cost rules are `orchestrator._accounting`'s)."""
    from .._accounting import mean_search_result_tokens
    from .._errors import ConfigError

    by_agent: dict[str, list[SpawnRecord]] = {}
    for record in records:
        if agent is None or record.agent == agent:
            by_agent.setdefault(record.agent, []).append(record)
    # A search result's size depends on search_limit and the summaries: the profile's own mean, else every
    # profile's, prices the searches a full-mode session would have made.
    overall = mean_search_result_tokens(record.batches for record in records if record.mode == "search")
    advice = []
    for name, group in sorted(by_agent.items()):
        try:
            current: _Current | None = _current(settings, settings.agent(name), catalog)
        except ConfigError:
            current = None
        own = mean_search_result_tokens(record.batches for record in group if record.mode == "search")
        advice.append(_advise(name, group, current, own if own is not None else overall))
    return _report(source, advice, sum(len(group) for group in by_agent.values()))


def _advise(name: str, records: list[SpawnRecord], current: _Current | None, per_search: int | None) -> AgentAdvice:
    from .._accounting import DEFAULT_SEARCH_RESULT_TOKENS, break_even, session_cost

    costs = [session_cost(record.basis, record.batches, search_result_tokens=per_search) for record in records]
    n = len(costs)
    by_mode = {
        mode: _figures([c for c in costs if c.mode == mode]) for mode in MODES if any(c.mode == mode for c in costs)
    }
    advice = AgentAdvice(
        agent=name,
        sessions=n,
        by_mode=by_mode,
        configured=current is not None,
        catalog_tokens=current.catalog_tokens if current else None,
        threshold_now=current.threshold if current else None,
        mode_now=current.mode if current else None,
        tokens_per_session={
            "full": sum(c.full_mode_tokens for c in costs) / n,
            "search": sum(c.search_mode_tokens for c in costs) / n,
        },
        break_even=break_even(costs),
    )
    if n < MIN_SESSIONS:
        advice.message = f"{n} session{'s' if n != 1 else ''}: need at least {MIN_SESSIONS} for a recommendation"
        return advice
    if current is None:
        advice.message = f"profile {name!r} is not in the configuration any more: figures only"
        return advice
    be = advice.break_even
    assert be is not None  # n > 0
    threshold = int(round(be / THRESHOLD_STEP) * THRESHOLD_STEP)
    advice.recommended_threshold = threshold
    advice.mode_recommended = "full" if current.catalog_tokens <= threshold else "search"
    as_run = sum(c.tokens for c in costs)
    replay = sum(
        c.full_mode_tokens if r.basis.full_tokens <= threshold else c.search_mode_tokens
        for c, r in zip(costs, records, strict=True)
    )
    full_rounds = sum(c.full_rounds for c in costs)
    search_total = sum(c.search_mode_tokens for c in costs)
    advice.threshold_reason = (
        f"over {n} sessions search mode costs {search_total:,} tokens ({search_total / n:,.0f} a session) and "
        f"full mode {full_rounds} rounds x the catalog ({full_rounds / n:.1f} rounds a session): equal at a "
        f"catalog of {be:,.0f} tokens, cheaper in full mode below it. This profile's catalog is "
        f"{current.catalog_tokens:,} tokens now, so at {threshold:,} it gets {advice.mode_recommended} mode "
        f"(now {current.mode} at {current.threshold:,}). Replayed with it, these sessions cost {replay:,} "
        f"tokens against {as_run:,} as they ran ({_difference(as_run - replay)})."
    )
    rounds = sum(c.search_rounds for c in costs) / n
    base = sum(r.basis.search_tokens for r in records) / n
    result = per_search if per_search is not None else DEFAULT_SEARCH_RESULT_TOKENS
    search_mode = advice.mode_recommended == "search"
    advice.pins = _pins(costs, records, current, rounds, base, result, search_mode=search_mode)
    if not search_mode:
        advice.pins_reason = "at the recommended threshold this profile gets the full catalog: pins change nothing"
    elif not any(pin.recommended for pin in advice.pins):
        advice.pins_reason = (
            f"no tool was needed in at least {PIN_MIN_SHARE:.0%} of sessions for less than finding it costs"
        )
    return advice


def _figures(costs: list[SessionCost]) -> ModeFigures:
    n = len(costs)
    return ModeFigures(
        sessions=n,
        rounds=sum(c.rounds for c in costs) / n,
        searches=sum(c.searches for c in costs) / n,
        misses=sum(c.misses for c in costs) / n,
        expands=sum(c.expands for c in costs) / n,
        calls=sum(c.calls for c in costs) / n,
        tokens=sum(c.tokens for c in costs) / n,
        other_mode_tokens=sum(c.counterfactual for c in costs) / n,
    )


def _pins(
    costs: list[SessionCost],
    records: list[SpawnRecord],
    current: _Current,
    rounds: float,
    base: float,
    per_search: int,
    *,
    search_mode: bool,
) -> list[PinAdvice]:
    """Tools at least PIN_MIN_SHARE of the sessions had to find, with whether pinning one pays (only in
    search mode: a full-mode spawn has every schema)."""
    n = len(costs)
    needed = Counter(name for cost in costs for name in set(cost.needed))
    recorded: dict[str, int] = {}
    for record in records:
        for batch in record.batches:
            for action in batch:
                for tool, tokens in action.tools:
                    recorded[tool] = max(tokens, recorded.get(tool, 0))
    pins = []
    for tool, count in needed.most_common():
        share = count / n
        if share < PIN_MIN_SHARE or tool in current.pinned:
            continue
        schema = current.schema_tokens.get(tool, recorded.get(tool, 0))
        cost = schema * rounds
        saving = share * (2 * base + per_search)
        net = saving - cost
        gone = tool not in current.schema_tokens
        recommended = net > 0 and not gone and search_mode
        verdict = "Pin it" if recommended else "Leave it" if search_mode else "In search mode it would be"
        reason = (
            f"needed in {count} of {n} sessions ({share:.0%}: expanded, or called without a pin). Pinned, its "
            f"{schema:,}-token schema rides in every round: {cost:,.0f} tokens a session at {rounds:.1f} rounds. "
            f"Finding it takes a search round and an expand round ({base:,.0f} tokens each) and a "
            f"{per_search:,}-token search result, in {share:.0%} of sessions: {saving:,.0f} a session. "
            f"{verdict}: {net:+,.0f} tokens a session."
        )
        if gone:
            reason += " It is not in the current catalog (or the profile hides it now)."
        pins.append(
            PinAdvice(tool, count, round(share, 3), schema, round(cost, 1), round(saving, 1), recommended, reason)
        )
    return pins


def search_quality(counts: dict[str, int], settings: Settings, *, source: str) -> SearchQuality:
    """How well search finds what agents call, and what to change when it does not (pure)."""
    searched = sum(count for rank, count in counts.items() if rank != "unsearched")
    top5 = sum(counts.get(rank, 0) for rank in TOP5_RANKS)
    beyond = counts.get("6-10", 0) + counts.get("11+", 0)
    found_in_top_5 = top5 / searched if searched else None
    search = settings.mcp.tool_search
    if searched < MIN_SEARCHED_CALLS:
        advice = f"{searched} calls after a search: need at least {MIN_SEARCHED_CALLS} to judge search quality"
    elif found_in_top_5 is not None and found_in_top_5 < TOP5_TARGET:
        learning = (
            "learning from use is on (mcp.tool_search.traces): it ranks what agents call higher as spawns repeat "
            "requests; "
            if search.traces.enabled
            else "turn learning from use on (mcp.tool_search.traces.enabled: true) so searches rank what agents call; "
        )
        advice = (
            f"only {found_in_top_5:.0%} of the {searched:,} calls after a search went to a tool that search ranked "
            f"in the top 5 (target {TOP5_TARGET:.0%}): {learning}pin the tools most sessions need (above)"
        )
        if search.ranking == "lexical":
            advice += ", and rank with hybrid (mcp.tool_search.ranking: hybrid)"
    elif beyond / searched >= BEYOND5_SHARE and search.search_limit < 10:
        advice = (
            f"{beyond / searched:.0%} of calls went to a tool ranked 6th or lower: raise mcp.tool_search.search_limit "
            f"from {search.search_limit} to 10"
        )
    else:
        advice = f"search finds what agents call: {found_in_top_5:.0%} of {searched:,} calls in the top 5"
    return SearchQuality(
        source=source,
        calls_by_rank=dict(counts),
        searched_calls=searched,
        found_first=counts.get("1", 0) / searched if searched else None,
        found_in_top_5=found_in_top_5,
        advice=advice,
    )


def _report(source: str, advice: list[AgentAdvice], sessions: int, **extra: Any) -> TuneReport:
    report = TuneReport(source=source, sessions=sessions, agents=advice, **extra)
    if sessions == 0:
        report.message = (
            f"too little data: no finished spawns in {source} yet. Run spawns through `orchestrator serve` "
            "(or `orchestrator spawn`) with gateway.spawn_log set, then tune again."
        )
    elif not any(item.recommended_threshold is not None for item in advice):
        report.message = (
            f"too little data: {sessions} finished spawn{'s' if sessions != 1 else ''}; a recommendation needs "
            f"at least {MIN_SESSIONS} sessions of one configured profile. The figures so far are above."
        )
    return report


def analyze_prometheus(
    series: dict[str, dict[tuple[str, str], float]],
    settings: Settings,
    catalog: ToolCatalog,
    *,
    source: str,
    agent: str | None = None,
) -> TuneReport:
    """Advice from the session metrics' increases over a window (`series`: name -> {(agent, mode): value};
    actions as `actions:<action>`). Metrics carry no tool names, so no pins; the break-even assumes the
    profile's catalog had its current size over the window: full mode's cost is rounds x that size."""
    from .._errors import ConfigError

    ranks = series.pop("call_rank", None)
    agents = sorted({key[0] for values in series.values() for key in values if agent is None or key[0] == agent})
    advice = []
    total = 0.0
    for name in agents:

        def get(metric: str, mode: str, name: str = name) -> float:
            return series.get(metric, {}).get((name, mode), 0.0)

        by_mode = {}
        for mode in MODES:
            count = get("sessions", mode)
            if count <= 0:
                continue
            by_mode[mode] = ModeFigures(
                sessions=round(count, 1),
                rounds=get("rounds", mode) / count,
                searches=(get("actions:hit", mode) + get("actions:miss", mode)) / count,
                misses=get("actions:miss", mode) / count,
                expands=get("actions:expand", mode) / count,
                calls=get("actions:call", mode) / count,
                tokens=get("sent", mode) / count,
                other_mode_tokens=get("counterfactual", mode) / count,
            )
        sessions = sum(get("sessions", mode) for mode in MODES)
        total += sessions
        try:
            current: _Current | None = _current(settings, settings.agent(name), catalog)
        except ConfigError:
            current = None
        search_total = get("sent", "search") + get("counterfactual", "full")
        full_total = get("sent", "full") + get("counterfactual", "search")
        item = AgentAdvice(
            agent=name,
            sessions=round(sessions),
            by_mode=by_mode,
            configured=current is not None,
            catalog_tokens=current.catalog_tokens if current else None,
            threshold_now=current.threshold if current else None,
            mode_now=current.mode if current else None,
            tokens_per_session={"full": full_total / sessions, "search": search_total / sessions} if sessions else {},
            pins_reason="pins need tool names, which metrics do not carry: use the spawn log",
        )
        if sessions < MIN_SESSIONS:
            item.message = f"{sessions:.0f} sessions: need at least {MIN_SESSIONS} for a recommendation"
        elif current is None:
            item.message = f"profile {name!r} is not in the configuration any more: figures only"
        elif full_total <= 0 or current.catalog_tokens <= 0:
            item.message = "no full-mode cost to compare with (an empty catalog?)"
        else:
            be = current.catalog_tokens * search_total / full_total
            threshold = int(round(be / THRESHOLD_STEP) * THRESHOLD_STEP)
            item.break_even = be
            item.recommended_threshold = threshold
            item.mode_recommended = "full" if current.catalog_tokens <= threshold else "search"
            item.threshold_reason = (
                f"over {sessions:,.0f} sessions search mode costs {search_total:,.0f} tokens and full mode "
                f"{full_total:,.0f} at today's catalog of {current.catalog_tokens:,} tokens: equal at a catalog of "
                f"{be:,.0f} tokens (assuming the catalog had today's size over the window). At {threshold:,} this "
                f"profile gets {item.mode_recommended} mode (now {current.mode} at {current.threshold:,})."
            )
        advice.append(item)
    quality = (
        search_quality({rank: round(value) for (rank, _), value in ranks.items()}, settings, source=source)
        if ranks
        else None
    )
    return _report(source, advice, round(total), search_quality=quality)


# --------------------------------------------------------------------------- I/O


_PROMETHEUS_QUERIES = {
    "sessions": "orchestrator_session_rounds_count",
    "rounds": "orchestrator_session_rounds_sum",
    "sent": "orchestrator_session_tokens_sent_sum",
    "counterfactual": "orchestrator_session_tokens_counterfactual_sum",
}


async def query_prometheus(url: str, window: str) -> dict[str, dict[tuple[str, str], float]]:
    """The session metrics' increases over `window`, summed by agent and mode.

    Raises:
        OrchestratorError: Prometheus cannot be reached or refuses a query.
    """
    import time

    import httpx2

    from .._errors import OrchestratorError

    base = url.rstrip("/")
    at = f"{time.time():.3f}"  # one evaluation time for every query: increases extrapolate alike, ratios are exact
    found: dict[str, dict[tuple[str, str], float]] = {}
    queries = {
        name: f"sum by (agent, mode) (increase({metric}[{window}]))" for name, metric in _PROMETHEUS_QUERIES.items()
    }
    queries["actions"] = f"sum by (agent, mode, action) (increase(orchestrator_session_actions_total[{window}]))"
    queries["call_rank"] = f"sum by (rank) (increase(mcp_tool_search_call_rank_total[{window}]))"
    try:
        for name, query in queries.items():
            params = {"query": query, "time": at}
            status, _, raw = await bounded_get(f"{base}/api/v1/query", timeout_s=PROMETHEUS_TIMEOUT_S, params=params)
            decoded = json_or_none(raw)
            body = decoded if isinstance(decoded, dict) else {}
            if status >= 400 or body.get("status") != "success":
                problem = f"HTTP {status}" if status >= 400 else "not a Prometheus API answer"
                error = one_line(str(body.get("error") or problem), 200)
                raise OrchestratorError(f"prometheus {base}: query {query!r} failed: {error}")
            for labels, value in _samples(body):
                key = name if name != "actions" else f"actions:{labels.get('action', '')}"
                who = (
                    (labels.get("rank", ""), "")
                    if name == "call_rank"
                    else (labels.get("agent", ""), labels.get("mode", ""))
                )
                found.setdefault(key, {})[who] = value
    except httpx2.HTTPError as exc:
        raise OrchestratorError(f"prometheus {base}: cannot query it: {exc or type(exc).__name__}") from None
    except TimeoutError:
        raise OrchestratorError(f"prometheus {base}: no whole answer within {PROMETHEUS_TIMEOUT_S:g} s") from None
    except ValueError as exc:  # an answer too long, or not the shape of a Prometheus vector result
        raise OrchestratorError(f"prometheus {base}: {exc}") from None
    return found


def _samples(body: Mapping[str, Any]) -> Iterator[tuple[dict[str, str], float]]:
    """(labels, value) of each sample of a vector result.

    Raises:
        ValueError: the answer is not a vector of finite samples (the peer is not a Prometheus).
    """
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ValueError("the answer has no data.result list")
    for item in result:
        labels = item.get("metric") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
            raise ValueError("a sample is not {metric: {...}, value: [time, number]}")
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            raise ValueError(f"a sample's value {str(value[1])[:40]!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"a sample's value {number} is not finite")
        yield {str(key): str(label) for key, label in labels.items()}, number


def print_report(report: TuneReport) -> None:
    """The report for people: per profile a table of figures, then the recommendations with reasons."""
    line = f"source: {report.source} ({_plural(report.sessions, 'finished session')})"
    if report.skipped_lines:
        line += f"; {report.skipped_lines} unreadable line{'s' if report.skipped_lines != 1 else ''} skipped (first: {report.first_problem})"
    console.print(line, markup=False)
    for item in report.agents:
        console.print("", markup=False)
        modes = [mode for mode in MODES if mode in item.by_mode]
        spawns = ", ".join(f"{item.by_mode[mode].sessions:g} {mode}" for mode in modes)
        console.print(f"agent {item.agent}: {_plural(item.sessions, 'session')} ({spawns})", markup=False)
        rows = [
            ("sessions", *(f"{item.by_mode[m].sessions:g}" for m in modes)),
            ("rounds / session", *(f"{item.by_mode[m].rounds:.1f}" for m in modes)),
            ("searches / session", *(f"{item.by_mode[m].searches:.1f}" for m in modes)),
            ("misses / session", *(f"{item.by_mode[m].misses:.1f}" for m in modes)),
            ("expands / session", *(f"{item.by_mode[m].expands:.1f}" for m in modes)),
            ("calls / session", *(f"{item.by_mode[m].calls:.1f}" for m in modes)),
            ("tokens / session (measured)", *(f"{item.by_mode[m].tokens:,.0f}" for m in modes)),
            ("other mode / session (estimated)", *(f"{item.by_mode[m].other_mode_tokens:,.0f}" for m in modes)),
        ]
        print_table(("", *(f"{m} mode" for m in modes)), rows)
        if item.tokens_per_session:
            console.print(
                "every session costed in each mode: "
                + ", ".join(f"{mode} {tokens:,.0f}" for mode, tokens in item.tokens_per_session.items())
                + " tokens a session",
                markup=False,
            )
        if item.catalog_tokens is not None:
            console.print(
                f"catalog now: {item.catalog_tokens:,} tokens; threshold_tokens {item.threshold_now:,} -> {item.mode_now} mode",
                markup=False,
            )
        if item.message:
            console.print(f"no recommendation: {item.message}", markup=False)
            continue
        console.print(
            f"recommended threshold_tokens: {item.recommended_threshold:,} (agents.{item.agent}.tool_search.threshold_tokens)",
            markup=False,
        )
        console.print(f"  why: {item.threshold_reason}", markup=False)
        chosen = [pin for pin in item.pins if pin.recommended]
        console.print(f"recommended pins: {', '.join(pin.tool for pin in chosen) or 'none'}", markup=False)
        for pin in item.pins:
            console.print(f"  {pin.tool}: {pin.reason}", markup=False)
        if item.pins_reason:
            console.print(f"  {item.pins_reason}", markup=False)
    if report.search_quality is not None:
        _print_quality(report.search_quality)
    if report.message:
        console.print("", markup=False)
        console.print(report.message, markup=False)


def _print_quality(quality: SearchQuality) -> None:
    console.print("", markup=False)
    console.print(
        f"search quality ({quality.source}): calls by the called tool's rank in the latest search", markup=False
    )
    order = ["1", "2", "3", "4", "5", "6-10", "11+", "not_found", "unsearched"]
    print_table(["rank", "calls"], [(rank, f"{quality.calls_by_rank.get(rank, 0):,}") for rank in order])
    if quality.found_in_top_5 is not None and quality.found_first is not None:
        console.print(
            f"found first {quality.found_first:.1%}, in the top 5 {quality.found_in_top_5:.1%} "
            f"of {quality.searched_calls:,} calls after a search",
            markup=False,
        )
    console.print(f"search: {quality.advice}", markup=False)


def _read_log(settings: Settings, path: Path, *, shared: bool) -> tuple[SpawnLogRead | None, str]:
    """The configured spawn log (the shared store's list with `store.url` set, unless `--spawn-log`
    named a file), and where it was read; None when there is no log yet."""
    from .._spawnlog import read_spawn_log, spawn_log_store

    if shared and settings.store.url is not None:
        from .._store import open_store

        store = open_store(settings)
        try:
            where = spawn_log_store(settings, store)
            assert where is not None  # gateway.spawn_log is set
            source = str(getattr(where, "path", path))
            return read_spawn_log(source, where), source
        finally:
            store.close()
    return (read_spawn_log(path) if path.exists() else None), str(path)


def _traced_quality(settings: Settings) -> SearchQuality | None:
    """Search quality from the trace store (the ranks of the calls learned from), when it holds any."""
    if not settings.mcp.tool_search.traces.enabled:
        return None
    from .._store import open_store
    from .._traces import TraceStore

    store = open_store(settings)
    try:
        stats = TraceStore(store, settings.mcp.tool_search.traces).stats()
    finally:
        store.close()
    if not stats.traces:
        return None
    return search_quality(stats.found_at, settings, source="the search traces (successful calls after a search)")


def _difference(saved: int) -> str:
    return f"{saved:,} fewer" if saved >= 0 else f"{-saved:,} more"


def _plural(count: float, noun: str) -> str:
    return f"{count:,.0f} {noun}{'' if count == 1 else 's'}"


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def tune(
        ctx: typer.Context,
        spawn_log: Annotated[
            Path | None, typer.Option("--spawn-log", help="Spawn log to read (default: gateway.spawn_log).")
        ] = None,
        prometheus: Annotated[
            str | None,
            typer.Option("--prometheus", help="Read the session metrics from this Prometheus server instead."),
        ] = None,
        window: Annotated[str, typer.Option("--window", help="With --prometheus: how far back.")] = DEFAULT_WINDOW,
        catalog: Annotated[
            Path | None,
            typer.Option(
                "--catalog", help="Catalog snapshot instead of connecting to the servers.", exists=True, dir_okay=True
            ),
        ] = None,
        agent: Annotated[str | None, typer.Option("--agent", help="Only this agent profile.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    ) -> None:
        """Recommend threshold_tokens and pins per agent profile from measured sessions (spawn log or Prometheus)."""
        import re

        import anyio

        from .._errors import ConfigError
        from .tools import load_catalog

        settings = loaded_config(ctx).settings
        if prometheus is not None:
            if spawn_log is not None:
                raise typer.BadParameter("use either --spawn-log or --prometheus", param_hint="--prometheus")
            if not re.fullmatch(r"\d+[smhdwy]", window):
                raise typer.BadParameter(
                    f"{window!r} is not a Prometheus duration like 7d or 12h", param_hint="--window"
                )
            series = anyio.run(query_prometheus, prometheus, window)
            tools = load_catalog(settings, catalog, quiet=as_json)
            report = analyze_prometheus(
                series, settings, tools, source=f"prometheus {prometheus} ({window})", agent=agent
            )
        else:
            path = spawn_log if spawn_log is not None else settings.gateway.spawn_log
            if path is None:
                raise ConfigError(
                    "gateway.spawn_log: not set, so there are no recorded sessions to read; set it (and run "
                    "spawns), or pass --spawn-log PATH or --prometheus URL"
                )
            read, source = _read_log(settings, Path(path).expanduser(), shared=spawn_log is None)
            if read is None or not read.records:  # nothing to advise on: the servers need not be started
                report = _report(source, [], 0)
            else:
                tools = load_catalog(settings, catalog, quiet=as_json)
                report = analyze_records(read.records, settings, tools, source=source, agent=agent)
            if read is not None:
                report.skipped_lines, report.first_problem = read.skipped, read.first_problem
            report.search_quality = _traced_quality(settings)
        if as_json:
            print_json(asdict(report))
        else:
            print_report(report)
