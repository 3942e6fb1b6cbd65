"""What every command shares: loading settings once, tables, JSON, progress and exit codes.

Output for people is an aligned table (rich, no box); `--json` and output to a pipe stay plain.
Exit codes: 0 success, 1 the job ran and something failed (a server down, a miss in eval...),
2 bad input (config, arguments), as click does for usage errors.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from .._config import LoadedConfig

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CLIState",
    "console",
    "err_console",
    "loaded_config",
    "print_json",
    "print_table",
    "progress",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 10_000)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class CLIState:
    """Global options, kept on the click context."""

    config_path: Path | None = None
    _loaded: LoadedConfig | None = None

    def config(self) -> LoadedConfig:
        if self._loaded is None:
            from .._config import load_config  # pydantic-settings: paid by the commands that read config

            self._loaded = load_config(self.config_path)
        return self._loaded


def loaded_config(ctx: typer.Context) -> LoadedConfig:
    """The validated configuration for this invocation (raises ConfigError -> exit 2)."""
    state = ctx.find_object(CLIState)
    if state is None:  # a sub-app invoked on its own, as in some tests
        state = CLIState()
        ctx.obj = state
    return state.config()


def print_json(payload: Any) -> None:
    """Machine-readable output: one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """An aligned table for people; plain columns (no colour, no box) when piped."""
    table = Table(*columns, box=None, title=title, title_justify="left", header_style="bold", pad_edge=False)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(table)


@contextlib.contextmanager
def progress(message: str, *, enabled: bool = True) -> Iterator[None]:
    """A spinner on stderr while long work runs; silent when stderr is not a terminal."""
    if not enabled or not err_console.is_terminal:
        yield
        return
    with err_console.status(message):
        yield
