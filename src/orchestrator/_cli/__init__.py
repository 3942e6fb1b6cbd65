"""`orchestrator` command line: one module per command group, registered here.

Errors the project raises on purpose print as one line on stderr; a ConfigError exits 2,
other OrchestratorErrors exit 1. No tracebacks for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from .._errors import ConfigError, OrchestratorError
from . import config_cmd, demo, metrics, servers, spawn, tools
from ._common import EXIT_FAILED, EXIT_USAGE, CLIState, err_console

__all__ = ["app", "main"]


class _Group(TyperGroup):
    """Turns project errors into one line on stderr and the right exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            _fail(str(exc), EXIT_USAGE)
        except OrchestratorError as exc:
            _fail(str(exc), EXIT_FAILED)


def _fail(message: str, code: int) -> None:
    for line in message.splitlines() or [""]:
        err_console.print(f"error: {line}", markup=False)
    raise typer.Exit(code)


app = typer.Typer(
    name="orchestrator",
    cls=_Group,
    help="MCP subsystem of a per-task agent orchestrator: servers, tool search, spawn plans, gateway.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="YAML config (default: $BERNSTEIN_CONFIG, else ./bernstein.yaml)."),
    ] = None,
) -> None:
    ctx.obj = CLIState(config_path=config)


config_cmd.register(app)
servers.register(app)
tools.register(app)
spawn.register(app)
metrics.register(app)
demo.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
