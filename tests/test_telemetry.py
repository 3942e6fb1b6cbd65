"""Telemetry: exact counts through the SDK's InMemoryMetricReader, a real Prometheus scrape, OTLP, traces."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import _telemetry as telemetry
from orchestrator._config import Settings, TelemetrySettings
from orchestrator._errors import ConfigError

# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _no_telemetry_left_behind() -> Iterator[None]:
    yield
    telemetry.shutdown_telemetry()


def points(metric_reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Metric name -> [(attributes, data point)] from one collection."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = metric_reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            assert scope_metrics.scope.name == telemetry.METER_NAME
            for metric in scope_metrics.metrics:
                found[metric.name] = [(dict(p.attributes or {}), p) for p in metric.data.data_points]
    return found


def values(found: dict[str, list[tuple[dict[str, Any], Any]]], name: str, key: str) -> dict[Any, float]:
    """Sum/gauge values of one metric keyed by one attribute."""
    return {attributes.get(key): point.value for attributes, point in found[name]}


def counts(found: dict[str, list[tuple[dict[str, Any], Any]]], name: str) -> dict[tuple[tuple[str, Any], ...], int]:
    """Histogram counts keyed by the sorted attribute items."""
    return {tuple(sorted(attributes.items())): point.count for attributes, point in found[name]}


def sums(found: dict[str, list[tuple[dict[str, Any], Any]]], name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    return {tuple(sorted(attributes.items())): point.sum for attributes, point in found[name]}


def scripted_session() -> None:
    """3 hits, 2 misses, 2 expands (4 schemas), 1 full + 2 search spawns, 4 calls of which 3 fail."""
    telemetry.record_search("hit", 0.001, 3)
    telemetry.record_search("miss", 0.002, 0)
    telemetry.record_search("hit", 0.003, 8)
    telemetry.record_expand(3)
    telemetry.record_search("miss", 0.001, 0)
    telemetry.record_search("hit", 0.002, 1)
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


# --------------------------------------------------------------------------- exact counts


def test_scripted_session_yields_exact_counts_and_attributes(reader: InMemoryMetricReader) -> None:
    scripted_session()
    found = points(reader)

    assert values(found, telemetry.SEARCH_INVOCATIONS, "outcome") == {"hit": 3, "miss": 2, "expand": 2}
    assert counts(found, telemetry.SEARCH_DURATION) == {(("outcome", "hit"),): 3, (("outcome", "miss"),): 2}
    assert sums(found, telemetry.SEARCH_DURATION)[(("outcome", "miss"),)] == pytest.approx(0.003)
    assert counts(found, telemetry.SEARCH_RESULTS) == {(): 5}
    assert sums(found, telemetry.SEARCH_RESULTS) == {(): 12}
    assert values(found, telemetry.SEARCH_EXPANDED_TOOLS, "outcome") == {None: 4}

    full, search = (("agent", "default"), ("mode", "full")), (("agent", "coder"), ("mode", "search"))
    assert {tuple(sorted(a.items())): p.value for a, p in found[telemetry.SPAWNS]} == {full: 1, search: 2}
    assert sums(found, telemetry.SPAWN_TOKENS_SENT) == {full: 3000, search: 2200}
    assert sums(found, telemetry.SPAWN_TOKENS_SAVED) == {full: 0, search: 9800}
    assert counts(found, telemetry.SPAWN_TOKENS_SAVED) == {full: 1, search: 2}

    calls = {(a["server"], a["result"]): p.value for a, p in found[telemetry.TOOL_CALLS]}
    assert calls == {
        ("time", "ok"): 1,
        ("time", "tool_error"): 1,
        ("git", "timeout"): 1,
        ("git", "transport_error"): 1,
    }
    assert values(found, telemetry.CATALOG_TOOLS, "server") == {"time": 2, "git": 12}
    assert values(found, telemetry.CATALOG_TOKENS, "server") == {"time": 310, "git": 2900}


SMALL_CATALOG = {
    "time": [
        {"name": "get_current_time", "description": "Get the current time in a timezone", "inputSchema": {}},
        {"name": "convert_time", "description": "Convert a time between timezones", "inputSchema": {}},
    ],
    "git": [{"name": "git_status", "description": "Show the working tree status", "inputSchema": {}}],
}


def test_searches_through_the_real_engine_are_counted_once_without_the_query() -> None:
    from orchestrator.protocols.mcp._catalog import ToolCatalog
    from orchestrator.protocols.mcp._tool_search import ToolSearchEngine

    metric_reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.use_meter_provider(MeterProvider(metric_readers=[metric_reader]), tracer_provider=tracer_provider)
    engine = ToolSearchEngine(ToolCatalog.from_lists(SMALL_CATALOG), ranking="lexical")

    assert engine.search("current time")
    assert engine.search("working tree status")
    assert engine.search("quantum pizza") == []
    engine.expand_tools(["time__get_current_time", "git__git_status"])

    found = points(metric_reader)
    assert values(found, telemetry.SEARCH_INVOCATIONS, "outcome") == {"hit": 2, "miss": 1, "expand": 1}
    lexical = ("ranking", "lexical")  # the engine says which ranking answered (see test_hybrid.py)
    assert counts(found, telemetry.SEARCH_DURATION) == {(("outcome", "hit"), lexical): 2, (("outcome", "miss"), lexical): 1}
    assert values(found, telemetry.SEARCH_EXPANDED_TOOLS, "outcome") == {None: 2}
    # Low cardinality: no query words in any metric attribute or span attribute.
    recorded = [str(v) for series in found.values() for attributes, _ in series for v in attributes.values()]
    recorded += [str(v) for span_ in spans.get_finished_spans() for v in (span_.attributes or {}).values()]
    assert not any(word in text for text in recorded for word in ("current", "working", "quantum", "pizza"))


@pytest.mark.slow
@pytest.mark.anyio
async def test_calls_through_the_real_manager_are_counted_by_result(reader: InMemoryMetricReader) -> None:
    from orchestrator._errors import ToolExecutionError
    from orchestrator.protocols.mcp._manager import MCPManager

    from .conftest import TESTS_DIR

    settings = Settings(
        mcp={
            "servers": {"basic": {"command": sys.executable, "args": [str(TESTS_DIR / "servers" / "basic.py")]}},
            "warm_start": False,
        }
    )
    with anyio.fail_after(60):
        async with MCPManager(settings) as manager:
            await manager.call_tool("basic", "echo", {"text": "hi"})
            with pytest.raises(ToolExecutionError):
                await manager.call_tool("basic", "fail", {"message": "no"})

    found = points(reader)
    assert {(a["server"], a["result"]): p.value for a, p in found[telemetry.TOOL_CALLS]} == {
        ("basic", "ok"): 1,
        ("basic", "tool_error"): 1,
    }
    errors = {a["gen_ai.tool.name"]: a.get("error.type") for a, _ in found[telemetry.CLIENT_OPERATION_DURATION]}
    assert errors == {"echo": None, "fail": "tool_error"}


def test_tool_call_duration_follows_the_mcp_semantic_conventions(reader: InMemoryMetricReader) -> None:
    scripted_session()
    found = points(reader)
    by_tool = {
        attributes["gen_ai.tool.name"]: (attributes, point)
        for attributes, point in found[telemetry.CLIENT_OPERATION_DURATION]
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


def test_three_outcome_series_exist_at_zero_before_any_search(reader: InMemoryMetricReader) -> None:
    found = points(reader)
    assert values(found, telemetry.SEARCH_INVOCATIONS, "outcome") == {"hit": 0, "miss": 0, "expand": 0}


def test_catalog_gauges_keep_the_latest_size_of_each_server(reader: InMemoryMetricReader) -> None:
    telemetry.record_catalog("time", 2, 310)
    telemetry.record_catalog("time", 3, 450)
    assert values(points(reader), telemetry.CATALOG_TOOLS, "server") == {"time": 3}
    # A later collection still reports it (cumulative last value), as a Prometheus scrape would.
    assert values(points(reader), telemetry.CATALOG_TOKENS, "server") == {"time": 450}


def test_a_plan_costlier_than_the_full_catalog_saves_zero_tokens(reader: InMemoryMetricReader) -> None:
    telemetry.record_spawn("search", "default", 5000, -200)
    found = points(reader)
    assert sums(found, telemetry.SPAWN_TOKENS_SAVED) == {(("agent", "default"), ("mode", "search")): 0}


@pytest.mark.parametrize(
    "call",
    [
        lambda: telemetry.record_search("expand", 0.1, 1),  # type: ignore[arg-type]
        lambda: telemetry.record_spawn("partial", "default", 1, 1),
        lambda: telemetry.record_tool_call("time", "x", "error", 0.1),  # type: ignore[arg-type]
    ],
    ids=["search-outcome", "spawn-mode", "call-result"],
)
def test_a_value_outside_the_closed_attribute_sets_is_refused(reader: InMemoryMetricReader, call: Any) -> None:
    with pytest.raises(ValueError, match="expected one of"):
        call()


def test_recording_before_setup_and_after_shutdown_does_nothing() -> None:
    telemetry.shutdown_telemetry()
    scripted_session()  # no provider: no error, nothing kept
    with telemetry.span("orchestrator.noop", agent="default"):
        pass
    assert telemetry.setup_telemetry(Settings()) is telemetry.current_telemetry()  # exporter none


def test_each_test_provider_starts_from_zero() -> None:
    for _ in range(2):
        metric_reader = InMemoryMetricReader()
        telemetry.use_meter_provider(MeterProvider(metric_readers=[metric_reader]))
        telemetry.record_search("hit", 0.001, 1)
        assert values(points(metric_reader), telemetry.SEARCH_INVOCATIONS, "outcome")["hit"] == 1


# --------------------------------------------------------------------------- Prometheus


def test_prometheus_scrape_shows_the_three_outcome_series() -> None:
    settings = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    with telemetry.telemetry_session(settings) as session:
        assert session.prometheus_url is not None
        telemetry.record_search("hit", 0.001, 2)
        telemetry.record_search("hit", 0.001, 4)
        telemetry.record_search("miss", 0.001, 0)
        telemetry.record_expand(2)
        samples = scrape(session.prometheus_url)

    series = {labels["outcome"]: value for labels, value in samples["mcp_tool_search_invocations_total"]}
    assert series == {"hit": 2.0, "miss": 1.0, "expand": 1.0}
    # Only the attribute as label: no scope labels, no query text.
    assert all(set(labels) == {"outcome"} for labels, _ in samples["mcp_tool_search_invocations_total"])
    assert samples["mcp_tool_search_duration_seconds_count"]


def test_prometheus_endpoint_can_be_set_up_again_on_the_same_port() -> None:
    port = free_port()
    settings = TelemetrySettings(exporter="prometheus", prometheus={"port": port})
    for round_ in (1, 2, 3):
        session = telemetry.setup_telemetry(settings)
        assert session.prometheus_address == ("127.0.0.1", port)
        for _ in range(round_):
            telemetry.record_search("miss", 0.001, 0)
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        series = {labels["outcome"]: value for labels, value in samples["mcp_tool_search_invocations_total"]}
        assert series["miss"] == round_  # a fresh provider each time, not a leftover registry
        telemetry.shutdown_telemetry()
    with pytest.raises(OSError):
        scrape(f"http://127.0.0.1:{port}/metrics")


def test_prometheus_port_in_use_is_a_config_error_naming_the_key() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"telemetry\.prometheus: cannot serve metrics on 127\.0\.0\.1:{port}"):
            telemetry.setup_telemetry(TelemetrySettings(exporter="prometheus", prometheus={"port": port}))


# --------------------------------------------------------------------------- OTLP


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None,
    reason="the grpc exporter is installed here",
)
def test_otlp_grpc_without_its_package_names_the_package_to_install() -> None:
    settings = TelemetrySettings(exporter="otlp", otlp={"protocol": "grpc", "endpoint": "http://127.0.0.1:4317"})
    expected = "telemetry.otlp.protocol: grpc needs the package opentelemetry-exporter-otlp-proto-grpc"
    with pytest.raises(ConfigError, match=expected):
        telemetry.setup_telemetry(settings)


class _Collector(BaseHTTPRequestHandler):
    """A minimal OTLP/HTTP receiver: keeps each request's path, headers and protobuf body."""

    received: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
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
    with telemetry.telemetry_session(settings):
        with telemetry.span("orchestrator.spawn", agent="default", mode="search"):
            telemetry.record_search("hit", 0.001, 2)
            telemetry.record_search("miss", 0.001, 0)
    # shutdown flushed both signals

    paths = {path for path, _, _ in received}
    assert {"/v1/metrics", "/v1/traces"} <= paths
    assert all(headers.get("x-collector-token") == "s3cret" for _, headers, _ in received)

    outcomes: dict[str, float] = {}
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
                    if metric.name == telemetry.SEARCH_INVOCATIONS:
                        for point in metric.sum.data_points:
                            outcome = next(a.value.string_value for a in point.attributes if a.key == "outcome")
                            outcomes[outcome] = point.as_double or point.as_int
    assert outcomes == {"hit": 1, "miss": 1, "expand": 0}
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
    telemetry.setup_telemetry(settings)
    with telemetry.span("orchestrator.spawn"):
        telemetry.record_search("hit", 0.001, 1)
    started = time.monotonic()
    telemetry.shutdown_telemetry()
    # The exporters' own default would retry for 10 s per signal; the bound here is 2 s per export.
    assert time.monotonic() - started < 8


# --------------------------------------------------------------------------- traces


def test_project_spans_land_in_the_installed_tracer_provider() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use_meter_provider(MeterProvider(), tracer_provider=tracer_provider)

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
    telemetry.setup_telemetry(TelemetrySettings(exporter="console", export_interval_s=60))
    with anyio.fail_after(10):
        with telemetry.span("orchestrator.spawn", agent="default"):
            async with Client(_echo_server()) as client:
                result = await client.call_tool("echo", {"text": "hi"})
    assert not result.is_error
    telemetry.shutdown_telemetry()  # flushes the batch processor and the metric reader

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
