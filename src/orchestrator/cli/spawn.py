"""`orchestrator spawn` and `orchestrator serve` (spawn path and gateway issue)."""

from __future__ import annotations

import typer

from ._unbuilt import not_built

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("spawn")
    def spawn() -> None:
        """Plan and launch one per-task agent (not built yet)."""
        not_built("spawn", "spawn path")

    @app.command("serve")
    def serve() -> None:
        """Serve an agent's tools as an MCP gateway (not built yet)."""
        not_built("serve", "gateway")
