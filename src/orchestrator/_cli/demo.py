"""`orchestrator demo`: the whole story on the configured servers, end to end.

connect -> catalog -> plan a spawn in both modes (token difference) -> search -> expand -> call a tool
through the same meta-tools a spawned agent uses -> read the metrics back from a Prometheus endpoint.
Each step prints what it did; the exit code is 1 when a step could not be shown on real servers.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import EXIT_FAILED, console, loaded_config, print_table, progress
from .metrics import print_summary, scrape, summarize

if TYPE_CHECKING:
    from .._config import Settings
    from .._meta_tools import MetaTools
    from .._telemetry import Telemetry
    from ..protocols.mcp._catalog import ToolCatalog
    from ..protocols.mcp._manager import MCPManager
    from ..search._engine import ToolSearchEngine

__all__ = ["register"]

DEMO_TASK = "What time is it in Tokyo right now, and what changed in this repository lately?"
DEMO_QUERY = "current time in a timezone"
"""A request in the user's words; the best hit should be the time server's get_current_time."""
DEMO_CALL_ARGUMENTS: dict[str, Any] = {"timezone": "Asia/Tokyo"}


def _heading(step: int, text: str) -> None:
    console.print(f"\n[bold]{step}. {text}[/bold]")


async def _run(settings: Settings, query: str) -> int:
    """Every step under one telemetry session whose Prometheus endpoint the last step scrapes."""
    # Imported here, not at module level: the mcp SDK, the search stack and OpenTelemetry cost about a
    # second of start-up, which `orchestrator --help` and `config` commands must not pay.
    from .._config import TelemetrySettings
    from .._telemetry import telemetry_session

    telemetry_config = TelemetrySettings(exporter="prometheus", prometheus={"host": "127.0.0.1", "port": 0})
    with telemetry_session(telemetry_config) as telemetry:
        failures = await _on_servers(settings, query, telemetry)
        if failures is None:
            return EXIT_FAILED

        _heading(7, "metrics, scraped from the Prometheus endpoint the demo served")
        url = telemetry.prometheus_url
        assert url is not None, "a prometheus exporter serves its endpoint or setup raised"
        print_summary(summarize(await scrape(url), url))
    return EXIT_FAILED if failures else 0


async def _on_servers(settings: Settings, query: str, telemetry: Telemetry) -> int | None:
    """Steps 1-6, on live connections: how many failed, or None when the demo cannot go on."""
    from .._meta_tools import MetaTools
    from .._planning import ProfileFilter
    from ..protocols.mcp._manager import MCPManager
    from ..search._engine import ToolSearchEngine

    _heading(1, "connect every configured server (mcp SDK; stdio, streamable HTTP, SSE)")
    async with contextlib.AsyncExitStack() as stack:
        with progress("connecting MCP servers..."):  # the spinner covers the connecting only
            manager = await stack.enter_async_context(MCPManager(settings, telemetry=telemetry))
        failures = _show_servers(manager)
        if failures is None:
            return None

        catalog = manager.catalog()
        _heading(2, f"normalized catalog: {len(catalog)} tools, version {catalog.version}")
        print_table(["qualified name", "server", "summary"], [(e.name, e.server, e.summary) for e in catalog])

        _heading(3, "plan a spawn of agent 'default' in both modes")
        _show_plans(settings, catalog, telemetry)

        profile = settings.agent("default")
        engine = ToolSearchEngine(lambda: catalog, settings.mcp.tool_search, telemetry=telemetry)
        meta = MetaTools(
            engine,
            manager,
            visibility=ProfileFilter.from_profile(profile),
            schema_limits=manager.schema_limits,
        )

        _heading(4, f"tool_search({query!r})")
        top = _show_search(meta, engine, query)
        if top is None:
            return None

        _heading(5, f"expand_tools([{top!r}])")
        expanded = meta.expand_tools([top]).structured_content or {}
        for tool in expanded.get("tools", []):
            console.print(json.dumps(tool, indent=2), markup=False)

        _heading(6, f"call_tool({top!r}, {json.dumps(DEMO_CALL_ARGUMENTS)}) through the manager")
        failures += await _show_calls(meta, top)
        meta.tool_search("zzqx unmatched gibberish")  # a miss, to show it counted
        return failures


def _show_servers(manager: MCPManager) -> int | None:
    """Step 1's table: how many servers failed, or None when none is ready."""
    from ..protocols.mcp._manager import ServerState

    statuses = manager.status()
    print_table(
        ["server", "transport", "state", "tools", "error"],
        [(s.name, s.transport, s.state.value, s.tools, s.error or "") for s in statuses],
    )
    if not any(s.state is ServerState.READY for s in statuses):
        console.print("no server is ready: nothing more to show")
        return None
    return sum(1 for s in statuses if s.state is ServerState.FAILED)


def _show_plans(settings: Settings, catalog: ToolCatalog, telemetry: Telemetry) -> None:
    """Step 3: the configured plan next to one forced into search mode, and the prompt section it sends."""
    from .._planning import SpawnPlanner

    configured = SpawnPlanner(settings, telemetry=telemetry).plan(DEMO_TASK, "default", catalog)
    search_settings = _with_tool_search(settings, threshold_tokens=0)
    forced = SpawnPlanner(search_settings, telemetry=telemetry).plan(DEMO_TASK, "default", catalog)
    threshold = settings.mcp.tool_search.threshold_tokens
    print_table(
        ["plan", "mode", "tokens sent", "full catalog", "saved", "directory", "fingerprint"],
        [
            (
                f"threshold {threshold}",
                configured.mode,
                configured.prompt_tokens,
                configured.full_tokens,
                configured.tokens_saved,
                configured.directory_level,
                configured.fingerprint[:12],
            ),
            (
                "threshold 0 (forced search)",
                forced.mode,
                forced.prompt_tokens,
                forced.full_tokens,
                forced.tokens_saved,
                forced.directory_level,
                forced.fingerprint[:12],
            ),
        ],
    )
    console.print(f"decision: {configured.reason}")
    console.print("search-mode prompt section the agent sees:")
    console.print(forced.prompt, markup=False)


def _show_search(meta: MetaTools, engine: ToolSearchEngine, query: str) -> str | None:
    """Step 4's hits: the best one's name, or None on a miss."""
    found = meta.tool_search(query).structured_content or {}
    hits = found.get("hits", [])
    print_table(
        ["#", "name", "score", "summary"],
        [(i + 1, h["name"], f"{h['score']:.2f}", h["summary"]) for i, h in enumerate(hits)],
    )
    console.print(f"outcome: {found.get('outcome')} ({engine.ranking_used} ranking)")
    if not hits:
        return None
    top: str = hits[0]["name"]
    return top


async def _show_calls(meta: MetaTools, top: str) -> int:
    """Step 6: a good call (1 when it failed, else 0), then one with wrong arguments and its corrective error."""
    result = await meta.call_tool(top, DEMO_CALL_ARGUMENTS)
    text = " ".join(getattr(block, "text", "") for block in result.content).strip()
    console.print(("error: " if result.is_error else "result: ") + text, markup=False)
    bad = await meta.call_tool(top, {"timezone": 42})
    first_line = " ".join(getattr(block, "text", "") for block in bad.content).strip().splitlines()[0]
    console.print(f"wrong arguments come back as a corrective error: {first_line}", markup=False)
    return 1 if result.is_error else 0


def _with_tool_search(settings: Settings, **update: Any) -> Settings:
    tool_search = settings.mcp.tool_search.model_copy(update=update)
    return settings.model_copy(update={"mcp": settings.mcp.model_copy(update={"tool_search": tool_search})})


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        ctx: typer.Context,
        query: Annotated[str, typer.Option("--query", "-q", help="What to search for.")] = DEMO_QUERY,
    ) -> None:
        """Run the main job: connect, plan both modes, search, expand, call a tool, show the metrics."""
        import anyio

        loaded = loaded_config(ctx)
        console.print(f"config: {loaded.path or 'defaults'} ({loaded.path_reason})")
        code = anyio.run(_run, loaded.settings, query)
        raise typer.Exit(code)
