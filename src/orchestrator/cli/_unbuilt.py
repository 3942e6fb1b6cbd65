"""Placeholder for commands whose issue has not landed yet: they say so plainly."""

from __future__ import annotations

import typer

from ._common import EXIT_FAILED, err_console


def not_built(command: str, issue: str) -> None:
    err_console.print(f"orchestrator {command}: not built yet ({issue})", markup=False)
    raise typer.Exit(EXIT_FAILED)
