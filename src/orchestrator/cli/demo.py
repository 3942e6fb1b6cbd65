"""`orchestrator demo`: the whole story on the configured servers, as far as it is built."""

from __future__ import annotations

import typer

from ._common import console, loaded_config, print_table

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(ctx: typer.Context) -> None:
        """Run the main job on the configuration: what exists so far, honestly labelled."""
        loaded = loaded_config(ctx)
        console.print(f"[bold]1. configuration[/bold] {loaded.path} ({loaded.path_reason}) is valid")
        rows = [
            (name, server.transport, "yes" if server.enabled else "no", server.command or server.url)
            for name, server in loaded.settings.mcp.servers.items()
        ]
        print_table(["server", "transport", "enabled", "command/url"], rows)
        console.print("connect, plan, search, expand, call and metrics: not built yet")
