"""`orchestrator` command line: one module per command group, each loaded when its command is used.

Errors the project raises on purpose print as one line on stderr. Bad input exits 2 (`BAD_INPUT`: the
configuration, a snapshot or query file given on the command line, a query or name list that cannot be
run); every other OrchestratorError means the job ran and something failed, and exits 1. No tracebacks.

Start-up pays only for what the command uses (benchmarks/cli_startup.py): the root group imports a
command's module when that command runs or `--help` lists it (click's lazy-group pattern), a command
module imports only typer and the standard library, and each command imports what it needs (the mcp
SDK, search, telemetry, the gateway; the settings through `loaded_config`) when it runs. Help and usage
errors are click's plain text (`rich_markup_mode=None`): typer's rich panels import rich, markdown-it and
pygments, about 0.15 s of CPU for every `--help`.
"""

from __future__ import annotations

import gc
import importlib
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from .._errors import CatalogError, ConfigError, ExpandError, OrchestratorError, SearchQueryError
from ._common import EXIT_FAILED, EXIT_USAGE, CLIState, echo

__all__ = ["app", "main"]

COMMAND_MODULES: dict[str, str] = {
    "servers": "servers",
    "eval": "tools",
    "spawn": "spawn",
    "serve": "spawn",
    "metrics": "metrics",
    "tune": "tune",
    "demo": "demo",
    "config": "config_cmd",
    "tools": "tools",
    "traces": "traces",
}
"""Each top-level command and the module whose `register(app)` adds it, in the order `--help` lists them
(typer's order: commands, then groups). tests/test_cli_startup.py holds it to what the modules register."""


BAD_INPUT = (ConfigError, CatalogError, SearchQueryError, ExpandError)
"""Errors in what the user gave (README: exit 2), as opposed to a job that ran and failed (exit 1). A tool
name the catalog does not have is a failed lookup, like grep's miss (exit 1)."""


class _Group(TyperGroup):
    """Loads each command's module on first use; turns project errors into one line and an exit code."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            self._load(COMMAND_MODULES[cmd_name])
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in COMMAND_MODULES:  # a typo: "did you mean" looks at every command
            for name in COMMAND_MODULES:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def _load(self, module_name: str) -> None:
        """Import a command module and add the click commands its `register` defines."""
        module = importlib.import_module(f"{__name__}.{module_name}")
        commands = typer.Typer(rich_markup_mode=None)
        module.register(commands)
        for name, command in typer.main.get_group(commands).commands.items():
            self.add_command(command, name)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OrchestratorError as exc:
            _fail(str(exc), _exit_code(exc))
        except BaseExceptionGroup as group:  # an error raised inside a task group (anyio wraps it)
            matched, _rest = group.split(OrchestratorError)
            if matched is None:
                raise
            first = _first_leaf(matched)
            _fail(str(first), _exit_code(first))


def _exit_code(error: BaseException) -> int:
    return EXIT_USAGE if isinstance(error, BAD_INPUT) else EXIT_FAILED


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first exception inside nested groups: the one a person needs to read."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def _fail(message: str, code: int) -> None:
    for line in message.splitlines() or [""]:
        echo(f"error: {line}", err=True)
    raise typer.Exit(code)


app = typer.Typer(
    name="orchestrator",
    cls=_Group,
    help="MCP subsystem of a per-task agent orchestrator: servers, tool search, spawn plans, gateway.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
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


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    finally:
        # The process ends here. Moving every object to the garbage collector's permanent generation
        # spares interpreter shutdown a last traversal of them all: 20-30 ms of CPU, about an eighth
        # of a `config check`. Commands close what they open themselves (atexit hooks still run), and
        # Python promises no finalizer for objects still alive at exit.
        gc.freeze()
