"""`orchestrator metrics [--url URL] [--json]`: a running gateway's metrics as a readable table.

Reads the Prometheus endpoint that `telemetry.exporter: prometheus` serves (default URL from
`telemetry.prometheus.host/port`), and turns the samples into what a user tuning `threshold_tokens`
needs: searches, hits, misses and the miss rate, expands, spawns by mode with tokens sent and saved,
tool calls by server and result, and catalog sizes. Parsing (`summarize`) is pure; `scrape` is the I/O.
"""

from __future__ import annotations

import errno
import math
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import typer

from .._errors import ConfigError, OrchestratorError
from ._common import bounded_get, console, loaded_config, print_json, print_table

__all__ = [
    "CallRow",
    "CatalogRow",
    "MetricsSummary",
    "SearchSummary",
    "SpawnRow",
    "default_url",
    "print_summary",
    "register",
    "scrape",
    "summarize",
]

SCRAPE_TIMEOUT_S = 5.0
"""A local endpoint answers in milliseconds; past this it is hung or not a metrics endpoint."""
MAX_LINE_CHARS = 65_536
"""Longest line of a metrics page read: the gateway's lines are a few hundred characters at most."""

_MAX_PORT = 65_535
"""Checked before connecting: a larger port fails inside the socket layer with no useful message."""

_SCRAPE_HINT = "is a command with telemetry.exporter: prometheus (such as `orchestrator serve`) running?"


@dataclass(frozen=True)
class _SeriesNames:
    """Prometheus names of the project's instruments: dots become underscores, counters end in
    `_total`, histograms in seconds carry `_seconds`."""

    searches: str
    search_seconds: str
    search_results: str
    expanded: str
    spawns: str
    tokens_sent: str
    tokens_saved: str
    calls: str
    call_seconds: str
    catalog_tools: str
    catalog_tokens: str
    call_rank: str


def _series_names() -> _SeriesNames:
    # Imported here: the instruments module pulls in the OpenTelemetry SDK, which only this command needs.
    from .._telemetry import instruments as names

    return _SeriesNames(
        searches=f"{names.SEARCH_INVOCATIONS}_total",
        search_seconds=f"{names.SEARCH_DURATION}_seconds",
        search_results=names.SEARCH_RESULTS,
        expanded=f"{names.SEARCH_EXPANDED_TOOLS}_total",
        spawns=f"{names.SPAWNS}_total",
        tokens_sent=names.SPAWN_TOKENS_SENT,
        tokens_saved=names.SPAWN_TOKENS_SAVED,
        calls=f"{names.TOOL_CALLS}_total",
        call_seconds=names.CLIENT_OPERATION_DURATION.replace(".", "_") + "_seconds",
        catalog_tools=names.CATALOG_TOOLS,
        catalog_tokens=names.CATALOG_TOKENS,
        call_rank=f"{names.SEARCH_CALL_RANK}_total",
    )


@dataclass(frozen=True)
class SearchSummary:
    searches: int
    """tool_search calls (hits + misses)."""
    hits: int
    misses: int
    miss_rate: float | None
    """misses / searches; None before the first search."""
    expands: int
    """expand_tools calls."""
    expanded_tools: int
    """Full schemas handed over by those calls."""
    avg_results: float | None
    avg_latency_s: float | None
    calls_by_rank: dict[str, int] = field(default_factory=dict)
    """Search-mode tool calls by the called tool's rank in the agent's latest search (`mcp_tool_search_call_rank`)."""
    found_in_top_5: float | None = None
    """Share of search-mode calls made after a search whose tool that search ranked in the top 5 (live hit@5)."""
    found_first: float | None = None
    """The same share at rank 1 (live hit@1)."""


@dataclass(frozen=True)
class SpawnRow:
    mode: str
    agent: str
    spawns: int
    tokens_sent: int
    tokens_saved: int


@dataclass(frozen=True)
class CallRow:
    server: str
    result: str
    calls: int
    avg_duration_s: float | None


@dataclass(frozen=True)
class CatalogRow:
    server: str
    tools: int
    tokens: int


@dataclass(frozen=True)
class MetricsSummary:
    url: str
    search: SearchSummary
    spawns: list[SpawnRow] = field(default_factory=list)
    tokens_saved: int = 0
    """Sum over every spawn."""
    expands_per_search_spawn: float | None = None
    """expand_tools calls per search-mode spawn: how often agents needed more than the directory."""
    calls: list[CallRow] = field(default_factory=list)
    catalog: list[CatalogRow] = field(default_factory=list)


def summarize(text: str, url: str = "") -> MetricsSummary:
    """Prometheus exposition text -> the figures `orchestrator metrics` shows (absent series count 0).

    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    longest = max(map(len, text.splitlines()), default=0)
    if longest > MAX_LINE_CHARS:  # the library's parser is quadratic in a line's escapes: 25 s for 1.6 MB
        raise ValueError(f"a line of {longest:,} characters (the gateway's are under {MAX_LINE_CHARS:,})")
    names = _series_names()
    values: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if math.isfinite(sample.value):  # a counter is never NaN or infinite: such a page is not ours
                values[sample.name].append((dict(sample.labels), float(sample.value)))

    def total(name: str, **match: str) -> float:
        return sum(value for labels, value in values.get(name, []) if _matches(labels, match))

    hits, misses = int(total(names.searches, outcome="hit")), int(total(names.searches, outcome="miss"))
    searches = hits + misses
    search = SearchSummary(
        searches=searches,
        hits=hits,
        misses=misses,
        miss_rate=misses / searches if searches else None,
        expands=int(total(names.searches, outcome="expand")),
        expanded_tools=int(total(names.expanded)),
        avg_results=_ratio(total(f"{names.search_results}_sum"), total(f"{names.search_results}_count")),
        avg_latency_s=_ratio(total(f"{names.search_seconds}_sum"), total(f"{names.search_seconds}_count")),
        **_call_ranks({labels.get("rank", ""): 0 for labels, _ in values.get(names.call_rank, [])}, total, names),
    )

    spawn_keys = sorted(
        {(labels.get("mode", ""), labels.get("agent", "")) for labels, _ in values.get(names.spawns, [])}
    )
    spawns = [
        SpawnRow(
            mode=mode,
            agent=agent,
            spawns=int(total(names.spawns, mode=mode, agent=agent)),
            tokens_sent=int(total(f"{names.tokens_sent}_sum", mode=mode, agent=agent)),
            tokens_saved=int(total(f"{names.tokens_saved}_sum", mode=mode, agent=agent)),
        )
        for mode, agent in spawn_keys
    ]

    call_keys = sorted(
        {(labels.get("server", ""), labels.get("result", "")) for labels, _ in values.get(names.calls, [])}
    )
    calls = []
    for server, result in call_keys:
        error_type = "" if result == "ok" else result
        calls.append(
            CallRow(
                server=server,
                result=result,
                calls=int(total(names.calls, server=server, result=result)),
                avg_duration_s=_ratio(
                    total(f"{names.call_seconds}_sum", server=server, error_type=error_type),
                    total(f"{names.call_seconds}_count", server=server, error_type=error_type),
                ),
            )
        )

    servers = sorted({labels.get("server", "") for labels, _ in values.get(names.catalog_tools, [])})
    catalog = [
        CatalogRow(
            server, int(total(names.catalog_tools, server=server)), int(total(names.catalog_tokens, server=server))
        )
        for server in servers
    ]
    search_spawns = sum(row.spawns for row in spawns if row.mode == "search")
    return MetricsSummary(
        url=url,
        search=search,
        spawns=spawns,
        tokens_saved=sum(row.tokens_saved for row in spawns),
        expands_per_search_spawn=_ratio(search.expands, search_spawns),
        calls=calls,
        catalog=catalog,
    )


def _call_ranks(ranks: dict[str, int], total: Any, names: _SeriesNames) -> dict[str, Any]:
    """The call-rank figures of SearchSummary from the `rank` series present."""
    counts = {rank: int(total(names.call_rank, rank=rank)) for rank in ranks if rank}
    searched = sum(count for rank, count in counts.items() if rank != "unsearched")
    top5 = sum(counts.get(rank, 0) for rank in ("1", "2", "3", "4", "5"))
    return {
        "calls_by_rank": counts,
        "found_in_top_5": _ratio(top5, searched),
        "found_first": _ratio(counts.get("1", 0), searched),
    }


def _matches(labels: dict[str, str], match: dict[str, str]) -> bool:
    # An attribute that is absent on a series shows as "" (the exporter backfills missing labels).
    return all(labels.get(key, "") == value for key, value in match.items())


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def default_url(host: str, port: int) -> str:
    """The scrape URL for `telemetry.prometheus.host/port`; a wildcard bind address is reached on loopback."""
    from .._gateway.addresses import client_base_url

    return f"{client_base_url(host, port)}/metrics"


async def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """GET the exposition text at `url` (redirects followed, as a browser would).

    Raises:
        ConfigError: a malformed URL (bad input: exit 2).
        OrchestratorError: nothing listens there, it times out, or it answers with an HTTP error.
    """
    import httpx2  # the mcp SDK's HTTP client, the project's one; imported by the commands that use it

    try:
        port = httpx2.URL(url).port
    except httpx2.InvalidURL as exc:
        raise ConfigError(f"bad metrics URL {url!r}: {exc}") from None
    if port is not None and not 0 < port <= _MAX_PORT:
        raise ConfigError(f"bad metrics URL {url!r}: port {port} is not between 1 and {_MAX_PORT}")
    try:
        status, reason, body = await bounded_get(url, timeout_s=timeout_s)
    except httpx2.UnsupportedProtocol as exc:
        raise ConfigError(f"bad metrics URL {url!r}: {exc}") from None
    except (httpx2.TimeoutException, TimeoutError):
        raise OrchestratorError(f"metrics endpoint {url} did not answer within {timeout_s:g} s") from None
    except httpx2.ConnectError as exc:
        raise OrchestratorError(f"no metrics endpoint at {url} ({_os_reason(exc)}); {_SCRAPE_HINT}") from None
    except httpx2.HTTPError as exc:  # the peer broke off or does not speak HTTP
        raise OrchestratorError(f"metrics endpoint {url} failed: {_os_reason(exc)}") from None
    except ValueError as exc:
        raise OrchestratorError(f"metrics endpoint {url}: {exc}") from None
    if status >= 400:
        raise OrchestratorError(f"metrics endpoint {url} answered HTTP {status} {reason}")
    return body.decode("utf-8", errors="replace")


def _os_reason(exc: BaseException) -> str:
    """The operating system's words for why a request failed ("connection refused"), else the message.

    httpx2 wraps the socket error a few levels down (and anyio's multi-address connect replaces its text
    with "All connection attempts failed"), so this walks the chain to the OSError that carries an errno.
    """
    import socket

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror) and cause.strerror:
            return cause.strerror.lower()
        if isinstance(cause, OSError) and cause.errno is not None and cause.errno in errno.errorcode:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def _count(value: int) -> str:
    return f"{value:,}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _duration(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"


def print_summary(summary: MetricsSummary) -> None:
    search = summary.search
    console.print(f"metrics from {summary.url}")
    print_table(
        ["tool search", "value"],
        [
            ("searches", _count(search.searches)),
            ("hits", _count(search.hits)),
            ("misses", _count(search.misses)),
            ("miss rate", _percent(search.miss_rate)),
            ("expand_tools calls", _count(search.expands)),
            ("schemas expanded", _count(search.expanded_tools)),
            ("expands per search-mode spawn", _ratio_text(summary.expands_per_search_spawn)),
            ("avg results per search", _ratio_text(search.avg_results)),
            ("avg search latency", _duration(search.avg_latency_s)),
            ("search-mode calls found first (live hit@1)", _percent(search.found_first)),
            ("search-mode calls found in the top 5 (live hit@5)", _percent(search.found_in_top_5)),
            ("calls whose tool the latest search missed", _count(search.calls_by_rank.get("not_found", 0))),
            ("calls without a search before them", _count(search.calls_by_rank.get("unsearched", 0))),
        ],
    )
    console.print()
    if summary.spawns:
        rows = [
            (
                row.mode,
                row.agent,
                _count(row.spawns),
                _count(row.tokens_sent),
                _count(row.tokens_saved),
                _count(row.tokens_saved // row.spawns) if row.spawns else "0",
            )
            for row in summary.spawns
        ]
        spawns = sum(row.spawns for row in summary.spawns)
        sent = sum(row.tokens_sent for row in summary.spawns)
        per_spawn = _count(summary.tokens_saved // spawns) if spawns else "0"
        rows.append(("total", "", _count(spawns), _count(sent), _count(summary.tokens_saved), per_spawn))
        print_table(["spawn mode", "agent", "spawns", "tokens sent", "tokens saved", "saved per spawn"], rows)
    else:
        console.print("spawns: none yet")
    console.print()
    if summary.calls:
        print_table(
            ["server", "call result", "calls", "avg duration"],
            [(row.server, row.result, _count(row.calls), _duration(row.avg_duration_s)) for row in summary.calls],
        )
    else:
        console.print("tool calls: none yet")
    if summary.catalog:
        console.print()
        print_table(
            ["server", "catalog tools", "catalog tokens"],
            [(row.server, _count(row.tools), _count(row.tokens)) for row in summary.catalog],
        )


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    def metrics(
        ctx: typer.Context,
        url: Annotated[
            str | None,
            typer.Option("--url", help="Prometheus endpoint (default: telemetry.prometheus host and port)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Show a running gateway's metrics: searches, miss rate, expands, spawns and tokens saved, calls."""
        import anyio

        if url is None:
            prometheus = loaded_config(ctx).settings.telemetry.prometheus
            url = default_url(prometheus.host, prometheus.port)
        text = anyio.run(scrape, url)
        try:
            summary = summarize(text, url)
        except ValueError as exc:
            raise OrchestratorError(f"{url} did not answer with Prometheus metrics: {exc}") from None
        if as_json:
            print_json(asdict(summary))
        else:
            print_summary(summary)
