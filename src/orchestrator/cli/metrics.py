"""`orchestrator metrics` (telemetry issue)."""

from __future__ import annotations

import typer

from ._unbuilt import not_built

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    def metrics() -> None:
        """Show a running gateway's metrics (not built yet)."""
        not_built("metrics", "telemetry")
