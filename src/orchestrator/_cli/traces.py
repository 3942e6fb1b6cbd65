"""`orchestrator traces stats|export|import|clear`: the search traces gateways learn from.

Traces live in the store (`store.url` for Redis, else files under the cache root), one record per tool;
see `orchestrator._traces`. `export` writes them as JSON lines, one trace a line:
`{"query": "...", "server": "...", "tool": "...", "spawn": "...", "ok": true, "at": "2026-12-01T10:00:00Z"}`,
and `import` reads the same (`at` optional; lines with `ok: false` are counted and skipped: only successful
calls are learned from). Request text is redacted before it is stored, imported text included.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import echo, loaded_config, print_json, print_table

if TYPE_CHECKING:
    from .._config import Settings
    from .._traces import Trace, TraceStore

__all__ = ["read_traces", "register"]

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


def _store(settings: Settings) -> TraceStore:
    from .._store import open_store
    from .._traces import TraceStore

    return TraceStore(open_store(settings), settings.mcp.tool_search.traces)


def read_traces(path: Path) -> tuple[list[Trace], int]:
    """The traces of a JSON lines file and how many `ok: false` lines were skipped.

    Raises:
        ConfigError: the file cannot be read, or a line is not a trace (names the line and what is wrong).
    """
    from .._errors import ConfigError
    from .._traces import parse_trace

    try:
        # Split at line feeds only: str.splitlines also splits at U+2028 and the like, which JSON strings may hold.
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read traces: {exc}") from None
    now = time.time()
    traces: list[Trace] = []
    failed = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            trace = parse_trace(json.loads(line), now)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise ConfigError(f"{path}: line {number}: {exc}") from None
        if trace.ok:
            traces.append(trace)
        else:
            failed += 1
    return traces, failed


def _when(at: float | None) -> str:
    if at is None:
        return "n/a"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def traces_stats(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """How many traces the store holds, for how many tools and spawns, and where the called tools ranked."""
    settings = loaded_config(ctx).settings
    store = _store(settings)
    try:
        stats = store.stats()
        learned = sum(
            1
            for spawns in _spawns_per_tool(store.load()).values()
            if spawns >= settings.mcp.tool_search.traces.min_spawns
        )
    finally:
        store.store.close()
    found = stats.found_at
    calls = sum(found.values())
    top5 = sum(count for rank, count in found.items() if rank in ("1", "2", "3", "4", "5"))
    payload: dict[str, Any] = {
        "traces": stats.traces,
        "tools": stats.tools,
        "tools_with_evidence": learned,
        "spawns": stats.spawns,
        "oldest": _when(stats.oldest),
        "newest": _when(stats.newest),
        "found_at": found,
        "found_in_top_5": top5 / calls if calls else None,
    }
    if as_json:
        print_json(payload)
        return
    rows = [
        ("traces", f"{stats.traces:,}"),
        ("tools", f"{stats.tools:,}"),
        (f"tools with evidence (>= {settings.mcp.tool_search.traces.min_spawns} spawns)", f"{learned:,}"),
        ("spawns", f"{stats.spawns:,}"),
        ("oldest", payload["oldest"]),
        ("newest", payload["newest"]),
        ("called tools found in the top 5", "n/a" if not calls else f"{top5 / calls:.1%}"),
    ]
    print_table(["search traces", "value"], rows)
    if calls:
        order = ["1", "2", "3", "4", "5", "6-10", "11+", "not_found"]
        print_table(
            ["rank in the search before the call", "calls"], [(rank, f"{found.get(rank, 0):,}") for rank in order]
        )


def _spawns_per_tool(traces: list[Trace]) -> dict[tuple[str, str], int]:
    spawns: dict[tuple[str, str], set[str]] = {}
    for trace in traces:
        spawns.setdefault((trace.server, trace.tool), set()).add(trace.spawn)
    return {tool: len(found) for tool, found in spawns.items()}


def traces_export(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Argument(help="File to write (default: standard output).")] = None,
) -> None:
    """Write every trace as JSON lines (the format `traces import` reads)."""
    store = _store(loaded_config(ctx).settings)
    try:
        traces = store.load()
    finally:
        store.store.close()
    # ASCII with escapes: an agent's request text reaches neither a terminal's control sequences nor a
    # reader that splits lines at U+2028.
    text = "".join(json.dumps(trace.to_json()) + "\n" for trace in traces)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    output.write_text(text, encoding="utf-8")
    echo(f"exported {len(traces):,} traces to {output}", err=True)


def traces_import(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Argument(help="JSON lines of traces (the format `traces export` writes).", exists=True)
    ],
) -> None:
    """Add traces from a JSON lines file (redacted, bounded and deduplicated like recorded ones)."""
    settings = loaded_config(ctx).settings
    traces, failed = read_traces(path)
    store = _store(settings)
    try:
        kept = store.record(traces)
        store.prune()
        total = store.stats().traces
    finally:
        store.store.close()
    skipped = f"; {failed:,} failed calls skipped" if failed else ""
    echo(f"imported {kept:,} traces from {path}{skipped}; the store holds {total:,}")


def traces_clear(
    ctx: typer.Context,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every trace: rankings go back to the tools' own text."""
    settings = loaded_config(ctx).settings
    if not yes:
        typer.confirm("Delete every search trace in the store?", abort=True)
    store = _store(settings)
    try:
        count = store.clear()
    finally:
        store.store.close()
    echo(f"deleted {count:,} traces")


def register(app: typer.Typer) -> None:
    traces_app = typer.Typer(help="Search traces learned from use: stats, export, import, clear.", no_args_is_help=True)
    traces_app.command("stats")(traces_stats)
    traces_app.command("export")(traces_export)
    traces_app.command("import")(traces_import)
    traces_app.command("clear")(traces_clear)
    app.add_typer(traces_app, name="traces")
