"""Exporter wiring: a `Telemetry` configured from `telemetry:` in bernstein.yaml (console, OTLP, Prometheus).

The OpenTelemetry SDK does the work; this module only builds its providers and readers. The global
*meter* provider is never set (project metrics go through the `Telemetry` passed to each component),
so setting up again in one process is safe. Traces are different: the `mcp` SDK takes its tracer from
OpenTelemetry's global tracer provider, which a process can set once, so the first traced setup
installs one SDK `TracerProvider` globally and every later setup adds its own span processor to it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider

from .._errors import ConfigError
from .._gateway.addresses import LOOPBACK_HOSTS, is_loopback, matches_address
from .instruments import Telemetry

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from .._config import Settings, TelemetrySettings

__all__ = ["setup_telemetry", "telemetry_session"]

_log = logging.getLogger(__name__)

# Deadline of one OTLP export, retries included (the exporters' own default is 10 s, and a command
# flushes twice on exit). A collector answers in milliseconds; one that is down costs this much.
_OTLP_EXPORT_TIMEOUT_S = 2.0

_GRPC_PACKAGE = "opentelemetry-exporter-otlp-proto-grpc"

_tracer_lock = threading.Lock()


def setup_telemetry(settings: Settings | TelemetrySettings) -> Telemetry:
    """A `Telemetry` configured from `telemetry:`; the caller owns it and calls `shutdown()` when done.

    exporter none: nothing is exported (a `Telemetry()` over the global API providers).
    console: metrics every `export_interval_s` and spans, as JSON on stderr (stdout stays for output).
    otlp: metrics and spans to `telemetry.otlp.endpoint` (http/protobuf: `<endpoint>/v1/metrics` and
    `<endpoint>/v1/traces`; grpc needs the `opentelemetry-exporter-otlp-proto-grpc` package).
    prometheus: a scrape endpoint on `telemetry.prometheus.host:port` (port 0: any free port; see
    `Telemetry.prometheus_url`); no traces.

    Raises:
        ConfigError: the exporter cannot be built (missing package, port in use), naming the key.
    """
    config = _telemetry_settings(settings)
    if config.exporter == "none":
        return Telemetry()
    resource = Resource.create({SERVICE_NAME: config.service_name})
    interval_ms = config.export_interval_s * 1000
    if config.exporter == "prometheus":
        telemetry = _prometheus_telemetry(config, resource)
    else:
        metric_exporter, span_exporter = _push_exporters(config)
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=interval_ms)
        meter_provider = SDKMeterProvider(resource=resource, metric_readers=[reader])
        processor = BatchSpanProcessor(span_exporter, schedule_delay_millis=interval_ms)
        tracer_provider = _process_tracer_provider(resource)
        tracer_provider.add_span_processor(processor)
        telemetry = Telemetry(
            meter_provider,
            tracer_provider,
            owned_meter_provider=meter_provider,
            owned_span_processor=processor,
        )
    return telemetry


@contextlib.contextmanager
def telemetry_session(settings: Settings | TelemetrySettings) -> Iterator[Telemetry]:
    """`setup_telemetry` for the length of a command; shuts down (and flushes) on the way out."""
    telemetry = setup_telemetry(settings)
    try:
        yield telemetry
    finally:
        telemetry.shutdown()


def _telemetry_settings(settings: Settings | TelemetrySettings) -> TelemetrySettings:
    from .._config import TelemetrySettings

    return settings if isinstance(settings, TelemetrySettings) else settings.telemetry


def _prometheus_telemetry(config: TelemetrySettings, resource: Resource) -> Telemetry:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, make_wsgi_app, start_http_server

    # A registry of our own: the global REGISTRY would refuse a second collector on a later setup.
    registry = CollectorRegistry(auto_describe=True)
    reader: MetricReader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    host, port = config.prometheus.host, config.prometheus.port
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        reader.shutdown()
        raise ConfigError(
            f"telemetry.prometheus: cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    if is_loopback(host):
        # Before any metric exists: the thread serves from its first request on.
        server.set_app(_loopback_only(make_wsgi_app(registry)))
    meter_provider = SDKMeterProvider(resource=resource, metric_readers=[reader])
    return Telemetry(
        meter_provider,
        None,
        owned_meter_provider=meter_provider,
        prometheus_server=server,
        prometheus_thread=thread,
    )


def _loopback_only(app: WSGIApplication) -> WSGIApplication:
    """`app` answering 421 to a `Host` other than a loopback address: on a loopback port, a web page whose
    name resolves to 127.0.0.1 (DNS rebinding) could otherwise read which servers and tools a user has.
    A listener on another address was exposed on purpose, and Prometheus scrapes it by any name."""

    def checked(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if matches_address(environ.get("HTTP_HOST", ""), LOOPBACK_HOSTS):
            return app(environ, start_response)
        start_response("421 Misdirected Request", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"Host header not allowed (DNS rebinding protection)\n"]

    return checked


def _push_exporters(config: TelemetrySettings) -> tuple[Any, Any]:
    """(metric exporter, span exporter) for console or otlp."""
    if config.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleMetricExporter(out=sys.stderr), ConsoleSpanExporter(out=sys.stderr)
    otlp = config.otlp
    headers: Mapping[str, str] = dict(otlp.headers)
    if otlp.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            raise ConfigError(
                f"telemetry.otlp.protocol: grpc needs the package {_GRPC_PACKAGE} "
                f"(pip install {_GRPC_PACKAGE}), or use protocol http/protobuf"
            ) from None
        insecure = otlp.endpoint.startswith("http://")
        return (
            GrpcMetricExporter(
                endpoint=otlp.endpoint, headers=headers, insecure=insecure, timeout=_OTLP_EXPORT_TIMEOUT_S
            ),
            GrpcSpanExporter(
                endpoint=otlp.endpoint, headers=headers, insecure=insecure, timeout=_OTLP_EXPORT_TIMEOUT_S
            ),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    base = otlp.endpoint.rstrip("/")
    return (
        OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=headers, timeout=_OTLP_EXPORT_TIMEOUT_S),
        OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers, timeout=_OTLP_EXPORT_TIMEOUT_S),
    )


_own_tracer_provider: SDKTracerProvider | None = None
"""The process's one SDK tracer provider behind OpenTelemetry's global one (which can be set only once)."""


def _process_tracer_provider(resource: Resource) -> SDKTracerProvider:
    """The SDK TracerProvider behind the global one, created and installed on first use.

    The `mcp` SDK's spans go to the global provider, which OpenTelemetry lets a process set once; so
    every setup adds its span processor to this one provider instead of replacing it. When the
    embedding application already installed another implementation, project spans get a private
    provider and the `mcp` SDK's spans stay with the application's.
    """
    global _own_tracer_provider
    with _tracer_lock:
        installed = trace.get_tracer_provider()
        if isinstance(installed, SDKTracerProvider):
            return installed
        if _own_tracer_provider is None:
            _own_tracer_provider = SDKTracerProvider(resource=resource)
            if isinstance(installed, trace.ProxyTracerProvider):
                trace.set_tracer_provider(_own_tracer_provider)
            else:
                _log.warning(
                    "a non-SDK global tracer provider is installed; the mcp SDK's spans stay with it "
                    "and only orchestrator's own spans reach telemetry.exporter"
                )
        return _own_tracer_provider
