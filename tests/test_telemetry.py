"""Telemetry: exact counts through the SDK's InMemoryMetricReader, a real Prometheus scrape, OTLP, traces.

Each test builds its own `Telemetry` (or takes the conftest `telemetry` over `reader`) and passes it to
what it exercises: no module-level state is installed or torn down between tests.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import ConfigError, Settings, Telemetry, TelemetrySettings, setup_telemetry
from orchestrator._telemetry import (
    CATALOG_TOKENS,
    CATALOG_TOOLS,
    CLIENT_OPERATION_DURATION,
    METER_NAME,
    RANKINGS,
    SEARCH_DURATION,
    SEARCH_EXPANDED_TOOLS,
    SEARCH_INVOCATIONS,
    SEARCH_RESULTS,
    SPAWN_TOKENS_SAVED,
    SPAWN_TOKENS_SENT,
    SPAWNS,
    TOOL_CALLS,
    telemetry_session,
)

Found = dict[str, list[tuple[dict[str, Any], Any]]]

# --------------------------------------------------------------------------- helpers


def points(metric_reader: InMemoryMetricReader) -> Found:
    """Metric name -> [(attributes, data point)] from one collection."""
    found: Found = {}
    data = metric_reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            assert scope_metrics.scope.name == METER_NAME
            for metric in scope_metrics.metrics:
                found[metric.name] = [(dict(p.attributes or {}), p) for p in metric.data.data_points]
    return found


def values(found: Found, name: str, key: str) -> dict[Any, float]:
    """Sum/gauge values of one metric keyed by one attribute."""
    return {attributes.get(key): point.value for attributes, point in found[name]}


def outcomes(found: Found) -> dict[tuple[str, str | None], float]:
    """Search invocations keyed by (outcome, ranking); expand carries no ranking (None)."""
    return {(a["outcome"], a.get("ranking")): point.value for a, point in found[SEARCH_INVOCATIONS]}


def counts(found: Found, name: str) -> dict[tuple[tuple[str, Any], ...], int]:
    """Histogram counts keyed by the sorted attribute items."""
    return {tuple(sorted(attributes.items())): point.count for attributes, point in found[name]}


def sums(found: Found, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    return {tuple(sorted(attributes.items())): point.sum for attributes, point in found[name]}


ZERO_OUTCOMES = {("hit", "lexical"): 0, ("hit", "hybrid"): 0, ("miss", "lexical"): 0, ("miss", "hybrid"): 0}
"""The hit/miss series every Telemetry starts with, one per ranking (expand is added per test)."""


def scripted_session(telemetry: Telemetry) -> None:
    """3 hits (one hybrid), 2 misses, 2 expands (4 schemas), 1 full + 2 search spawns, 4 calls of which 3 fail."""
    telemetry.record_search("hit", 0.001, 3, ranking="lexical")
    telemetry.record_search("miss", 0.002, 0, ranking="lexical")
    telemetry.record_search("hit", 0.003, 8, ranking="hybrid")
    telemetry.record_expand(3)
    telemetry.record_search("miss", 0.001, 0, ranking="lexical")
    telemetry.record_search("hit", 0.002, 1, ranking="lexical")
    telemetry.record_expand(1)
    telemetry.record_spawn("full", "default", 3000, 0)
    telemetry.record_spawn("search", "coder", 1200, 4800)
    telemetry.record_spawn("search", "coder", 1000, 5000)
    telemetry.record_tool_call("time", "get_current_time", "ok", 0.04)
    telemetry.record_tool_call("time", "convert_time", "tool_error", 0.02)
    telemetry.record_tool_call("git", "git_status", "timeout", 60.0)
    telemetry.record_tool_call("git", "git_log", "transport_error", 0.5)
    telemetry.record_catalog("time", 2, 310)
    telemetry.record_catalog("git", 12, 2900)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def scraped_outcomes(url: str) -> dict[tuple[str, str], float]:
    """Search invocations on a Prometheus endpoint keyed by (outcome, ranking); "" for expand's ranking."""
    samples = scrape(url)["mcp_tool_search_invocations_total"]
    return {(labels["outcome"], labels.get("ranking", "")): value for labels, value in samples}


# --------------------------------------------------------------------------- exact counts


def test_scripted_session_yields_exact_counts_and_attributes(
    reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    scripted_session(telemetry)
    found = points(reader)

    assert outcomes(found) == {
        ("hit", "lexical"): 2,
        ("hit", "hybrid"): 1,
        ("miss", "lexical"): 2,
        ("miss", "hybrid"): 0,
        ("expand", None): 2,
    }
    hit, miss = ("outcome", "hit"), ("outcome", "miss")
    lexical, hybrid = ("ranking", "lexical"), ("ranking", "hybrid")
    assert counts(found, SEARCH_DURATION) == {(hit, lexical): 2, (hit, hybrid): 1, (miss, lexical): 2}
    assert sums(found, SEARCH_DURATION)[(miss, lexical)] == pytest.approx(0.003)
    assert counts(found, SEARCH_RESULTS) == {(): 5}
    assert sums(found, SEARCH_RESULTS) == {(): 12}
    assert values(found, SEARCH_EXPANDED_TOOLS, "outcome") == {None: 4}

    full, search = (("agent", "default"), ("mode", "full")), (("agent", "coder"), ("mode", "search"))
    assert {tuple(sorted(a.items())): p.value for a, p in found[SPAWNS]} == {full: 1, search: 2}
    assert sums(found, SPAWN_TOKENS_SENT) == {full: 3000, search: 2200}
    assert sums(found, SPAWN_TOKENS_SAVED) == {full: 0, search: 9800}
    assert counts(found, SPAWN_TOKENS_SAVED) == {full: 1, search: 2}

    calls = {(a["server"], a["result"]): p.value for a, p in found[TOOL_CALLS]}
    assert calls == {
        ("time", "ok"): 1,
        ("time", "tool_error"): 1,
        ("git", "timeout"): 1,
        ("git", "transport_error"): 1,
    }
    assert values(found, CATALOG_TOOLS, "server") == {"time": 2, "git": 12}
    assert values(found, CATALOG_TOKENS, "server") == {"time": 310, "git": 2900}


SMALL_CATALOG = {
    "time": [
        {"name": "get_current_time", "description": "Get the current time in a timezone", "inputSchema": {}},
        {"name": "convert_time", "description": "Convert a time between timezones", "inputSchema": {}},
    ],
    "git": [{"name": "git_status", "description": "Show the working tree status", "inputSchema": {}}],
}


def test_searches_through_the_meta_tools_are_counted_once_without_the_query(
    reader: InMemoryMetricReader, meter_provider: MeterProvider
) -> None:
    from orchestrator import MetaTools, ToolCatalog, ToolSearchEngine

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(meter_provider=meter_provider, tracer_provider=tracer_provider)
    engine = ToolSearchEngine(ToolCatalog.from_lists(SMALL_CATALOG), ranking="lexical", telemetry=telemetry)
    meta = MetaTools(engine)  # counts on the engine's telemetry

    assert meta.tool_search("current time").structured_content["hits"]  # type: ignore[index]
    assert meta.tool_search("working tree status").structured_content["hits"]  # type: ignore[index]
    assert meta.tool_search("quantum pizza").structured_content["hits"] == []  # type: ignore[index]
    meta.expand_tools(["time__get_current_time", "git__git_status"])

    found = points(reader)
    # The engine says which ranking answered (see test_hybrid.py); hybrid stays at its zero.
    assert outcomes(found) == {**ZERO_OUTCOMES, ("hit", "lexical"): 2, ("miss", "lexical"): 1, ("expand", None): 1}
    lexical = ("ranking", "lexical")
    assert counts(found, SEARCH_DURATION) == {(("outcome", "hit"), lexical): 2, (("outcome", "miss"), lexical): 1}
    assert values(found, SEARCH_EXPANDED_TOOLS, "outcome") == {None: 2}
    # Each search and expand is one span of this Telemetry's tracer.
    assert sorted(span_.name for span_ in spans.get_finished_spans()) == ["expand_tools"] + ["tool_search"] * 3
    # Low cardinality: no query words in any metric attribute or span attribute.
    recorded = [str(v) for series in found.values() for attributes, _ in series for v in attributes.values()]
    recorded += [str(v) for span_ in spans.get_finished_spans() for v in (span_.attributes or {}).values()]
    assert not any(word in text for text in recorded for word in ("current", "working", "quantum", "pizza"))
    # The engine alone (the CLI, the Python API) ranks without counting: only agents' requests are counted.
    assert engine.search("current time")
    assert outcomes(points(reader)) == outcomes(found)
    tracer_provider.shutdown()


@pytest.mark.slow
@pytest.mark.anyio
async def test_calls_through_the_real_manager_are_counted_by_result(
    reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    from orchestrator import MCPManager, ToolExecutionError

    from .conftest import TESTS_DIR

    settings = Settings(
        mcp={
            "servers": {"basic": {"command": sys.executable, "args": [str(TESTS_DIR / "servers" / "basic.py")]}},
            "warm_start": False,
        }
    )
    with anyio.fail_after(60):
        async with MCPManager(settings, telemetry=telemetry) as manager:
            await manager.call_tool("basic", "echo", {"text": "hi"})
            with pytest.raises(ToolExecutionError):
                await manager.call_tool("basic", "fail", {"message": "no"})

    found = points(reader)
    assert {(a["server"], a["result"]): p.value for a, p in found[TOOL_CALLS]} == {
        ("basic", "ok"): 1,
        ("basic", "tool_error"): 1,
    }
    errors = {a["gen_ai.tool.name"]: a.get("error.type") for a, _ in found[CLIENT_OPERATION_DURATION]}
    assert errors == {"echo": None, "fail": "tool_error"}


def test_tool_call_duration_follows_the_mcp_semantic_conventions(
    reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    scripted_session(telemetry)
    found = points(reader)
    by_tool = {
        attributes["gen_ai.tool.name"]: (attributes, point) for attributes, point in found[CLIENT_OPERATION_DURATION]
    }

    ok_attributes, ok_point = by_tool["get_current_time"]
    assert ok_attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_current_time",
        "server": "time",
    }
    assert ok_point.count == 1 and ok_point.sum == pytest.approx(0.04)
    # error.type is present if and only if the call failed.
    assert {tool: attributes.get("error.type") for tool, (attributes, _) in by_tool.items()} == {
        "get_current_time": None,
        "convert_time": "tool_error",
        "git_status": "timeout",
        "git_log": "transport_error",
    }
    # The semconv's prescribed bucket boundaries.
    assert tuple(ok_point.explicit_bounds) == (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


def test_three_outcome_series_exist_at_zero_before_any_search(
    reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    found = points(reader)
    # hit and miss once per ranking (never without one), expand without a ranking.
    assert outcomes(found) == {**ZERO_OUTCOMES, ("expand", None): 0}
    assert {ranking for (_outcome, ranking) in ZERO_OUTCOMES} == set(RANKINGS)


def test_catalog_gauges_keep_the_latest_size_of_each_server(reader: InMemoryMetricReader, telemetry: Telemetry) -> None:
    telemetry.record_catalog("time", 2, 310)
    telemetry.record_catalog("time", 3, 450)
    assert values(points(reader), CATALOG_TOOLS, "server") == {"time": 3}
    # A later collection still reports it (cumulative last value), as a Prometheus scrape would.
    assert values(points(reader), CATALOG_TOKENS, "server") == {"time": 450}


def test_a_plan_costlier_than_the_full_catalog_saves_zero_tokens(
    reader: InMemoryMetricReader, telemetry: Telemetry
) -> None:
    telemetry.record_spawn("search", "default", 5000, -200)
    found = points(reader)
    assert sums(found, SPAWN_TOKENS_SAVED) == {(("agent", "default"), ("mode", "search")): 0}


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.record_search("expand", 0.1, 1, ranking="lexical"),
        lambda t: t.record_spawn("partial", "default", 1, 1),
        lambda t: t.record_tool_call("time", "x", "error", 0.1),
    ],
    ids=["search-outcome", "spawn-mode", "call-result"],
)
def test_a_value_outside_the_closed_attribute_sets_is_refused(
    reader: InMemoryMetricReader, telemetry: Telemetry, call: Callable[[Telemetry], None]
) -> None:
    with pytest.raises(ValueError, match="expected one of"):
        call(telemetry)
    assert outcomes(points(reader)) == {**ZERO_OUTCOMES, ("expand", None): 0}  # nothing half-recorded
    assert SPAWNS not in points(reader) and TOOL_CALLS not in points(reader)


def test_recording_before_setup_and_after_shutdown_does_nothing() -> None:
    # Before setup: OpenTelemetry's global API providers, a no-op until the host application sets them.
    default = Telemetry()
    scripted_session(default)  # no provider: no error, nothing kept
    with default.span("orchestrator.noop", agent="default"):
        pass
    quiet = setup_telemetry(Settings())  # exporter none: the same kind of no-op Telemetry
    assert quiet.prometheus_url is None
    scripted_session(quiet)
    quiet.shutdown()

    # After shutdown: recording on the object is harmless, its endpoint is gone, and a second shutdown is a no-op.
    session = setup_telemetry(TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0}))
    url = session.prometheus_url
    assert url is not None
    session.shutdown()
    scripted_session(session)
    with session.span("orchestrator.noop"):
        pass
    session.shutdown()
    with pytest.raises(OSError):
        scrape(url)
    # No setup installed a global meter provider: project metrics only go through Telemetry objects.
    assert not isinstance(metrics.get_meter_provider(), MeterProvider)


def test_each_test_provider_starts_from_zero(reader: InMemoryMetricReader, telemetry: Telemetry) -> None:
    telemetry.record_search("hit", 0.001, 1, ranking="lexical")
    telemetry.record_search("hit", 0.001, 1, ranking="lexical")
    for _ in range(2):
        other_reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[other_reader])
        other = Telemetry(meter_provider=provider)
        other.record_search("hit", 0.001, 1, ranking="lexical")
        assert outcomes(points(other_reader))[("hit", "lexical")] == 1
        provider.shutdown()
    # Objects in one process never share counts: the first one still has only its own two.
    assert outcomes(points(reader))[("hit", "lexical")] == 2


# --------------------------------------------------------------------------- Prometheus


def test_prometheus_scrape_shows_the_three_outcome_series() -> None:
    settings = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    with telemetry_session(settings) as session:
        assert session.prometheus_url is not None
        session.record_search("hit", 0.001, 2, ranking="lexical")
        session.record_search("hit", 0.001, 4, ranking="hybrid")
        session.record_search("miss", 0.001, 0, ranking="lexical")
        session.record_expand(2)
        samples = scrape(session.prometheus_url)

    invocations = samples["mcp_tool_search_invocations_total"]
    series = {(labels["outcome"], labels["ranking"]): value for labels, value in invocations}
    assert series == {
        ("hit", "lexical"): 1.0,
        ("hit", "hybrid"): 1.0,
        ("miss", "lexical"): 1.0,
        ("miss", "hybrid"): 0.0,
        ("expand", ""): 1.0,  # the exporter fills the label expand does not carry
    }
    # Only the attributes as labels: no scope labels, no query text; hit and miss always name a ranking.
    assert all(set(labels) == {"outcome", "ranking"} for labels, _ in invocations)
    assert all(labels["ranking"] in RANKINGS for labels, _ in invocations if labels["outcome"] != "expand")
    assert samples["mcp_tool_search_duration_seconds_count"]


def test_a_loopback_prometheus_endpoint_answers_only_loopback_host_names() -> None:
    """A web page whose name resolves to 127.0.0.1 (DNS rebinding) cannot read which servers and tools
    the user has: its Host header gets 421, over a raw socket as a browser would send it."""
    settings = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    with telemetry_session(settings) as session:
        assert session.prometheus_address is not None
        session.record_catalog("secret-server", 3, 100)
        port = session.prometheus_address[1]

        def get(host: str | None) -> bytes:
            request = b"GET /metrics HTTP/1.1\r\n" + (f"Host: {host}\r\n".encode() if host else b"")
            with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
                connection.sendall(request + b"Connection: close\r\n\r\n")
                return b"".join(iter(lambda: connection.recv(65536), b""))

        for allowed in (f"127.0.0.1:{port}", f"localhost:{port}"):
            answer = get(allowed)
            assert answer.startswith(b"HTTP/1.0 200") and b"secret-server" in answer
        for refused in (f"attacker.example:{port}", f"127.0.0.1:{port}.attacker.example", "127.0.0.1:\u00b2", None):
            answer = get(refused)
            assert answer.split(b"\r\n", 1)[0].startswith(b"HTTP/1.0 421"), (refused, answer[:80])
            assert b"secret-server" not in answer


def test_prometheus_endpoint_can_be_set_up_again_on_the_same_port() -> None:
    port = free_port()
    settings = TelemetrySettings(exporter="prometheus", prometheus={"port": port})
    for round_ in (1, 2, 3):
        session = setup_telemetry(settings)  # binds the port the previous round's shutdown freed
        assert session.prometheus_address == ("127.0.0.1", port)
        for _ in range(round_):
            session.record_search("miss", 0.001, 0, ranking="lexical")
        series = scraped_outcomes(f"http://127.0.0.1:{port}/metrics")
        assert series[("miss", "lexical")] == round_  # a fresh provider each time, not a leftover registry
        session.shutdown()
    with pytest.raises(OSError):
        scrape(f"http://127.0.0.1:{port}/metrics")


def test_two_setups_in_one_process_each_own_their_prometheus_endpoint() -> None:
    settings = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    first, second = setup_telemetry(settings), setup_telemetry(settings)
    try:
        assert first.prometheus_url is not None and second.prometheus_url is not None
        assert first.prometheus_url != second.prometheus_url
        first.record_search("hit", 0.001, 1, ranking="lexical")
        second.record_search("miss", 0.001, 0, ranking="lexical")
        second.record_search("miss", 0.001, 0, ranking="lexical")
        assert scraped_outcomes(first.prometheus_url)[("hit", "lexical")] == 1
        assert scraped_outcomes(first.prometheus_url)[("miss", "lexical")] == 0
        assert scraped_outcomes(second.prometheus_url)[("hit", "lexical")] == 0
        assert scraped_outcomes(second.prometheus_url)[("miss", "lexical")] == 2

        first.shutdown()  # stops only its own endpoint
        with pytest.raises(OSError):
            scrape(first.prometheus_url)
        assert scraped_outcomes(second.prometheus_url)[("miss", "lexical")] == 2
    finally:
        first.shutdown()
        second.shutdown()


def test_prometheus_port_in_use_is_a_config_error_naming_the_key() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"telemetry\.prometheus: cannot serve metrics on 127\.0\.0\.1:{port}"):
            setup_telemetry(TelemetrySettings(exporter="prometheus", prometheus={"port": port}))


# --------------------------------------------------------------------------- OTLP


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None,
    reason="the grpc exporter is installed here",
)
def test_otlp_grpc_without_its_package_names_the_package_to_install() -> None:
    settings = TelemetrySettings(exporter="otlp", otlp={"protocol": "grpc", "endpoint": "http://127.0.0.1:4317"})
    expected = "telemetry.otlp.protocol: grpc needs the package opentelemetry-exporter-otlp-proto-grpc"
    with pytest.raises(ConfigError, match=expected):
        setup_telemetry(settings)


class _Collector(BaseHTTPRequestHandler):
    """A minimal OTLP/HTTP receiver: keeps each request's path, headers and protobuf body."""

    received: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    received: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_otlp_http_sends_metrics_and_spans_to_the_collector(
    collector: tuple[str, list[tuple[str, dict[str, str], bytes]]],
) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    endpoint, received = collector
    settings = TelemetrySettings(
        exporter="otlp",
        service_name="orchestrator-test",
        otlp={"endpoint": endpoint, "headers": {"x-collector-token": "s3cret"}},
    )
    with telemetry_session(settings) as session:
        with session.span("orchestrator.spawn", agent="default", mode="search"):
            session.record_search("hit", 0.001, 2, ranking="lexical")
            session.record_search("miss", 0.001, 0, ranking="lexical")
    # shutdown flushed both signals

    paths = {path for path, _, _ in received}
    assert {"/v1/metrics", "/v1/traces"} <= paths
    assert all(headers.get("x-collector-token") == "s3cret" for _, headers, _ in received)

    exported: dict[tuple[str, str | None], float] = {}
    service_names = set()
    for path, _, body in received:
        if path != "/v1/metrics":
            continue
        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            resource = resource_metrics.resource
            service_names |= {a.value.string_value for a in resource.attributes if a.key == "service.name"}
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == SEARCH_INVOCATIONS:
                        for point in metric.sum.data_points:
                            labels = {a.key: a.value.string_value for a in point.attributes}
                            key = (labels["outcome"], labels.get("ranking"))
                            exported[key] = point.as_double or point.as_int
    assert exported == {**ZERO_OUTCOMES, ("hit", "lexical"): 1, ("miss", "lexical"): 1, ("expand", None): 0}
    assert service_names == {"orchestrator-test"}

    span_names = set()
    for path, _, body in received:
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    span_names |= {s.name for s in scope_spans.spans}
    assert "orchestrator.spawn" in span_names


def test_a_collector_that_is_down_delays_exit_by_a_bounded_time() -> None:
    settings = TelemetrySettings(exporter="otlp", otlp={"endpoint": f"http://127.0.0.1:{free_port()}"})
    session = setup_telemetry(settings)
    with session.span("orchestrator.spawn"):
        session.record_search("hit", 0.001, 1, ranking="lexical")
    started = time.monotonic()
    session.shutdown()
    # The exporters' own default would retry for 10 s per signal; the bound here is 2 s per export.
    assert time.monotonic() - started < 8


# --------------------------------------------------------------------------- traces


def test_project_spans_land_in_the_installed_tracer_provider(meter_provider: MeterProvider) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(meter_provider=meter_provider, tracer_provider=tracer_provider)

    with telemetry.span("orchestrator.spawn", agent="default", mode=None, pinned=("a", "b")) as outer:
        with telemetry.span("orchestrator.tool_search"):
            pass
        outer.set_attribute("tokens_sent", 1200)

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"orchestrator.spawn", "orchestrator.tool_search"}
    assert dict(spans["orchestrator.spawn"].attributes or {}) == {
        "agent": "default",
        "pinned": ("a", "b"),
        "tokens_sent": 1200,
    }  # None values are left out
    assert spans["orchestrator.tool_search"].parent is not None
    assert spans["orchestrator.tool_search"].parent.span_id == spans["orchestrator.spawn"].context.span_id
    tracer_provider.shutdown()


def _echo_server() -> MCPServer:
    server = MCPServer("traced", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    return server


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in console-exporter output (spans and metric batches interleave)."""
    decoder = json.JSONDecoder()
    objects, index = [], 0
    while (start := text.find("{", index)) != -1:
        try:
            obj, index = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            index = start + 1
            continue
        objects.append(obj)
    return objects


@pytest.mark.anyio
async def test_console_exporter_puts_project_and_mcp_sdk_spans_in_one_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = setup_telemetry(TelemetrySettings(exporter="console", export_interval_s=60))
    try:
        with anyio.fail_after(10):
            with session.span("orchestrator.spawn", agent="default"):
                async with Client(_echo_server()) as client:
                    result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error
    finally:
        session.shutdown()  # flushes the batch processor and the metric reader

    captured = capsys.readouterr()
    assert "orchestrator.spawn" not in captured.out  # stdout stays for command output
    objects = _json_objects(captured.err)
    spans = [o for o in objects if "context" in o and "name" in o]
    by_name = {s["name"]: s for s in spans}
    assert "orchestrator.spawn" in by_name
    call_spans = [s for s in spans if "tools/call echo" in s["name"]]
    assert call_spans, sorted(by_name)
    trace_id = by_name["orchestrator.spawn"]["context"]["trace_id"]
    assert all(s["context"]["trace_id"] == trace_id for s in call_spans)
    assert any(s["attributes"].get("gen_ai.tool.name") == "echo" for s in call_spans)
    # The metric batch went to stderr too, with the zero-initialised outcome series.
    assert any("resource_metrics" in o for o in objects)
