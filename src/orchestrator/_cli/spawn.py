"""`orchestrator spawn` (plan and launch one per-task agent) and `orchestrator serve` (the MCP gateway)."""

from __future__ import annotations

import signal
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import EXIT_FAILED, console, err_console, loaded_config, print_json, print_table
from .tools import load_catalog

# Planning, telemetry, the gateway and the mcp SDK behind them are imported inside the commands:
# `orchestrator --help` and `config` must not pay for them.
if TYPE_CHECKING:
    import anyio

    from .._config import Settings
    from .._launch import SpawnSummary
    from .._planning import SpawnPlan
    from .._telemetry import Telemetry
    from ..search._embedding import EmbeddingRuntime

__all__ = ["register"]

EXIT_SIGNALLED = 128
"""Plus the signal's number: what shells report for a command a signal stopped."""
EXIT_INTERRUPTED = EXIT_SIGNALLED + signal.SIGINT
"""130, what shells report for a command stopped by Ctrl-C."""


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class Format(StrEnum):
    json = "json"
    text = "text"
    anthropic = "anthropic"
    openai = "openai"


def register(app: typer.Typer) -> None:
    app.command("spawn")(spawn)
    app.command("serve")(serve)


def spawn(
    ctx: typer.Context,
    task: Annotated[str, typer.Option("--task", help="What the agent is to do.")],
    agent: Annotated[str, typer.Option("--agent", help="Agent profile (agents.<name>).")] = "default",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; launch nothing.")] = False,
    fmt: Annotated[
        Format,
        typer.Option("--format", help="json | text; with --dry-run also anthropic | openai (request fragments)."),
    ] = Format.text,
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", help="Plan from a snapshot (folder of <server>.json or one JSON file)."),
    ] = None,
    task_id: Annotated[
        str | None,
        typer.Option("--task-id", help="Task identity for pinning recently called tools (default: hash of --task)."),
    ] = None,
) -> None:
    """Plan one spawn of an agent for a task and launch it through the gateway (or just print the plan)."""
    settings = loaded_config(ctx).settings
    _check_spawn_options(dry_run, fmt, catalog)
    if dry_run:
        plan = _dry_run_plan(settings, task, agent, catalog, task_id)
        _print_plan(plan, fmt)
        return
    summary = _launch(settings, task, agent, task_id, fmt)
    if fmt is Format.json:
        print_json(summary.to_json())
    else:
        _print_summary(summary)
    if not summary.ok:
        raise typer.Exit(EXIT_FAILED)


def serve(
    ctx: typer.Context,
    agent: Annotated[str, typer.Option("--agent", help="Agent profile served at /mcp and over stdio.")] = "default",
    transport: Annotated[
        Transport, typer.Option("--transport", help="stdio or http (streamable HTTP).")
    ] = Transport.http,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="HTTP port (default gateway.port; 0 = any free port)."),
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="HTTP host (default gateway.host).")] = None,
) -> None:
    """Serve an agent's tools as one MCP gateway that many short-lived agents share."""
    import anyio

    from .._telemetry import telemetry_session
    from ..search._embedding import EmbeddingRuntime

    settings = loaded_config(ctx).settings
    settings.agent(agent)
    try:
        with telemetry_session(settings) as telemetry, EmbeddingRuntime.from_settings(settings) as embeddings:
            anyio.run(_serve, settings, agent, transport, host, port, telemetry, embeddings)
    except KeyboardInterrupt:  # before the signal handler was installed; everything unwound
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _check_spawn_options(dry_run: bool, fmt: Format, catalog: Path | None) -> None:
    """Request fragments and snapshots only make sense for a plan that is printed, not launched."""
    if not dry_run and fmt in (Format.anthropic, Format.openai):
        raise typer.BadParameter(
            "anthropic and openai print a plan's tools: use them with --dry-run", param_hint="--format"
        )
    if not dry_run and catalog is not None:
        raise typer.BadParameter("a snapshot cannot serve calls: use --catalog with --dry-run", param_hint="--catalog")


def _launch(settings: Settings, task: str, agent: str, task_id: str | None, fmt: Format) -> SpawnSummary:
    """Launch the agent through the gateway and wait for it. Ctrl-C, SIGTERM or SIGHUP stops it (its whole
    process group: it runs in a session of its own, so the signal does not reach it) and closes the spawn,
    then exits 128 + the signal's number (130 for Ctrl-C)."""
    import anyio

    from .._launch import spawn_agent
    from .._telemetry import telemetry_session

    async def until_signal() -> SpawnSummary | int:
        stopped_by: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                _cancel_on_signal, tg.cancel_scope, stopped_by, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            )
            summary = await spawn_agent(
                settings,
                task,
                agent,
                task_id=task_id,
                stdout=sys.stderr if fmt is Format.json else None,
                telemetry=telemetry,
                warn=lambda message: err_console.print(f"warning: {message}", markup=False, soft_wrap=True),
            )
            tg.cancel_scope.cancel()
        return stopped_by[0] if stopped_by else summary

    with telemetry_session(settings) as telemetry:
        try:
            outcome = anyio.run(until_signal)
        except KeyboardInterrupt:  # before the signal receiver was in place
            outcome = signal.SIGINT
    if isinstance(outcome, int):  # a signal's number
        err_console.print("spawn interrupted", markup=False)  # the agent's group was stopped, the spawn closed
        raise typer.Exit(EXIT_SIGNALLED + outcome)
    return outcome


def _print_summary(summary: SpawnSummary) -> None:
    rows = [
        ("spawn", f"{summary.spawn_id} ({summary.path} gateway)"),
        ("agent", summary.agent),
        ("mode", summary.mode),
        ("tokens sent", summary.tokens_sent),
        ("tokens saved", summary.tokens_saved),
        ("searches", summary.searches),
        ("expands", summary.expands),
        ("calls", summary.calls),
        ("exit status", summary.exit_status),
        ("duration", f"{summary.duration_s:.2f} s"),
    ]
    print_table(("", ""), rows)


async def _serve(
    settings: Settings,
    agent: str,
    transport: Transport,
    host: str | None,
    port: int | None,
    telemetry: Telemetry,
    embeddings: EmbeddingRuntime,
) -> None:
    """Run the gateway until the client goes (stdio) or SIGINT/SIGTERM arrives; always unwinds cleanly.

    Over HTTP without `gateway.token`, the admin secret generated at start is written to a runtime file
    only the user can read (where `orchestrator spawn` finds it) and removed on the way out."""
    import contextlib

    import anyio

    from .._gateway.addresses import check_bind
    from .._gateway.auth import Credentials, RuntimeFile
    from .._gateway.server import Gateway
    from .._history import TaskHistory
    from .._store import open_store
    from ..protocols.mcp._manager import MCPManager

    host = settings.gateway.host if host is None else host
    port = settings.gateway.port if port is None else port
    if transport is Transport.http:
        check_bind(host, settings.gateway.token)  # refuse before starting any server
    credentials = Credentials.from_settings(settings)
    store = open_store(settings)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, tg.cancel_scope)
            # wait=False: the gateway answers initialize and tools/list at once with what is up (or cached)
            # and announces servers that come up later with list_changed; an agent's client may time out
            # if it waits for every server to start first.
            async with MCPManager(settings, telemetry=telemetry, wait=False, store=store) as manager:
                async with Gateway(
                    settings,
                    manager,
                    agent=agent,
                    history=TaskHistory(store),
                    telemetry=telemetry,
                    embeddings=embeddings,
                    credentials=credentials,
                    store=store,
                ) as gateway:
                    if transport is Transport.stdio:
                        await gateway.serve_stdio()
                    else:
                        async with gateway.running(host, port) as url, contextlib.AsyncExitStack() as files:
                            where = "gateway.token"
                            if credentials.generated:
                                runtime = RuntimeFile.for_settings(settings, url)
                                where = str(files.enter_context(runtime.written(url, credentials.admin_secret)))
                            catalog = gateway.catalog()
                            err_console.print(
                                f"gateway: agent {agent!r} at {url}/mcp ({len(catalog)} tools from "
                                f"{len(catalog.servers())} servers so far); spawns at {url}/spawn/<id>/mcp; admin "
                                f"secret: {where}. Ctrl-C stops.",
                                markup=False,
                                soft_wrap=True,
                            )
                            await anyio.sleep_forever()
            tg.cancel_scope.cancel()
    finally:
        store.close()


async def _cancel_on_signal(
    scope: anyio.CancelScope,
    received: list[int] | None = None,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> None:
    """Cancel `scope` at the first of `signals`, noted in `received`."""
    import anyio

    with anyio.open_signal_receiver(*signals) as arriving:
        async for signum in arriving:
            if received is not None:
                received.append(signum)
            scope.cancel()
            return


def _dry_run_plan(
    settings: Settings, task: str, agent: str, catalog_path: Path | None, task_id: str | None
) -> SpawnPlan:
    from .._history import TaskHistory
    from .._planning import SpawnPlanner, task_key

    settings.agent(agent)
    catalog = load_catalog(settings, catalog_path, quiet=True)
    task_id = task_id or task_key(task)
    recent = TaskHistory.from_settings(settings).recent(task_id)
    return SpawnPlanner(settings).plan(task, agent, catalog, recent_tools=recent, task_id=task_id, record=False)


def _print_plan(plan: SpawnPlan, fmt: Format) -> None:
    from .._formats import render_tools

    if fmt is Format.json:
        print_json(plan.to_json())
        return
    if fmt is Format.anthropic:
        fragment: dict[str, Any] = {"system": plan.prompt} if plan.prompt else {}
        print_json({**fragment, "tools": render_tools(plan.tools, "anthropic")})
        return
    if fmt is Format.openai:
        messages = [{"role": "system", "content": plan.prompt}] if plan.prompt else []
        print_json({**({"messages": messages} if messages else {}), "tools": render_tools(plan.tools, "openai")})
        return
    rows = [
        ("agent", plan.agent),
        ("mode", plan.mode),
        ("full tokens", plan.full_tokens),
        ("prompt tokens", plan.prompt_tokens),
        ("tokens saved", plan.tokens_saved),
        ("directory", plan.directory_level),
        ("visible tools", plan.visible_tools),
        ("pinned", ", ".join(plan.pinned) or "-"),
        ("fingerprint", plan.fingerprint[:16]),
        ("reason", plan.reason),
    ]
    print_table(("", ""), rows)
    console.print()
    console.print("tools sent: " + ", ".join(tool["name"] for tool in plan.tools), markup=False)
    if plan.prompt:
        console.print()
        console.print(plan.prompt, markup=False)
