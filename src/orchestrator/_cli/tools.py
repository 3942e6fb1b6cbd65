"""`orchestrator tools list|search|expand|plan` and `orchestrator eval` (`tools audit|diff|approve` are in
`_tools_audit.py`).

Every command reads the catalog from the configured servers (started for the command and stopped after),
or from a snapshot with `--catalog PATH` (a folder of `<server>.json` tools/list results, or one JSON file
with `{server: [tools]}` or a list of tools that each carry `server`). `--json` prints one JSON document.
Exit 1 when a search or an eval query finds nothing (the output still prints).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import EXIT_FAILED, console, err_console, loaded_config, print_json, print_table, progress

# The catalog, search, planning and evaluation modules (and the mcp SDK, tokenizer and embedding stack
# behind them) are imported inside the commands: `orchestrator --help` and `config` must not pay for them.
if TYPE_CHECKING:
    from .._config import Settings
    from .._planning import ToolPlan
    from .._traces import Trace
    from ..protocols.mcp._catalog import ToolCatalog
    from ..search._embedding import EmbeddingRuntime
    from ..search._evaluation import EvalReport
    from ..search._evidence import TraceEvidence

__all__ = ["load_catalog", "register"]

CatalogOption = Annotated[
    Path | None,
    typer.Option(
        "--catalog",
        help="Snapshot to read instead of connecting to the servers: a folder of <server>.json, or one JSON file.",
        exists=True,
        dir_okay=True,
        file_okay=True,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


class Ranking(StrEnum):
    lexical = "lexical"
    hybrid = "hybrid"


RankingOption = Annotated[
    Ranking | None, typer.Option("--ranking", help="lexical or hybrid (default: mcp.tool_search.ranking).")
]


def load_catalog(settings: Settings, path: Path | None, *, quiet: bool = False) -> ToolCatalog:
    """The snapshot at `path`, or the live catalog of every enabled server (failures warned on stderr)."""
    if path is not None:
        from ..protocols.mcp._catalog import ToolCatalog

        return ToolCatalog.from_snapshot(path, description_limit=settings.mcp.max_description_chars)
    import anyio

    return anyio.run(_live_catalog, settings, quiet)


async def _live_catalog(settings: Settings, quiet: bool) -> ToolCatalog:
    from .._store import open_store
    from ..protocols.mcp._manager import MCPManager, ServerState

    enabled = sum(1 for config in settings.mcp.servers.values() if config.enabled)
    store = open_store(settings)
    try:
        with progress(f"Connecting to {enabled} MCP server{'s' if enabled != 1 else ''}…", enabled=not quiet):
            async with MCPManager(settings, store=store) as manager:
                for status in manager.status():
                    if status.state is not ServerState.READY and status.state is not ServerState.STOPPED:
                        err_console.print(
                            f"warning: server {status.name!r} is {status.state}: {status.error}", markup=False
                        )
                    if status.held_tools:
                        err_console.print(
                            f"warning: server {status.name!r}: {len(status.held_tools)} tool(s) held back "
                            "(orchestrator tools audit)",
                            markup=False,
                        )
                return manager.catalog()
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    tools_app = typer.Typer(help="List, search, expand and plan the tools agents are given.", no_args_is_help=True)
    tools_app.command("list")(tools_list)
    tools_app.command("search")(tools_search)
    tools_app.command("expand")(tools_expand)
    tools_app.command("plan")(tools_plan)
    from ._tools_audit import tools_approve, tools_audit, tools_diff

    tools_app.command("audit")(tools_audit)
    tools_app.command("diff")(tools_diff)
    tools_app.command("approve")(tools_approve)
    app.add_typer(tools_app, name="tools")
    app.command("eval")(eval_queries)


def tools_list(
    ctx: typer.Context,
    server: Annotated[str | None, typer.Option("--server", help="Only this server's tools.")] = None,
    catalog: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every tool: qualified name, server and one-line summary."""
    tools = load_catalog(loaded_config(ctx).settings, catalog, quiet=as_json)
    entries = [entry for entry in tools if server is None or server in entry.servers]
    rows = [{"name": e.name, "server": e.server, "tool": e.tool, "summary": e.summary} for e in entries]
    if as_json:
        print_json(rows)
        return
    print_table(("name", "server", "summary"), [(row["name"], row["server"], row["summary"]) for row in rows])
    err_console.print(f"{len(rows)} tools, catalog version {tools.version}", markup=False)


def tools_search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What the tool should do, in a few words (or an exact name).")],
    k: Annotated[int | None, typer.Option("-k", "--limit", min=1, help="Most hits (default: search_limit).")] = None,
    catalog: CatalogOption = None,
    ranking: RankingOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rank tools for a request, best first: name, server, score and summary (no schemas)."""
    from ..search._embedding import EmbeddingRuntime
    from ..search._engine import ToolSearchEngine

    settings = loaded_config(ctx).settings
    tools = load_catalog(settings, catalog, quiet=as_json)
    with EmbeddingRuntime.from_settings(settings) as embeddings:
        engine = ToolSearchEngine(tools, settings.mcp.tool_search, ranking=ranking, embeddings=embeddings)
        hits = engine.search(query, k)
    if as_json:
        print_json({"query": query, "outcome": "hit" if hits else "miss", "hits": [hit.to_dict() for hit in hits]})
    elif hits:
        print_table(
            ("#", "name", "score", "summary"),
            [(rank, hit.name, f"{hit.score:.2f}", hit.summary) for rank, hit in enumerate(hits, 1)],
        )
    else:
        err_console.print(f"no tool matches {query!r} (a miss)", markup=False)
    if not hits:
        raise typer.Exit(EXIT_FAILED)


def tools_expand(
    ctx: typer.Context,
    names: Annotated[list[str], typer.Argument(help="Qualified (or bare) tool names.")],
    catalog: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Full definitions (name, description, input schema), exactly as a model receives them."""
    from ..search._engine import ToolSearchEngine

    settings = loaded_config(ctx).settings
    engine = ToolSearchEngine(load_catalog(settings, catalog, quiet=as_json), settings.mcp.tool_search)
    definitions = engine.expand_tools(names)
    if as_json:
        print_json({"tools": definitions})
        return
    for definition in definitions:
        _print_definition(definition)


def tools_plan(
    ctx: typer.Context,
    catalog: CatalogOption = None,
    as_json: JsonOption = False,
    sweep: Annotated[
        bool,
        typer.Option("--sweep", help="Each profile's mode and tokens per spawn at a range of threshold_tokens."),
    ] = False,
    thresholds: Annotated[
        str | None,
        typer.Option("--thresholds", help=f"With --sweep: comma-separated values (default {_sweep_default()})."),
    ] = None,
) -> None:
    """What a spawn would be sent: full catalog or search mode, token counts, the prompt section."""
    from .._planning import SpawnPlanner

    settings = loaded_config(ctx).settings
    if thresholds is not None and not sweep:
        raise typer.BadParameter("only with --sweep", param_hint="--thresholds")
    if sweep:
        values = _parse_thresholds(thresholds) if thresholds is not None else list(SWEEP_THRESHOLDS)
        _print_sweep(plan_sweep(settings, load_catalog(settings, catalog, quiet=as_json), values), as_json)
        return
    tool_plan = SpawnPlanner(settings).plan_tools(
        load_catalog(settings, catalog, quiet=as_json), settings.mcp.tool_search
    )
    if as_json:
        print_json(tool_plan.to_dict())
        return
    _print_tool_plan(tool_plan)


def eval_queries(
    ctx: typer.Context,
    queries: Annotated[
        Path,
        typer.Argument(help="JSON lines, each with query and gold: a list of (server, tool) pairs.", exists=True),
    ],
    catalog: CatalogOption = None,
    k: Annotated[int, typer.Option("-k", min=1, help="Cut-off for hit@k and recall@k.")] = 5,
    ranking: RankingOption = None,
    traces: Annotated[
        Path | None,
        typer.Option(
            "--traces",
            help="Rank with these search traces (JSON lines, as `traces export` writes) applied, in a temporary "
            "store: the configured one is never read or written.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Ranking quality on a query set: hit@1, hit@k, recall@k and MRR (hit@k: any gold tool in the top k)."""
    from ..search._embedding import EmbeddingRuntime
    from ..search._engine import ToolSearchEngine
    from ..search._evaluation import evaluate, load_queries

    settings = loaded_config(ctx).settings
    query_list = load_queries(queries)
    learned = _read_learned(traces) if traces is not None else None
    tools = load_catalog(settings, catalog, quiet=as_json)
    with EmbeddingRuntime.from_settings(settings) as embeddings:
        evidence = _evidence(settings, learned, embeddings, ranking) if learned is not None else None
        engine = ToolSearchEngine(
            tools, settings.mcp.tool_search, ranking=ranking, embeddings=embeddings, evidence=evidence
        )
        with progress(f"Running {len(query_list)} queries…", enabled=not as_json):
            engine.warm()  # hybrid: embed uncached tools first, so every query is ranked the way it reports
            if evidence is not None:
                evidence.warm()
            report = evaluate(engine.search, tools, query_list, k)
    if as_json:
        print_json({**report.to_dict(), "ranking": engine.ranking_used})
    else:
        _print_report(report, k)


def _read_learned(path: Path) -> list[Trace]:
    from .traces import read_traces

    return read_traces(path)[0]


def _evidence(
    settings: Settings, learned: list[Trace], embeddings: EmbeddingRuntime, ranking: Ranking | None
) -> TraceEvidence:
    """Evidence from `learned` held in a temporary in-memory store (redacted and bounded as a gateway's)."""
    from .._store import MemoryStore
    from .._traces import TraceStore
    from ..search._evidence import TraceEvidence, trace_vectors

    learning = settings.mcp.tool_search.traces
    store = TraceStore(MemoryStore(), learning)
    store.record(learned)
    hybrid = (ranking or settings.mcp.tool_search.ranking) == "hybrid"
    return TraceEvidence(store.load, learning, vectors=(lambda: trace_vectors(embeddings)) if hybrid else None)


SWEEP_THRESHOLDS = (0, 1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 64000, 128000)
"""`tools plan --sweep` by default: around the default threshold_tokens (6000), up to catalogs of hundreds
of tools; the mode flips where a profile's catalog cost crosses the threshold."""


def _sweep_default() -> str:
    return ",".join(str(value) for value in SWEEP_THRESHOLDS)


def _parse_thresholds(text: str) -> list[int]:
    """`"0,2000, 8000"` -> [0, 2000, 8000] (sorted, each once); a bad item is a usage error naming it."""
    values: set[int] = set()
    for item in text.split(","):
        item = item.strip().replace("_", "")
        if not item.isdigit():
            raise typer.BadParameter(f"{item!r} is not a whole number of tokens >= 0", param_hint="--thresholds")
        values.add(int(item))
    return sorted(values)


def plan_sweep(settings: Settings, catalog: ToolCatalog, thresholds: list[int]) -> dict[str, Any]:
    """Per agent profile (`default` and each of `agents`): its full catalog tokens, its current
    threshold_tokens, and the mode and tokens per spawn `plan_tools` gives at each threshold."""
    from .._planning import ProfileFilter, SpawnPlanner, effective_tool_search

    planner = SpawnPlanner(settings)
    agents: dict[str, Any] = {}
    for agent in dict.fromkeys(["default", *settings.agents]):
        profile = settings.agent(agent)
        visible = ProfileFilter.from_profile(profile).apply(catalog)
        search_settings = effective_tool_search(settings.mcp.tool_search, profile)
        rows = []
        full_tokens = planner.plan_tools(visible, search_settings).full_tokens
        for threshold in thresholds:
            tool_plan = planner.plan_tools(visible, search_settings.model_copy(update={"threshold_tokens": threshold}))
            rows.append({"threshold_tokens": threshold, "mode": tool_plan.mode, "tokens": tool_plan.prompt_tokens})
        agents[agent] = {
            "tools": len(visible),
            "full_tokens": full_tokens,
            "threshold_tokens": search_settings.threshold_tokens,
            "enabled": search_settings.enabled,
            "sweep": rows,
        }
    return {"catalog_version": catalog.version, "thresholds": thresholds, "agents": agents}


def _print_sweep(sweep: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(sweep)
        return
    agents = sweep["agents"]
    header = ["threshold_tokens", *agents]
    rows = []
    for index, threshold in enumerate(sweep["thresholds"]):
        cells = [f"{threshold:,}"]
        for figures in agents.values():
            row = figures["sweep"][index]
            current = " (now)" if figures["threshold_tokens"] == threshold else ""
            cells.append(f"{row['mode']} {row['tokens']:,}{current}")
        rows.append(cells)
    print_table(header, rows)
    console.print("", markup=False)
    for agent, figures in agents.items():
        if not figures["enabled"]:
            line = "tool search disabled for it: always full"
        else:
            line = f"full at threshold_tokens >= {figures['full_tokens']:,}, search below"
        console.print(
            f"{agent}: {figures['tools']} tools, {figures['full_tokens']:,} tokens in full; {line} "
            f"(threshold_tokens now {figures['threshold_tokens']:,})",
            markup=False,
        )


def _print_definition(definition: dict[str, Any]) -> None:
    """A definition for people: name, description, then one line per parameter."""
    from ..protocols.mcp._normalization import one_line

    schema = definition.get("input_schema") or {}
    required = set(schema.get("required") or [])
    console.print(definition["name"], markup=False, style="bold")
    if definition.get("description"):
        console.print(f"  {definition['description']}", markup=False)
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type", "any")
        flag = ", required" if name in required else ""
        about = f" - {prop['description']}" if isinstance(prop.get("description"), str) else ""
        kind = json.dumps(kind) if not isinstance(kind, str) else kind
        # Names and types are the server's as they are (a call must match them): one safe line for the terminal.
        console.print(f"  {one_line(name, 200)} ({one_line(kind, 200)}{flag}){about}", markup=False)
    console.print("", markup=False)


def _print_tool_plan(tool_plan: ToolPlan) -> None:
    """`tools plan` for people: mode, token counts, what is sent and why, then the prompt section."""
    saved = tool_plan.full_tokens - tool_plan.prompt_tokens
    console.print(f"mode: {tool_plan.mode}", markup=False)
    console.print(f"full catalog: {tool_plan.full_tokens:,} tokens", markup=False)
    console.print(f"sent: {tool_plan.prompt_tokens:,} tokens ({saved:,} saved)", markup=False)
    console.print(f"directory: {tool_plan.directory_level}", markup=False)
    console.print(f"tools sent: {len(tool_plan.tools)} ({', '.join(tool_plan.pinned) or 'none'} pinned)", markup=False)
    console.print(f"reason: {tool_plan.reason}", markup=False)
    if tool_plan.prompt:
        console.print("", markup=False)
        console.print(tool_plan.prompt, markup=False)


def _print_report(report: EvalReport, k: int) -> None:
    """One row for every query, then one per style when the queries carry a `style`."""
    print_table(
        ("style", "queries", "hit@1", f"hit@{k}", f"recall@{k}", "MRR", "misses", "refused", "unknown gold"),
        [
            (
                style,
                part.queries,
                f"{part.hit_at_1:.3f}",
                f"{part.hit_at_k:.3f}",
                f"{part.recall_at_k:.3f}",
                f"{part.mrr:.3f}",
                part.misses,
                part.refused,
                part.unknown_gold,
            )
            for style, part in [("all", report), *report.styles.items()]
        ],
    )
