"""`orchestrator tools audit | diff | approve`: review what is held back from agents, and let it through.

    tools audit [--catalog PATH] [--json]   every held-back or flagged tool with its reason; exit 1 when any
    tools diff NAME                         the pinned definition against the one the server lists now
    tools approve NAME... | --server S      pin the listed definitions as reviewed (every replica sees it)

Each connects to the configured servers (or reads `--catalog`) and compares their tools with the pins in the
store (`store.url`, else files under the cache root: what `orchestrator serve` uses). Server text printed
here is JSON-escaped or sanitized: no escape sequence or invisible character reaches the terminal.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import EXIT_FAILED, echo, loaded_config, print_json, print_table, progress

if TYPE_CHECKING:
    from .._config import Settings
    from ..protocols.mcp._pins import HeldTool

__all__ = ["tools_approve", "tools_audit", "tools_diff"]

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


def tools_audit(
    ctx: typer.Context,
    catalog: Annotated[
        Path | None,
        typer.Option(
            "--catalog", help="Audit a snapshot (a folder of <server>.json, or one JSON file) instead.", exists=True
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Every tool held back from agents (changed since pinned, new, or flagged) with its reason; exit 1 when any."""
    settings = loaded_config(ctx).settings
    held = (
        _snapshot_held(settings, catalog)
        if catalog is not None
        else _live(settings, as_json, lambda manager: manager.held_tools())
    )
    if as_json:
        print_json([tool.as_dict() for tool in held])
    elif held:
        print_table(
            ("name", "kind", "held", "reason"),
            [(tool.name, tool.kind, "yes" if tool.held else "no (on_flag: accept)", tool.reason) for tool in held],
        )
    else:
        echo("nothing held back: every listed tool matches its pin and reads as a description")
    if held:
        raise typer.Exit(EXIT_FAILED)


def tools_diff(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="The held tool's qualified name (server__tool) or its name on the server.")
    ],
) -> None:
    """The pinned definition against the one the server lists now, with the detector's findings."""
    from .._errors import OrchestratorError

    settings = loaded_config(ctx).settings

    def collect(manager: Any) -> tuple[list[HeldTool], dict[str, Any] | None]:
        held = manager.held_tools()
        tool = _pick(held, name)
        record = manager.guard.pinned(tool.server) if tool is not None else None
        return held, record

    held, record = _live(settings, True, collect)
    tool = _pick(held, name)
    if tool is None:
        raise OrchestratorError(f"tool {name!r} is not held back (orchestrator tools audit lists what is)")
    pinned = ((record or {}).get("tools") or {}).get(tool.tool)
    before = pinned.get("definition") if isinstance(pinned, dict) else None
    echo(f"{tool.name} ({tool.kind}): {tool.reason}")
    echo(f"definition listed now: {tool.digest} (orchestrator tools approve {tool.name}@{tool.digest})")
    for finding in tool.findings:
        echo(f"  {finding}")
    old = _lines(before) if before is not None else []
    label = "pinned" if before is not None else "pinned (none: the tool is new)"
    for line in difflib.unified_diff(old, _lines(tool.definition), label, "listed now", lineterm=""):
        echo(line)


def tools_approve(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Held tools to approve (qualified or server names); NAME@DIGEST approves only the definition "
            "`tools diff` showed with that digest."
        ),
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", help="Approve every held or flagged tool of this server.")
    ] = None,
) -> None:
    """Pin the definitions listed now as reviewed: agents get them (running gateways within seconds)."""
    from .._errors import ConfigError, OrchestratorError

    if not names and server is None:
        raise ConfigError("tools approve: name the tools to approve, or give --server")
    settings = loaded_config(ctx).settings

    def approve(manager: Any) -> list[HeldTool]:
        held = manager.held_tools()
        chosen = [tool for tool in held if tool.server == server] if server is not None else []
        for wanted in names or ():
            name, digest = _named(wanted)
            tool = _pick(held, name)
            if tool is None:
                raise OrchestratorError(f"tool {name!r} is not held back (orchestrator tools audit lists what is)")
            if digest and tool.digest != digest:
                raise OrchestratorError(
                    f"tool {tool.name!r} is listed now with definition {tool.digest}, not the {digest} you named: "
                    "review it again (orchestrator tools diff); nothing approved"
                )
            chosen.append(tool)
        return list(manager.approve(list(dict.fromkeys(chosen))))

    approved = _live(settings, False, approve)
    if not approved:
        echo(f"nothing held back on server {server!r}" if server is not None else "nothing to approve")
    for tool in approved:
        echo(f"approved {tool.name} (definition {tool.digest})")


def _named(wanted: str) -> tuple[str, str]:
    """(tool name, digest) of `NAME@DIGEST`, or (NAME, "") when no digest follows (a tool name may hold `@`)."""
    from ..protocols.mcp._pins import DIGEST_CHARS

    name, _, digest = wanted.rpartition("@")
    if name and len(digest) == DIGEST_CHARS and all(char in "0123456789abcdef" for char in digest):
        return name, digest
    return wanted, ""


def _pick(held: list[HeldTool], name: str) -> HeldTool | None:
    """The held tool `name` names: its qualified name first; else its name on its server, when one server
    only holds a tool of that name (an ambiguous name is refused, never guessed)."""
    from .._errors import OrchestratorError

    for tool in held:
        if tool.name == name:
            return tool
    on_servers = [tool for tool in held if tool.tool == name]
    if len(on_servers) > 1:
        names = ", ".join(tool.name for tool in on_servers)
        raise OrchestratorError(f"tool {name!r} is held on more than one server ({names}): name it as server__tool")
    return on_servers[0] if on_servers else None


def _lines(definition: Any) -> list[str]:
    """A definition as JSON lines, ASCII-escaped: invisible characters show as \\uXXXX, escapes never run."""
    return json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=True, default=repr).splitlines()


def _live(settings: Settings, quiet: bool, work: Any) -> Any:
    """`work(manager)` over every enabled server, with the pins of the shared store."""
    import anyio

    from .._store import open_store
    from ..protocols.mcp._manager import MCPManager

    async def run() -> Any:
        store = open_store(settings)
        try:
            enabled = sum(1 for config in settings.mcp.servers.values() if config.enabled)
            with progress(f"Connecting to {enabled} MCP server{'s' if enabled != 1 else ''}…", enabled=not quiet):
                async with MCPManager(settings, store=store) as manager:
                    return await anyio.to_thread.run_sync(work, manager)
        finally:
            store.close()

    return anyio.run(run)


def _snapshot_held(settings: Settings, path: Path) -> list[HeldTool]:
    """Held and flagged tools of a snapshot against the store's pins, without pinning anything."""
    from .._store import open_store
    from ..protocols.mcp._catalog import read_snapshot
    from ..protocols.mcp._pins import ToolGuard

    store = open_store(settings)
    try:
        guard = ToolGuard(settings.mcp.servers, store, record=False)
        for server, tools in read_snapshot(path).items():
            guard.offered(server, tools)
        return guard.held()
    finally:
        store.close()
