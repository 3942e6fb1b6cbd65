"""Gateway under load: N concurrent agents doing tool_search + expand_tools + call_tool over streamable HTTP.

    .venv/bin/python benchmarks/gateway_load.py [--seconds S] [--warmup S] [--clients 1,10,50] [--full]
                                                [--workers 0,4]

The server: benchmarks/catalog_server.py over stdio, offering the 590 real tool definitions of
../shared/data/catalogs (each call answers at once with a short text), behind one `MCPManager`. In front
of it, one gateway per `--workers` value, all in this process and on the same manager, each serving
streamable HTTP on 127.0.0.1 (a free port) with the default profile, which plans search mode for 590
tools. `workers 0` runs searches, expands, call checks and history writes inline on the event loop (the
gateway before its worker pool: the baseline); `workers 4` (the default) runs them in the pool. Ranking
is hybrid (the `semantic` extra, one embedding runtime shared by the gateways), and measuring starts only
after each gateway's warm-up has embedded the catalog (vectors cached on disk after the first run). Task
history is kept in files, as `orchestrator serve` keeps it, so each successful call writes one.

The agents: for each N and each gateway (the order alternates per N), N spawns are opened on that
gateway (each its own endpoint and token) and a separate client process (this file with `--client`, so
client CPU is not spent on the gateway's event loop) connects N MCP clients (the SDK's streamable HTTP
client), one per spawn. Each loops until the time is up: `tool_search` with a query of
../shared/data/retrieval/mcp-catalogs (each client starts at its own place in a seeded shuffle),
`expand_tools` of the top EXPAND_HITS hits, and `call_tool` of the first expanded tool whose input schema
a minimal argument object satisfies (the time server's `get_current_time` when none does, or when the
search missed).

Figures per N after a --warmup phase (and, once per gateway, an unmeasured run), over --seconds: p50/p99 of each operation as the client sees it,
and throughput (operations completed per second, all three kinds). "lexical" counts searches that the
gateway answered lexically although hybrid ranking was asked for (slow or unavailable query embedding);
"found" is the share of calls that went to a tool the search found rather than the fallback.

Targets (issue 12), at 50 clients, both gateways measured in the same run: the pool's search p99 <= 3x
its search p50 (no head-of-line blocking), and its throughput no lower than the inline gateway's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _common import (
    CATALOGS,
    RETRIEVAL,
    add_results_flag,
    percentile,
    report_targets,
    run_recorded,
    table,
    verdict,
)
from orchestrator import (
    EmbeddingRuntime,
    Gateway,
    GatewaySettings,
    MCPManager,
    MCPSettings,
    ServerConfig,
    Settings,
    TaskHistory,
    Telemetry,
)
from orchestrator._telemetry import SEARCH_INVOCATIONS

SCRIPT = Path(__file__).resolve()
HERE = SCRIPT.parent
QUERIES = RETRIEVAL / "mcp-catalogs" / "queries.jsonl"
SERVER = "catalog"
AGENT = "default"
CLIENT_COUNTS = (1, 10, 50)
FULL_COUNTS = (*CLIENT_COUNTS, 100)
EXPAND_HITS = 3
# An agent expands the few hits it may use (the top three of the default eight).
FALLBACK_TOOL = "time__get_current_time"
FALLBACK_ARGUMENTS = {"timezone": "UTC"}
# Called when no expanded tool takes minimal arguments: one real tool whose schema is known.
TARGET_TAIL_RATIO = 3.0
TARGET_CLIENTS = 50
SEED = 12
ERROR_SAMPLES = 3
# Error results quoted per run, so a failing run says what failed.
CLIENT_TIMEOUT_S = 120.0
# One MCP request may wait this long under load before the client gives up (an error, counted).
WARM_TIMEOUT_S = 600.0
PROCESS_WARMUP_CLIENTS = 10
PROCESS_WARMUP_S = 10.0
# One unmeasured run per gateway first: the first measured run of a process came out slower than the
# same run repeated (onnxruntime's arenas, the analyzer's word cache, lazily imported code).
# Embedding 590 tools with an empty cache takes seconds to a minute on two busy cores.


# ---------------------------------------------------------------------- the gateway side


@dataclass
class Figures:
    """One run of N clients against one gateway."""

    workers: int
    clients: int
    search: list[float]
    expand: list[float]
    call: list[float]
    ops_per_s: float
    errors: int
    lexical: int
    found_calls: int

    def row(self) -> list[str]:
        def pair(values: list[float]) -> str:
            if not values:
                return "-"
            return f"{statistics.median(values) * 1000:.1f} / {percentile(values, 0.99) * 1000:.1f}"

        return [
            mode_name(self.workers),
            str(self.clients),
            pair(self.search),
            pair(self.expand),
            pair(self.call),
            f"{self.ops_per_s:.1f}",
            str(self.errors),
            str(self.lexical),
            f"{self.found_calls / max(1, len(self.call)):.0%}",
        ]

    @property
    def search_p50(self) -> float:
        return statistics.median(self.search)

    @property
    def search_p99(self) -> float:
        return percentile(self.search, 0.99)


def mode_name(workers: int) -> str:
    return "inline (workers 0)" if workers == 0 else f"pool (workers {workers})"


@dataclass
class Mode:
    """One gateway of the run and what it records."""

    workers: int
    gateway: Gateway
    reader: InMemoryMetricReader


def bench_settings(folder: Path, workers: int) -> Settings:
    """The catalog server, tool lists and task history under `folder`; vectors in the default vector
    cache (`<user cache dir>/orchestrator/embeddings`), so only the first run ever embeds the catalog."""
    server = ServerConfig(
        command=sys.executable,
        args=[str(HERE / "catalog_server.py"), "--catalogs", str(CATALOGS)],
        startup_timeout_s=60,
    )
    vectors = MCPSettings().embedding_cache_dir()
    no_file = folder / "empty.yaml"  # settings from here only, not from a ./bernstein.yaml
    no_file.touch()
    return Settings(
        no_file,
        mcp={"servers": {SERVER: server}, "cache_dir": folder, "embedding": {"cache_dir": vectors}},
        gateway=GatewaySettings(workers=workers),
    )


def lexical_searches(reader: InMemoryMetricReader) -> int:
    """Searches answered lexically with a fallback reason, so far (the search counter's data points)."""
    data = reader.get_metrics_data()
    total = 0
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != SEARCH_INVOCATIONS:
                    continue
                for point in metric.data.data_points:
                    if point.attributes and point.attributes.get("fallback"):
                        total += int(point.value)
    return total


async def wait_until_warm(gateway: Gateway) -> None:
    """Run the gateway's warm-up until the default profile's catalog vectors are embedded."""
    with anyio.fail_after(WARM_TIMEOUT_S):
        warmed = await anyio.to_thread.run_sync(gateway.warm_search, None)
    if warmed != 1:
        raise SystemExit("gateway_load: hybrid ranking is not in effect (install the `semantic` extra)")


async def run_clients(gateway: Gateway, count: int, args: argparse.Namespace, fallback: str) -> dict[str, Any]:
    """Open `count` spawns, drive them from a client process, close them; the client's JSON report."""
    handles = [await gateway.run_sync(gateway.open_spawn, f"load test agent {n}", AGENT) for n in range(count)]
    try:
        if handles[0].plan.mode != "search":
            raise SystemExit("gateway_load: the default profile must plan search mode for 590 tools")
        spec = {
            "endpoints": [[handle.url, handle.token] for handle in handles],
            "seconds": args.seconds,
            "warmup": args.warmup,
            "queries": str(QUERIES),
            "fallback": fallback,
            "seed": SEED + count,
        }
        done = await anyio.run_process(
            [sys.executable, str(SCRIPT), "--client"], input=json.dumps(spec).encode(), stderr=None
        )
        return dict(json.loads(done.stdout))
    finally:
        for handle in handles:
            gateway.close_spawn(handle.id)


async def measure(args: argparse.Namespace, counts: Sequence[int], workers: Sequence[int]) -> list[Figures]:
    """Every count against every gateway of the run, in turn (the order alternates per count, so a slow
    spell on the shared machine does not always fall on the same gateway)."""
    figures = []
    with tempfile.TemporaryDirectory(prefix="gateway-load-") as name:
        folder = Path(name)
        settings = bench_settings(folder, workers[0])
        embeddings = EmbeddingRuntime.from_settings(settings)  # one model for every gateway of the run
        async with MCPManager(settings) as manager, contextlib.AsyncExitStack() as stack:
            modes = []
            for size in workers:
                reader = InMemoryMetricReader()
                gateway = Gateway(
                    bench_settings(folder, size),
                    manager,
                    history=TaskHistory(folder / "tasks"),
                    telemetry=Telemetry(meter_provider=MeterProvider(metric_readers=[reader])),
                    embeddings=embeddings,
                )
                stack.callback(gateway.close)
                await stack.enter_async_context(gateway.running("127.0.0.1", 0))
                started = time.perf_counter()
                await wait_until_warm(gateway)
                print(
                    f"{mode_name(size)}: hybrid ranking ready after {time.perf_counter() - started:.1f} s", flush=True
                )
                modes.append(Mode(size, gateway, reader))
            catalog = manager.catalog()
            fallback = next(entry.name for entry in catalog if entry.tool == FALLBACK_TOOL)
            print(
                f"{len(catalog)} tools ({CATALOGS}); {args.warmup:g} s warm-up, {args.seconds:g} s per run", flush=True
            )
            first = argparse.Namespace(seconds=PROCESS_WARMUP_S, warmup=0.0)
            for mode in modes:  # unmeasured: the first runs of a process are slower (allocator, caches)
                await run_clients(mode.gateway, PROCESS_WARMUP_CLIENTS, first, fallback)
            for turn, count in enumerate(counts):
                for mode in modes[::-1] if turn % 2 else modes:
                    before = lexical_searches(mode.reader)
                    report = await run_clients(mode.gateway, count, args, fallback)
                    result = Figures(
                        mode.workers,
                        count,
                        report["search"],
                        report["expand"],
                        report["call"],
                        report["ops"] / report["window"],
                        report["errors"],
                        lexical_searches(mode.reader) - before,
                        report["found_calls"],
                    )
                    figures.append(result)
                    for sample in report["error_samples"]:
                        print(f"    error: {sample}", flush=True)
                    print(f"  {mode_name(mode.workers)}, {count} clients: {result.ops_per_s:.1f} ops/s", flush=True)
        embeddings.close()
    return figures


# ---------------------------------------------------------------------- the client process


def minimal_arguments(schema: Any) -> Any:
    """The smallest value a schema plausibly accepts: required properties only, first enum value, one item
    where an array needs items. The caller validates it (a pattern or format may still refuse it)."""
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return minimal_arguments(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        return {key: minimal_arguments(properties.get(key, {})) for key in schema.get("required") or ()}
    if kind == "array":
        return [minimal_arguments(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("integer", "number"):
        return max(1, schema.get("minimum", 1))
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x" * max(1, int(schema.get("minLength", 1)))


def callable_with(definition: dict[str, Any]) -> dict[str, Any] | None:
    """Minimal arguments for an expanded tool when its input schema accepts them, else None."""
    schema = definition.get("input_schema") or {}
    arguments = minimal_arguments(schema)
    try:
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
        ok = isinstance(arguments, dict) and validator.is_valid(arguments)
    except Exception:  # boundary: a schema jsonschema cannot read is skipped, not fatal
        return None
    return arguments if ok else None


class Run:
    """What the client process's agents share: the queries, the clock, and the latencies of the window."""

    def __init__(self, spec: dict[str, Any]) -> None:
        lines = Path(spec["queries"]).read_text(encoding="utf-8").splitlines()
        self.queries = [json.loads(line)["query"] for line in lines if line.strip()]
        random.Random(spec["seed"]).shuffle(self.queries)
        self.endpoints: list[list[str]] = spec["endpoints"]
        self.fallback: str = spec["fallback"]
        self.warmup: float = spec["warmup"]
        self.seconds: float = spec["seconds"]
        self.go = anyio.Event()
        self.connected = 0
        self.start = self.end = 0.0
        self.latencies: dict[str, list[float]] = {"search": [], "expand": [], "call": []}
        self.completed = 0
        self.errors = 0
        self.found_calls = 0
        """Calls of a tool the search found (the rest call the fallback)."""
        self.error_samples: list[str] = []

    def arrived(self) -> None:
        """One more agent connected; the last one starts everyone's clock."""
        self.connected += 1
        if self.connected == len(self.endpoints):
            self.start = time.perf_counter() + self.warmup
            self.end = self.start + self.seconds
            self.go.set()

    def add(self, kind: str, began: float, result: Any) -> None:
        """Latency of an operation that began in the window; throughput counts those that ended in it."""
        ended = time.perf_counter()
        if self.start <= began < self.end:
            self.latencies[kind].append(ended - began)
        if self.start <= ended < self.end:
            self.completed += 1
        if result.is_error:
            self.errors += 1
            if len(self.error_samples) < ERROR_SAMPLES:
                text = " ".join(getattr(block, "text", "") for block in result.content)
                self.error_samples.append(f"{kind}: {text[:300]}")

    def report(self) -> dict[str, Any]:
        return {
            **self.latencies,
            "ops": self.completed,
            "window": self.seconds,
            "errors": self.errors,
            "found_calls": self.found_calls,
            "error_samples": self.error_samples,
        }


async def agent(url: str, token: str, offset: int, run: Run) -> None:
    """One agent: search, expand the top hits, call one of them; until the window closes."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=CLIENT_TIMEOUT_S) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        run.arrived()
        await run.go.wait()
        turn = offset
        while time.perf_counter() < run.end:
            query = run.queries[turn % len(run.queries)]
            turn += 1
            began = time.perf_counter()
            result = await client.call_tool("tool_search", {"query": query})
            run.add("search", began, result)
            hits = (result.structured_content or {}).get("hits") or []
            name, arguments = run.fallback, dict(FALLBACK_ARGUMENTS)
            if hits:
                began = time.perf_counter()
                result = await client.call_tool("expand_tools", {"names": [hit["name"] for hit in hits[:EXPAND_HITS]]})
                run.add("expand", began, result)
                for definition in (result.structured_content or {}).get("tools") or []:
                    found = callable_with(definition)
                    if found is not None:
                        name, arguments = definition["name"], found
                        break
            began = time.perf_counter()
            result = await client.call_tool("call_tool", {"name": name, "arguments": arguments})
            run.add("call", began, result)
            if run.start <= began < run.end and name != run.fallback:
                run.found_calls += 1


async def client_main(spec: dict[str, Any]) -> dict[str, Any]:
    run = Run(spec)
    stride = max(1, len(run.queries) // len(run.endpoints))
    async with anyio.create_task_group() as tg:
        for index, (url, token) in enumerate(run.endpoints):
            tg.start_soon(agent, url, token, index * stride, run)
    return run.report()


# ---------------------------------------------------------------------- report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per run (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured time before each run (default 3)")
    parser.add_argument("--clients", help="comma-separated client counts (default 1,10,50)")
    parser.add_argument("--full", action="store_true", help="also 100 clients")
    parser.add_argument("--workers", default="0,4", help="gateway.workers of each gateway compared (default 0,4)")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)  # the client process
    add_results_flag(parser)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(anyio.run(client_main, json.load(sys.stdin))))
        return 0
    counts = _numbers(args.clients) if args.clients else FULL_COUNTS if args.full else CLIENT_COUNTS
    workers = _numbers(args.workers)
    figures = anyio.run(measure, args, counts, workers)
    print()
    header = ["gateway", "clients", "search p50/p99 ms", "expand p50/p99 ms", "call p50/p99 ms", "ops/s", "errors"]
    table([*header, "lexical", "found"], [r.row() for r in sorted(figures, key=lambda r: (r.clients, r.workers))])
    return report_targets(targets(figures))


def targets(figures: Sequence[Figures]) -> list[tuple[str, bool]]:
    """At TARGET_CLIENTS: the pool's search tail, and its throughput against the inline gateway's."""
    at = {r.workers: r for r in figures if r.clients == TARGET_CLIENTS}
    checks = []
    for size, r in sorted(at.items()):
        ratio = r.search_p99 / r.search_p50
        label = (
            f"{mode_name(size)}, {TARGET_CLIENTS} clients: search p99 {r.search_p99 * 1000:.1f} ms <= "
            f"{TARGET_TAIL_RATIO:g}x p50 {r.search_p50 * 1000:.1f} ms ({ratio:.1f}x)"
        )
        if size == 0 and len(at) > 1:
            print(f"\n(baseline) {label}: {verdict(ratio <= TARGET_TAIL_RATIO)}")
            continue
        checks.append((label, ratio <= TARGET_TAIL_RATIO))
        if size != 0 and 0 in at:
            base = at[0].ops_per_s
            checks.append(
                (
                    f"{mode_name(size)}, {TARGET_CLIENTS} clients: {r.ops_per_s:.1f} ops/s >= inline {base:.1f} ops/s",
                    r.ops_per_s >= base,
                )
            )
    checks += [(f"{mode_name(r.workers)}, {r.clients} clients: no errors ({r.errors})", r.errors == 0) for r in figures]
    return checks


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


if __name__ == "__main__":
    sys.exit(run_recorded(main))
