"""A real Prometheus scrapes a real `orchestrator serve`; the shipped rules and dashboard queries are
checked through Prometheus's HTTP API against traffic driven by real MCP clients.

One module fixture runs the whole scenario once:

1. `orchestrator serve --transport http` (Prometheus exporter on a free port) with two stdio servers,
   tests/servers/basic.py and paged.py (40 tools, so search mode saves tokens), a search-mode default
   profile (`searcher`) and a full-mode one (`fuller`).
2. A warm-up round of traffic, before Prometheus starts, so every series the measured round touches
   already exists with as many events as the measured round adds. Rates then cover only the measured
   round, and every series is extrapolated by the same factor (same scrape timestamps, and a first
   value large enough that Prometheus never extrapolates a counter below zero), so ratios are exact.
3. `prometheus` on 127.0.0.1 (free port, temporary storage, 1 s scrape and rule evaluation) with
   deploy/prometheus/orchestrator-rules.yml loaded; at least three scrapes.
4. The measured round: searches (hits and misses) on the gateway's `/mcp` through the SDK's
   streamable HTTP client; a search-mode spawn (POST /spawns) that expands and calls through
   `call_tool`; a full-mode spawn that calls its tools directly. Some calls to basic fail (`fail`
   returns isError); every call to paged succeeds. A spawn's calls go out in model rounds (a pause
   for the model's turn, then the round's calls at once), so each spawn's session (rounds, tokens in
   both modes) is the same in both rounds and the session figures are exact too.
5. A bounded wait until Prometheus has scraped the final counts.
6. `orchestrator tune --prometheus` reads the session figures back through Prometheus.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from orchestrator._accounting import BATCH_GAP_S

from .conftest import server_entry
from .test_prometheus_rules import RULES, dashboard_expressions, dashboard_panels, load_rules, metric_names

PROMETHEUS = shutil.which("prometheus")
ORCHESTRATOR = str(Path(sys.executable).with_name("orchestrator"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="prometheus not on PATH: run `sh scripts/install-debian-package.sh prometheus prometheus promtool` (make test does)",
    ),
]

# Bounds, not expectations (the whole module takes about 15 s here): importing the mcp SDK in the gateway
# and in its stdio server costs about 2 s of CPU each, and the machine's two cores are shared.
SERVE_START_S = 60.0
PROMETHEUS_READY_S = 30.0
SCRAPED_S = 30.0
HTTP_TIMEOUT_S = 10.0
POLL_S = 0.2
SCRAPE_INTERVAL = "1s"
MIN_SCRAPES_BEFORE_TRAFFIC = 3
"""Scrapes of the warm-up state before the measured round, so each rate has at least four samples and
Prometheus extrapolates every series alike (see the module docstring)."""
SHUTDOWN_S = 30.0

JOB = "orchestrator"
SERVER = "basic"
PAGED = "paged"
PAGED_TOOLS = 40
BASIC_TOOLS = 5
"""basic.py: echo, add, fail, sleep, whoami."""
SEARCH_AGENT = "searcher"
FULL_AGENT = "fuller"
HIT_QUERY = "echo text"
MISS_QUERY = "zzqx florble"
"""No tool shares a word with it, and it is far from every tool's meaning."""

# One round of traffic, in each of the two spawns for the calls. The alerts need at least 20 searches
# in 15 minutes and 10 calls to one server in 5.
HITS = 12
MISSES = 8
SPAWN_SEARCHES = 1
"""Of the HITS, made by the search-mode spawn (beside its expands) before its calls; the rest on `/mcp`."""
EXPANDS = 2
OK_CALLS_PER_SPAWN = 3
FAILED_CALLS_PER_SPAWN = 2
PAGED_CALLS_PER_SPAWN = 1
CALLS = 2 * (OK_CALLS_PER_SPAWN + FAILED_CALLS_PER_SPAWN)
"""Calls to basic in one round."""
FAILED_CALLS = 2 * FAILED_CALLS_PER_SPAWN
PAGED_CALLS = 2 * PAGED_CALLS_PER_SPAWN
SEARCH_SPAWN_CALLS = OK_CALLS_PER_SPAWN + FAILED_CALLS_PER_SPAWN + PAGED_CALLS_PER_SPAWN
FOUND_SHARE = OK_CALLS_PER_SPAWN / SEARCH_SPAWN_CALLS
"""Of the search-mode spawn's calls, those whose tool its search returned (first): echo's."""
ROUNDS = 2  # warm-up and measured
SEARCH_SESSION_ROUNDS = 4
"""Model rounds of the search-mode spawn: expands, echo calls, fail and paged calls, and the answer."""
FULL_SESSION_ROUNDS = 3
"""The full-mode spawn: echo calls, fail and paged calls, the answer."""
THINK_S = 2 * BATCH_GAP_S
"""The model's turn before each round of a spawn: past the gateway's batch gap, so every round is counted
as one however the machine is loaded (the calls of a round go out at once)."""
ADMIN_TOKEN = "prometheus-scrape-test-admin-token"
"""`gateway.token`: the admin secret for `/mcp` and the `/spawns` endpoints."""

Labels = frozenset[tuple[str, str]]
"""A query result's label set (without __name__)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(what: str, timeout: float, check: Callable[[], Any]) -> Any:
    """Poll `check` until it returns something truthy, or fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(POLL_S)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


# --------------------------------------------------------------------------- traffic through real MCP clients


@dataclass
class Round:
    """What one round of traffic did, as the gateway reported it."""

    tools_returned: int = 0
    spawns: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Final stats (`DELETE /spawns/<id>`) by agent."""


def _text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def _drive(base: str, index: int) -> Round:
    done = Round()
    admin_headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=admin_headers, timeout=HTTP_TIMEOUT_S) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,  # the SDK's HTTP client
    ):
        for query, outcome, count in ((HIT_QUERY, "hit", HITS - SPAWN_SEARCHES), (MISS_QUERY, "miss", MISSES)):
            for _ in range(count):
                result = await client.call_tool("tool_search", {"query": query})
                assert result.structured_content is not None and result.structured_content["outcome"] == outcome
                done.tools_returned += len(result.structured_content["hits"])
    async with httpx2.AsyncClient(base_url=base, headers=admin_headers, timeout=HTTP_TIMEOUT_S) as admin:
        for agent in (SEARCH_AGENT, FULL_AGENT):
            response = await admin.post("/spawns", json={"task": f"round {index} {agent}", "agent": agent})
            assert response.status_code == 201, response.text
            spawn = response.json()
            headers = {"Authorization": f"Bearer {spawn['token']}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT_S) as http,
                Client(streamable_http_client(spawn["url"], http_client=http)) as client,
            ):
                listed = {tool.name for tool in (await client.list_tools()).tools}
                search = agent == SEARCH_AGENT

                async def call(name: str, arguments: dict[str, Any], search: bool = search) -> Any:
                    if search:
                        return await client.call_tool("call_tool", {"name": name, "arguments": arguments})
                    return await client.call_tool(name, arguments)

                if search:
                    assert listed == {"tool_search", "expand_tools", "call_tool"}
                    expand = partial(client.call_tool, "expand_tools", {"names": [f"{SERVER}__echo"]})
                    find = partial(client.call_tool, "tool_search", {"query": HIT_QUERY})
                    *expanded_all, found = await _model_round([expand] * EXPANDS + [find] * SPAWN_SEARCHES)
                    for expanded in expanded_all:
                        assert not expanded.is_error, _text(expanded)
                    # Only echo matches: its calls are found first, the others (fail, paged) not found.
                    assert [hit["name"] for hit in found.structured_content["hits"]] == [f"{SERVER}__echo"]
                    done.tools_returned += len(found.structured_content["hits"])
                else:
                    assert f"{SERVER}__add" in listed and "tool_search" not in listed
                echo = partial(call, f"{SERVER}__echo", {"text": "hi"})
                for result in await _model_round([echo] * OK_CALLS_PER_SPAWN):
                    assert not result.is_error, _text(result)
                fail = partial(call, f"{SERVER}__fail", {"message": "on purpose"})
                paged = partial(call, f"{PAGED}__tool_000", {"value": "v"})
                results = await _model_round([fail] * FAILED_CALLS_PER_SPAWN + [paged] * PAGED_CALLS_PER_SPAWN)
                for result in results[:FAILED_CALLS_PER_SPAWN]:
                    assert result.is_error and "on purpose" in _text(result)
                for result in results[FAILED_CALLS_PER_SPAWN:]:
                    assert not result.is_error and _text(result) == "tool_000: v"
            closed = await admin.delete(f"/spawns/{spawn['id']}")
            assert closed.status_code == 200, closed.text
            done.spawns[agent] = closed.json()
    assert done.spawns[SEARCH_AGENT]["mode"] == "search" and done.spawns[FULL_AGENT]["mode"] == "full"
    return done


async def _model_round(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """One model round: the model's turn (THINK_S), then its tool calls at once; their results in order."""
    await anyio.sleep(THINK_S)
    results: list[Any] = [None] * len(calls)

    async def one(index: int) -> None:
        results[index] = await calls[index]()

    async with anyio.create_task_group() as group:
        for index in range(len(calls)):
            group.start_soon(one, index)
    return results


# --------------------------------------------------------------------------- Prometheus's HTTP API


class PrometheusAPI:
    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[Labels, float]:
        """Instant query: {labels without __name__: value}; fails on a query error or a non-vector result."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return {
            frozenset((key, value) for key, value in item["metric"].items() if key != "__name__"): float(
                item["value"][1]
            )
            for item in data["result"]
        }

    def value(self, expr: str) -> float | None:
        """The single value of a query, or None when it returns nothing."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return next(iter(result.values()), None)


def _labels(**labels: str) -> Labels:
    return frozenset(labels.items())


# --------------------------------------------------------------------------- the scenario


@dataclass
class Scenario:
    prometheus: PrometheusAPI
    metrics_url: str
    measured: Round
    warm_up: Round
    config: Path


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=SHUTDOWN_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _servers_ready(base: str) -> bool:
    request = urllib.request.Request(f"{base}/health", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        servers = json.loads(response.read())["servers"]
    return {server["name"]: server["state"] for server in servers} == {SERVER: "ready", PAGED: "ready"}


def _read_banner(log: Path, process: subprocess.Popen[bytes]) -> str:
    def banner() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"orchestrator serve exited ({process.returncode}): {log.read_text()}")
        found = re.search(r"gateway: agent '\w+' at (http://[\d.]+:\d+)/mcp", log.read_text())
        return found.group(1) if found else None

    return str(_wait_for("orchestrator serve listening", SERVE_START_S, banner))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    folder = tmp_path_factory.mktemp("prometheus-scrape")
    metrics_port = _free_port()
    config = folder / "bernstein.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "mcp": {
                    "servers": {
                        SERVER: server_entry("basic.py"),
                        PAGED: server_entry("paged.py", "--tools", str(PAGED_TOOLS)),
                    },
                    "cache_dir": str(folder / "cache"),
                    # Lexical ranking asked for: searches count no fallback, and no model loads.
                    "tool_search": {"ranking": "lexical"},
                },
                "agents": {
                    SEARCH_AGENT: {"tool_search": {"threshold_tokens": 0}},
                    FULL_AGENT: {"tool_search": {"threshold_tokens": 1_000_000}},
                },
                "telemetry": {"exporter": "prometheus", "prometheus": {"host": "127.0.0.1", "port": metrics_port}},
                "gateway": {"token": ADMIN_TOKEN},
            }
        )
    )
    serve_log = folder / "serve.log"
    with serve_log.open("wb") as log:
        serve = subprocess.Popen(
            [
                ORCHESTRATOR,
                "--config",
                str(config),
                "serve",
                "--agent",
                SEARCH_AGENT,
                "--transport",
                "http",
                "--port",
                "0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        gateway = _read_banner(serve_log, serve)
        # The gateway answers at once and adds servers as they come up: the traffic needs both.
        _wait_for("both servers ready", SERVE_START_S, partial(_servers_ready, gateway))
        warm_up = anyio.run(_drive, gateway, 0)  # before Prometheus's first scrape

        prometheus_port = _free_port()
        (folder / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": SCRAPE_INTERVAL,
                        "scrape_timeout": SCRAPE_INTERVAL,
                        "evaluation_interval": SCRAPE_INTERVAL,
                    },
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
                    ],
                }
            )
        )
        with (folder / "prometheus.log").open("wb") as log:
            prometheus = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={folder / 'prometheus.yml'}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=folder,
            )
        api = PrometheusAPI(f"http://127.0.0.1:{prometheus_port}")

        def ready() -> bool:
            assert prometheus is not None and prometheus.poll() is None, (folder / "prometheus.log").read_text()
            try:
                with urllib.request.urlopen(f"{api.base}/-/ready", timeout=HTTP_TIMEOUT_S) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        _wait_for("prometheus ready", PROMETHEUS_READY_S, ready)
        _wait_for(
            f"{MIN_SCRAPES_BEFORE_TRAFFIC} scrapes of the gateway",
            SCRAPED_S,
            lambda: (
                api.value(f'count_over_time(up{{job="{JOB}"}}[5m]) >= {MIN_SCRAPES_BEFORE_TRAFFIC}')
                and api.value(f'up{{job="{JOB}"}}') == 1
            ),
        )
        measured = anyio.run(_drive, gateway, 1)
        final = {
            'sum(mcp_tool_search_invocations_total{outcome="hit"})': ROUNDS * HITS,
            "sum(mcp_tool_calls_total)": ROUNDS * (CALLS + PAGED_CALLS),
            "sum(orchestrator_spawns_total)": ROUNDS * 2,
            "sum(orchestrator_session_rounds_count)": ROUNDS * 2,
        }
        _wait_for(
            "prometheus has scraped the final counts",
            SCRAPED_S,
            lambda: all(api.value(expr) == value for expr, value in final.items()),
        )
        yield Scenario(api, f"http://127.0.0.1:{metrics_port}/metrics", measured, warm_up, config)
    finally:
        if prometheus is not None:
            _terminate(prometheus)
        _terminate(serve)
    assert serve.returncode == 0, serve_log.read_text()


def _approx(value: float) -> Any:
    return pytest.approx(value, rel=1e-9)


# --------------------------------------------------------------------------- raw counts


def test_prometheus_holds_the_exact_counts_the_gateway_recorded(scenario: Scenario) -> None:
    api = scenario.prometheus
    by_outcome = api.query(f'sum by (outcome) (mcp_tool_search_invocations_total{{job="{JOB}"}})')
    assert by_outcome == {
        _labels(outcome="hit"): ROUNDS * HITS,
        _labels(outcome="miss"): ROUNDS * MISSES,
        _labels(outcome="expand"): ROUNDS * EXPANDS,
    }
    assert api.query("sum by (server, result) (mcp_tool_calls_total)") == {
        _labels(server=SERVER, result="ok"): ROUNDS * (CALLS - FAILED_CALLS),
        _labels(server=SERVER, result="tool_error"): ROUNDS * FAILED_CALLS,
        _labels(server=PAGED, result="ok"): ROUNDS * PAGED_CALLS,
    }
    assert api.query("sum by (agent, mode) (orchestrator_spawns_total)") == {
        _labels(agent=SEARCH_AGENT, mode="search"): ROUNDS,
        _labels(agent=FULL_AGENT, mode="full"): ROUNDS,
    }
    assert api.value("sum(mcp_tool_search_expanded_tools_total)") == ROUNDS * EXPANDS
    # Search-mode calls by the called tool's rank in the spawn's search (full-mode calls are not counted).
    assert api.query("sum by (rank) (mcp_tool_search_call_rank_total > 0)") == {
        _labels(rank="1"): ROUNDS * OK_CALLS_PER_SPAWN,
        _labels(rank="not_found"): ROUNDS * (FAILED_CALLS_PER_SPAWN + PAGED_CALLS_PER_SPAWN),
    }


def test_searched_outcomes_carry_a_ranking_and_no_empty_label_duplicates(scenario: Scenario) -> None:
    """Issue 17's "zero-initialised series with an empty ranking": every hit and miss series, zero ones
    included, names its ranking; only `expand` (which has no ranking) goes without."""
    api = scenario.prometheus
    assert api.query('mcp_tool_search_invocations_total{outcome=~"hit|miss", ranking=""}') == {}
    assert api.query('count by (outcome) (mcp_tool_search_invocations_total{ranking=""})') == {
        _labels(outcome="expand"): 1
    }


def test_every_metric_the_dashboard_and_rules_read_is_exported(scenario: Scenario) -> None:
    exported = set(scenario.prometheus.get("/api/v1/label/__name__/values"))
    used = metric_names([expr for _, _, expr in dashboard_expressions()] + [rule["expr"] for rule in load_rules()])
    assert used and used <= exported, used - exported


# --------------------------------------------------------------------------- the rules


def test_recording_rules_give_the_ratios_of_the_measured_traffic(scenario: Scenario) -> None:
    api = scenario.prometheus
    job = _labels(job=JOB)
    server, paged = _labels(job=JOB, server=SERVER), _labels(job=JOB, server=PAGED)
    exact: dict[str, dict[Labels, float]] = {
        "job:mcp_tool_search_miss_ratio:rate15m": {job: MISSES / (HITS + MISSES)},
        "job:orchestrator_expands_per_search_spawn:increase1h": {job: EXPANDS},  # one search spawn a round
        "job_server:mcp_tool_call_error_ratio:rate5m": {server: FAILED_CALLS / CALLS, paged: 0.0},
        "job:mcp_tool_search_call_top5_ratio:rate1h": {job: FOUND_SHARE},
        "job:mcp_tool_search_call_top5_ratio:rate6h": {job: FOUND_SHARE},
    }
    # Increases are extrapolated to the window, so they exceed the measured round's count a little;
    # the warm-up round (counted in the first sample) must not be in them.
    at_least: dict[str, dict[Labels, int]] = {
        "job:mcp_tool_search_searches:increase15m": {job: HITS + MISSES},
        "job_server:mcp_tool_calls:increase5m": {server: CALLS, paged: PAGED_CALLS},
        "job:mcp_tool_search_searched_calls:increase1h": {job: SEARCH_SPAWN_CALLS},
    }
    rules = {rule["record"]: rule["expr"] for rule in load_rules() if "record" in rule}
    for name, values in exact.items():
        expected = {labels: _approx(value) for labels, value in values.items()}
        assert api.query(rules[name]) == expected, name
        # The rule itself is loaded and evaluated to the same value (within a few evaluations).
        _wait_for(f"recorded {name}", SCRAPED_S, partial(_query_is, api, name, expected))
    for name, counts in at_least.items():
        got = api.query(rules[name])
        assert set(got) == set(counts), (name, got)
        assert all(count <= got[labels] < ROUNDS * count for labels, count in counts.items()), (name, got)
        _wait_for(f"recorded {name}", SCRAPED_S, partial(_labels_are, api, name, set(counts)))


def _query_is(api: PrometheusAPI, expr: str, expected: dict[Labels, Any]) -> bool:
    return api.query(expr) == expected


def _labels_are(api: PrometheusAPI, expr: str, expected: set[Labels]) -> bool:
    return set(api.query(expr)) == expected


def test_miss_and_call_error_alerts_go_pending_and_deliberate_lexical_ranking_does_not(scenario: Scenario) -> None:
    api = scenario.prometheus

    def pending() -> dict[str, dict[str, Any]]:
        alerts = api.get("/api/v1/alerts")["alerts"]
        return {alert["labels"]["alertname"]: alert for alert in alerts}

    expected = {"OrchestratorToolSearchMissRateHigh", "OrchestratorToolCallErrorRatioHigh"}
    alerts = _wait_for("alerts pending", SCRAPED_S, lambda: (found := pending()) and expected <= set(found) and found)
    # Lexical ranking is deliberate: no fallback is counted, so nothing about hybrid ranking alerts.
    assert set(alerts) == expected
    miss, calls = alerts["OrchestratorToolSearchMissRateHigh"], alerts["OrchestratorToolCallErrorRatioHigh"]
    assert miss["state"] == calls["state"] == "pending"  # `for:` holds them (30 and 10 minutes)
    assert miss["labels"] == {"alertname": miss["labels"]["alertname"], "job": JOB, "severity": "warning"}
    assert float(miss["value"]) == _approx(MISSES / (HITS + MISSES))
    assert miss["annotations"]["summary"] == f"Tool search misses 40% of searches ({JOB})"
    assert calls["labels"]["server"] == SERVER and float(calls["value"]) == _approx(FAILED_CALLS / CALLS)
    assert calls["annotations"]["summary"] == f"40% of tool calls to server {SERVER} fail ({JOB})"


def test_lexical_ranking_asked_for_counts_no_search_as_a_fallback(scenario: Scenario) -> None:
    api = scenario.prometheus
    assert api.query('sum by (ranking, fallback) (mcp_tool_search_invocations_total{outcome=~"hit|miss"} > 0)') == {
        _labels(ranking="lexical"): ROUNDS * (HITS + MISSES)
    }
    rules = {rule["record"]: rule["expr"] for rule in load_rules() if "record" in rule}
    assert api.query(rules["job:mcp_tool_search_fallback_ratio:rate15m"]) == {_labels(job=JOB): _approx(0.0)}
    assert api.query(rules["job_fallback:mcp_tool_search_fallback_ratio:rate15m"]) == {}
    panels = _panel_results(api)
    assert panels["Searches answered lexically instead of hybrid"]["A"] == {frozenset(): _approx(0.0)}
    assert panels["Searches answered lexically, by fallback reason"]["A"] == {}
    for ref in ("A", "B"):  # p50 and p95
        latency = panels["Search latency by ranking"][ref]
        assert set(latency) == {_labels(ranking="lexical")}
        assert all(0 < value < math.inf for value in latency.values())


# --------------------------------------------------------------------------- the dashboard


def _panel_results(api: PrometheusAPI) -> dict[str, dict[str, dict[Labels, float]]]:
    """{panel title: {refId: result}} for every dashboard query; each must run without error."""
    results: dict[str, dict[str, dict[Labels, float]]] = {}
    for title, ref, expr in dashboard_expressions():
        results.setdefault(title, {})[ref] = api.query(expr)
    return results


def _actions(session: dict[str, Any]) -> dict[str, int]:
    """A session's counts as `orchestrator_session_actions_total` labels them."""
    hits = session["searches"] - session["misses"]
    return {"hit": hits, "miss": session["misses"], "expand": session["expands"], "call": session["calls"]}


def _scraped(url: str, name: str) -> dict[str, float]:
    """{server: value} of one gauge, read straight from the gateway's endpoint."""
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        sample.labels["server"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_every_dashboard_panel_shows_the_measured_traffic(scenario: Scenario) -> None:
    api, measured = scenario.prometheus, scenario.measured
    panels = _panel_results(api)
    search_spawn, full_spawn = measured.spawns[SEARCH_AGENT], measured.spawns[FULL_AGENT]
    by_spawn = {
        _labels(agent=SEARCH_AGENT, mode="search"): search_spawn,
        _labels(agent=FULL_AGENT, mode="full"): full_spawn,
    }
    sent = {labels: _approx(stats["tokens_sent"]) for labels, stats in by_spawn.items()}
    saved = {labels: _approx(max(0, stats["tokens_saved"])) for labels, stats in by_spawn.items()}
    tokens = _scraped(scenario.metrics_url, "mcp_catalog_tokens")
    nothing = Labels()
    exact: dict[str, dict[str, dict[Labels, Any]]] = {
        "Miss rate": {"A": {nothing: _approx(MISSES / (HITS + MISSES))}},
        "Expands per search-mode spawn": {"A": {nothing: _approx(EXPANDS)}},
        "Tools returned per search": {"A": {nothing: _approx(measured.tools_returned / (HITS + MISSES))}},
        "Schemas per expand_tools call": {"A": {nothing: _approx(1.0)}},
        "Tokens sent per spawn by agent and mode": {"A": sent},
        "Tokens saved per spawn by agent and mode": {"A": saved},
        "Tokens per spawn over the time range": {"A": sent, "B": saved},
        "Call error ratio by server": {
            "A": {_labels(server=SERVER): _approx(FAILED_CALLS / CALLS), _labels(server=PAGED): 0.0}
        },
        "Catalog tools by server": {"A": {_labels(server=SERVER): BASIC_TOOLS, _labels(server=PAGED): PAGED_TOOLS}},
        "Catalog tokens by server": {"A": {_labels(server=name): value for name, value in tokens.items()}},
        "Server states": {"A": {_labels(server=SERVER, state="ready"): 1, _labels(server=PAGED, state="ready"): 1}},
        "Tokens per session by agent and mode": {
            "A": {labels: _approx(stats["session"]["tokens"]) for labels, stats in by_spawn.items()},
            "B": {labels: _approx(stats["session"]["counterfactual_tokens"]) for labels, stats in by_spawn.items()},
        },
        "Tokens saved per session by agent and mode": {
            "A": {labels: _approx(stats["session"]["saved_tokens"]) for labels, stats in by_spawn.items()}
        },
        "Rounds per session by agent and mode": {
            "A": {labels: _approx(stats["session"]["rounds"]) for labels, stats in by_spawn.items()}
        },
        "Search-mode calls found by the latest search (live hit@5 and hit@1)": {
            "A": {nothing: _approx(FOUND_SHARE)},
            "B": {nothing: _approx(FOUND_SHARE)},
        },
        "Searches, expands and calls per session": {
            "A": {
                labels | {("action", action)}: _approx(count)
                for labels, stats in by_spawn.items()
                for action, count in _actions(stats["session"]).items()
            }
        },
    }
    # Rates and extrapolated increases: the right series, each above zero.
    label_sets = {
        "Searches": {nothing},
        "Searches, misses and expands per second": {_labels(outcome=o) for o in ("hit", "miss", "expand")},
        "Spawns per second by agent and mode": set(by_spawn),
        "Tokens saved over the time range": {_labels(agent=SEARCH_AGENT), _labels(agent=FULL_AGENT)},
        "Tool calls per second by server and result": {
            _labels(server=SERVER, result="ok"),
            _labels(server=SERVER, result="tool_error"),
            _labels(server=PAGED, result="ok"),
        },
        "tools/call duration by server (p95)": {_labels(server=SERVER), _labels(server=PAGED)},
        "Finished sessions by agent and mode": set(by_spawn),
        "Search-mode calls by the called tool's rank": {_labels(rank="1"), _labels(rank="not_found")},
    }
    fallback_panels = {  # checked in the fallback test above
        "Searches answered lexically instead of hybrid",
        "Searches answered lexically, by fallback reason",
        "Search latency by ranking",
    }
    assert {panel["title"] for panel in dashboard_panels()} == set(exact) | set(label_sets) | fallback_panels
    assert set(tokens) == {SERVER, PAGED} and all(value > 0 for value in tokens.values())
    # The catalog is large enough that search mode saves tokens (and full mode saves none).
    assert search_spawn["tokens_saved"] > 0 and full_spawn["tokens_saved"] == 0
    for title, refs in exact.items():
        assert panels[title] == refs, title
    for title, labels in label_sets.items():
        result = panels[title]["A"]
        assert set(result) == labels, (title, result)
        if title == "Tokens saved over the time range":  # full mode saves nothing
            assert result[_labels(agent=FULL_AGENT)] == 0 and result[_labels(agent=SEARCH_AGENT)] > 0
        else:
            assert all(0 < value < math.inf for value in result.values()), (title, result)
    assert HITS + MISSES <= panels["Searches"]["A"][nothing] < ROUNDS * (HITS + MISSES)


# --------------------------------------------------------------------------- sessions


def test_each_finished_spawn_session_is_exported_by_agent_and_mode(scenario: Scenario) -> None:
    api, warm_up, measured = scenario.prometheus, scenario.warm_up, scenario.measured
    search, full = measured.spawns[SEARCH_AGENT]["session"], measured.spawns[FULL_AGENT]["session"]
    # The same script each round gives the same sessions: what makes the rates below exact.
    assert {agent: stats["session"] for agent, stats in warm_up.spawns.items()} == {
        agent: stats["session"] for agent, stats in measured.spawns.items()
    }
    calls = OK_CALLS_PER_SPAWN + FAILED_CALLS_PER_SPAWN + PAGED_CALLS_PER_SPAWN
    assert (search["rounds"], search["expands"], search["calls"]) == (SEARCH_SESSION_ROUNDS, EXPANDS, calls)
    assert (full["rounds"], full["expands"], full["calls"]) == (FULL_SESSION_ROUNDS, 0, calls)
    # Full mode would have skipped the expand round; search mode would have found echo, fail and tool_000.
    assert search["full_mode"]["rounds"] == SEARCH_SESSION_ROUNDS - 1
    assert full["search_mode"]["rounds"] == FULL_SESSION_ROUNDS + 2 * 2  # a search and an expand round each
    searcher, fuller = _labels(agent=SEARCH_AGENT, mode="search"), _labels(agent=FULL_AGENT, mode="full")
    sessions = {searcher: search, fuller: full}
    assert api.query("sum by (agent, mode) (orchestrator_session_rounds_count)") == {searcher: ROUNDS, fuller: ROUNDS}
    for metric, key in (
        ("orchestrator_session_rounds_sum", "rounds"),
        ("orchestrator_session_tokens_sent_sum", "tokens"),
        ("orchestrator_session_tokens_counterfactual_sum", "counterfactual_tokens"),
    ):
        expected = {labels: ROUNDS * session[key] for labels, session in sessions.items()}
        assert api.query(f"sum by (agent, mode) ({metric})") == expected, metric
    assert api.query("sum by (agent, mode, action) (orchestrator_session_actions_total)") == {
        labels | {("action", action)}: ROUNDS * count
        for labels, session in sessions.items()
        for action, count in _actions(session).items()
    }
    # No series of the new instruments with an empty label.
    for labels in ('agent=""', 'mode=""'):
        assert api.query(f'{{__name__=~"orchestrator_session_.+", {labels}}}') == {}, labels
    assert api.query('orchestrator_session_actions_total{action=""}') == {}
    assert api.query('mcp_server_state{server=""} or mcp_server_state{state=""}') == {}


def test_session_recording_rules_give_the_measured_sessions(scenario: Scenario) -> None:
    api, measured = scenario.prometheus, scenario.measured
    sessions = {
        _labels(job=JOB, agent=SEARCH_AGENT, mode="search"): measured.spawns[SEARCH_AGENT]["session"],
        _labels(job=JOB, agent=FULL_AGENT, mode="full"): measured.spawns[FULL_AGENT]["session"],
    }
    rules = {rule["record"]: rule["expr"] for rule in load_rules() if "record" in rule}
    for name, key in (
        ("job_agent_mode:orchestrator_session_rounds:mean1h", "rounds"),
        ("job_agent_mode:orchestrator_session_expands:mean1h", "expands"),
        ("job_agent_mode:orchestrator_session_tokens_sent:mean1h", "tokens"),
        ("job_agent_mode:orchestrator_session_tokens_counterfactual:mean1h", "counterfactual_tokens"),
        ("job_agent_mode:orchestrator_session_tokens_saved:mean1h", "saved_tokens"),
    ):
        expected = {labels: _approx(session[key]) for labels, session in sessions.items()}
        assert api.query(rules[name]) == expected, name
        _wait_for(f"recorded {name}", SCRAPED_S, partial(_query_is, api, name, expected))
    # An increase is extrapolated to the window: one measured session each, a little more, never two.
    counted = api.query(rules["job_agent_mode:orchestrator_sessions:increase1h"])
    assert set(counted) == set(sessions) and all(1 <= value < ROUNDS for value in counted.values()), counted


def test_tune_reads_each_profiles_sessions_back_from_prometheus(scenario: Scenario) -> None:
    measured = scenario.measured
    done = subprocess.run(
        [
            ORCHESTRATOR,
            "--config",
            str(scenario.config),
            "tune",
            "--prometheus",
            scenario.prometheus.base,
            "--window",
            "1h",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=SERVE_START_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    agents = {item["agent"]: item for item in report["agents"]}
    assert set(agents) == {SEARCH_AGENT, FULL_AGENT}
    for agent, mode in ((SEARCH_AGENT, "search"), (FULL_AGENT, "full")):
        session = measured.spawns[agent]["session"]
        figures = agents[agent]["by_mode"][mode]
        assert list(agents[agent]["by_mode"]) == [mode]
        assert figures["rounds"] == _approx(session["rounds"]) and figures["expands"] == _approx(session["expands"])
        assert figures["tokens"] == _approx(session["tokens"])
        assert figures["other_mode_tokens"] == _approx(session["counterfactual_tokens"])
        # Today's catalog, read from the configured servers: every tool, as the full-mode spawn was sent.
        assert agents[agent]["catalog_tokens"] == measured.spawns[FULL_AGENT]["tokens_sent"]
        assert agents[agent]["recommended_threshold"] is None  # one measured session each: too few
    assert report["message"].startswith("too little data: ")
