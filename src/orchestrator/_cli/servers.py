"""`orchestrator servers [--json]`: connect to every configured server and show how each one is doing.

One row per server: name, transport, state (ready / degraded / restarting / failed / stopped), tool count
and the error, then any tools held back from agents with their reasons; `--json` adds the supervisor's
view (circuit, next retry, dropped tools) and `held_tools`.
Exit 0 when every enabled server is ready, 1 when any is not (the table still prints).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import EXIT_FAILED, echo, loaded_config, print_json, print_table, progress

__all__ = ["register", "server_rows"]

if TYPE_CHECKING:
    from .._config import Settings
    from ..protocols.mcp._manager import ServerStatus

COLUMNS = ("name", "transport", "state", "tools", "error")


def register(app: typer.Typer) -> None:
    @app.command("servers")
    def servers(
        ctx: typer.Context,
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help="Print a JSON list of {name, transport, state, tools, error, circuit, next_retry_at, ...}.",
            ),
        ] = False,
    ) -> None:
        """Connect to every configured server and show its state, tool count and error."""
        import anyio

        from ..protocols.mcp._manager import ServerState

        settings = loaded_config(ctx).settings
        enabled = sum(1 for config in settings.mcp.servers.values() if config.enabled)
        with progress(f"Connecting to {enabled} MCP server{'s' if enabled != 1 else ''}…", enabled=not as_json):
            statuses = anyio.run(_collect, settings)
        rows = server_rows(statuses)
        if as_json:
            print_json(rows)
        else:
            print_table(COLUMNS, [[row[column] for column in COLUMNS] for row in rows])
            held = [(row["name"], tool) for row in rows for tool in row["held_tools"]]
            if held:
                echo(
                    f"\n{len(held)} tool(s) held back from agents (orchestrator tools audit | diff NAME | approve NAME):"
                )
                for server, tool in held:
                    echo(f"  {tool['name']} ({server}): {tool['reason']}")
        if any(status.state is not ServerState.READY for status in statuses if _enabled(settings, status.name)):
            raise typer.Exit(EXIT_FAILED)


def server_rows(statuses: list[ServerStatus]) -> list[dict[str, Any]]:
    """The `--json` objects: name, transport, state, tools (a count), error, and the supervisor's view
    (circuit, restarts, next retry, tools dropped with their reasons, skipped lines); the table shows the
    first five."""
    return [status.as_dict() for status in statuses]


async def _collect(settings: Settings) -> list[ServerStatus]:
    from .._store import open_store
    from ..protocols.mcp._manager import MCPManager

    store = open_store(settings)
    try:
        with _quiet_sdk_logs():
            async with MCPManager(settings, wait=True, store=store) as manager:
                return manager.status()
    finally:
        store.close()


def _enabled(settings: Settings, name: str) -> bool:
    config = settings.mcp.servers.get(name)
    return config is not None and config.enabled


@contextlib.contextmanager
def _quiet_sdk_logs() -> Iterator[None]:
    """Keep the SDK's logging (a traceback per non-JSON line a server prints) off the terminal.

    Only when the application configured no logging: Python would otherwise print WARNING and above
    through its last-resort handler. Server problems show in the table instead.
    """
    sdk = logging.getLogger("mcp")
    if logging.getLogger().handlers or sdk.handlers:
        yield
        return
    handler = logging.NullHandler()
    sdk.addHandler(handler)
    try:
        yield
    finally:
        sdk.removeHandler(handler)
