"""`orchestrator metrics`: reads a live Prometheus endpoint, prints the miss rate and tokens saved."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from orchestrator import OrchestratorError, TelemetrySettings
from orchestrator._cli import app
from orchestrator._cli.metrics import default_url, scrape, summarize
from orchestrator._telemetry import telemetry_session

runner = CliRunner()


@pytest.fixture
def endpoint() -> Iterator[str]:
    """A live Prometheus endpoint on an ephemeral port, after a scripted session.

    Searches are split over both rankings and a fallback, as the engine records them: the figures
    below add every series of an outcome."""
    settings = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    with telemetry_session(settings) as session:
        session.record_search("hit", 0.001, 3, ranking="lexical")
        session.record_search("hit", 0.002, 5, ranking="hybrid")
        session.record_search("hit", 0.003, 1, ranking="lexical", fallback="warming")
        session.record_search("miss", 0.002, 0, ranking="lexical")
        session.record_expand(2)
        session.record_expand(1)
        session.record_spawn("full", "default", 3000, 0)
        session.record_spawn("search", "default", 1200, 4800)
        session.record_spawn("search", "default", 1000, 5000)
        session.record_tool_call("time", "get_current_time", "ok", 0.04)
        session.record_tool_call("time", "get_current_time", "ok", 0.06)
        session.record_tool_call("time", "convert_time", "tool_error", 0.02)
        session.record_catalog("time", 2, 310)
        for rank in ("1", "1", "3", "not_found", "unsearched"):
            session.record_call_rank(rank)
        assert session.prometheus_url is not None
        yield session.prometheus_url


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("BERNSTEIN_CONFIG", "BERNSTEIN_TELEMETRY__PROMETHEUS__PORT", "BERNSTEIN_TELEMETRY__PROMETHEUS__HOST"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_metrics_prints_the_three_outcomes_miss_rate_and_tokens_saved(endpoint: str) -> None:
    result = runner.invoke(app, ["metrics", "--url", endpoint])
    assert result.exit_code == 0, result.output
    rows = {line.split("  ")[0].strip(): line.split()[-1] for line in result.output.splitlines() if line.strip()}
    assert rows["searches"] == "4"
    assert rows["hits"] == "3"
    assert rows["misses"] == "1"
    assert rows["miss rate"] == "25.0%"
    assert rows["expand_tools calls"] == "2"
    assert rows["schemas expanded"] == "3"
    search_row = next(line.split() for line in result.output.splitlines() if line.startswith("search "))
    assert search_row == ["search", "default", "2", "2,200", "9,800", "4,900"]
    total_row = next(line.split() for line in result.output.splitlines() if line.startswith("total"))
    assert total_row == ["total", "3", "5,200", "9,800", "3,266"]
    assert "tool_error" in result.output and "time" in result.output
    assert rows["search-mode calls found first (live hit@1)"] == "50.0%"
    assert rows["search-mode calls found in the top 5 (live hit@5)"] == "75.0%"
    assert rows["calls whose tool the latest search missed"] == "1"
    assert rows["calls without a search before them"] == "1"


def test_metrics_json_carries_exact_figures(endpoint: str) -> None:
    result = runner.invoke(app, ["metrics", "--json", "--url", endpoint])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["url"] == endpoint
    assert payload["search"] == {
        "searches": 4,
        "hits": 3,
        "misses": 1,
        "miss_rate": 0.25,
        "expands": 2,
        "expanded_tools": 3,
        "avg_results": pytest.approx(9 / 4),
        "avg_latency_s": pytest.approx(0.002),
        "calls_by_rank": {"1": 2, "2": 0, "3": 1, "4": 0, "5": 0, "6-10": 0, "11+": 0, "not_found": 1, "unsearched": 1},
        "found_in_top_5": 0.75,
        "found_first": 0.5,
    }
    assert payload["spawns"] == [
        {"mode": "full", "agent": "default", "spawns": 1, "tokens_sent": 3000, "tokens_saved": 0},
        {"mode": "search", "agent": "default", "spawns": 2, "tokens_sent": 2200, "tokens_saved": 9800},
    ]
    assert payload["tokens_saved"] == 9800
    assert payload["expands_per_search_spawn"] == 1.0
    assert payload["calls"] == [
        {"server": "time", "result": "ok", "calls": 2, "avg_duration_s": pytest.approx(0.05)},
        {"server": "time", "result": "tool_error", "calls": 1, "avg_duration_s": pytest.approx(0.02)},
    ]
    assert payload["catalog"] == [{"server": "time", "tools": 2, "tokens": 310}]


def test_metrics_default_url_comes_from_telemetry_prometheus_settings(endpoint: str, tmp_path: Path) -> None:
    port = endpoint.rsplit(":", 1)[1].split("/")[0]
    config = tmp_path / "bernstein.yaml"
    config.write_text(f"telemetry:\n  exporter: prometheus\n  prometheus:\n    port: {port}\n", encoding="utf-8")
    result = runner.invoke(app, ["--config", str(config), "metrics", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["search"]["misses"] == 1


def test_metrics_fails_with_one_line_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    result = runner.invoke(app, ["metrics", "--url", url])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: no metrics endpoint at {url} (connection refused)")
    assert "Traceback" not in result.output


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404, "Not Found")

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


@pytest.fixture
def not_found_url() -> Iterator[str]:
    """A real HTTP server that answers 404 to everything."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_metrics_reports_an_http_error_status_in_one_line(not_found_url: str) -> None:
    result = runner.invoke(app, ["metrics", "--url", not_found_url])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: metrics endpoint {not_found_url} answered HTTP 404 Not Found"


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("http://127.0.0.1:99999/metrics", "port 99999 is not between 1 and 65535"),
        ("localhost:9464/metrics", "missing an 'http://' or 'https://' protocol"),
    ],
)
def test_metrics_refuses_a_malformed_url_in_one_line(url: str, detail: str) -> None:
    result = runner.invoke(app, ["metrics", "--url", url])
    assert result.exit_code == 2  # bad input, as README's exit codes say
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: bad metrics URL {url!r}:"), result.output
    assert detail in lines[0]


def test_scrape_gives_up_on_a_silent_endpoint_after_its_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        with pytest.raises(OrchestratorError, match=r"did not answer within 0\.2 s$"):
            anyio.run(scrape, url, 0.2)


def test_an_endpoint_without_events_shows_zeros_and_no_miss_rate() -> None:
    settings = TelemetrySettings(exporter="prometheus", prometheus={"port": 0})
    with telemetry_session(settings) as session:
        assert session.prometheus_url is not None
        result = runner.invoke(app, ["metrics", "--url", session.prometheus_url])
    assert result.exit_code == 0, result.output
    assert re.search(r"^miss rate +n/a", result.output, re.MULTILINE)
    assert "spawns: none yet" in result.output


def test_summarize_counts_absent_series_as_zero() -> None:
    text = '# TYPE mcp_tool_search_invocations_total counter\nmcp_tool_search_invocations_total{outcome="miss"} 4.0\n'
    summary = summarize(text)
    assert (summary.search.searches, summary.search.hits, summary.search.misses) == (4, 0, 4)
    assert summary.search.miss_rate == 1.0
    assert summary.search.expands == 0 and summary.spawns == [] and summary.tokens_saved == 0


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:9464/metrics"),
        ("0.0.0.0", "http://127.0.0.1:9464/metrics"),
        ("::1", "http://[::1]:9464/metrics"),
        ("metrics.local", "http://metrics.local:9464/metrics"),
    ],
)
def test_default_url_reaches_a_wildcard_bind_on_loopback(host: str, url: str) -> None:
    assert default_url(host, 9464) == url


def test_a_hostile_metrics_page_is_read_safely(scripted_peer: Any) -> None:
    """Found by red-teaming: a page with `+Inf` ended `metrics` in a traceback, labels with terminal
    escapes reached the terminal raw, and one 1.6 MB line of escaped quotes took the library's parser 25 s."""
    url = f"http://127.0.0.1:{scripted_peer.server_port}/metrics"
    scripted_peer.answer = (
        'mcp_tool_search_invocations_total{outcome="hit",ranking="lexical"} +Inf\n'
        'mcp_tool_search_invocations_total{outcome="miss",ranking="lexical"} 2\n'
        'mcp_tool_calls_total{server="evil\x1b[2J\u202e",result="ok"} 3\n'
    ).encode()
    result = runner.invoke(app, ["metrics", "--url", url])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output and "evil\\u001b[2J\\u202e" in result.output
    scripted_peer.answer = b'mcp_tool_calls_total{server="' + b'\\"' * 800_000 + b'",result="ok"} 1\n'
    started = time.monotonic()
    result = runner.invoke(app, ["metrics", "--url", url])
    assert result.exit_code == 1 and "a line of 1,600," in result.output and time.monotonic() - started < 10


def test_a_trickling_metrics_endpoint_is_given_up_on_as_a_whole(scripted_peer: Any) -> None:
    """Found by red-teaming: the timeout applied to each read, so a byte every 2 s held `metrics` forever."""
    scripted_peer.answer, scripted_peer.trickle_s = b"x" * 100, 0.2
    started = time.monotonic()
    with pytest.raises(OrchestratorError, match="did not answer within 1 s"):
        anyio.run(scrape, f"http://127.0.0.1:{scripted_peer.server_port}/metrics", 1.0)
    assert time.monotonic() - started < 5
