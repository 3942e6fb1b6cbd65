"""`orchestrator servers` (MCP manager issue)."""

from __future__ import annotations

import typer

from ._unbuilt import not_built

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("servers")
    def servers() -> None:
        """Connect to every configured server and show its state (not built yet)."""
        not_built("servers", "MCP manager")
