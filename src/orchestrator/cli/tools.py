"""`orchestrator tools list|search|expand|plan` and `orchestrator eval` (tool-search issue)."""

from __future__ import annotations

import typer

from ._unbuilt import not_built

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    tools_app = typer.Typer(help="List, search, expand and plan tools (not built yet).")

    @tools_app.callback(invoke_without_command=True)
    def _tools() -> None:
        not_built("tools", "tool search")

    app.add_typer(tools_app, name="tools")

    @app.command("eval")
    def eval_() -> None:
        """Measure ranking quality on a query set (not built yet)."""
        not_built("eval", "tool search")
