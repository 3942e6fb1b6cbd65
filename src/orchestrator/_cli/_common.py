"""What every command shares: loading settings once, tables, JSON, plain lines, progress and exit codes.

Output for people is an aligned table (rich, no box); `--json` and output to a pipe stay plain.
Exit codes: 0 success, 1 the job ran and something failed (a server down, a miss in eval...),
2 bad input (config, arguments), as click does for usage errors.

Start-up: this module, like every command module, imports only typer and the standard library. rich
(20-45 ms of CPU with a table) is imported when something is first printed through `console` or
`err_console`, or a table goes to a terminal; the settings (pydantic-settings, about 0.1 s) when a
command first reads them. Plain lines (`echo`) and tables to a pipe need neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from .._config import LoadedConfig

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "MAX_ANSWER_BYTES",
    "CLIState",
    "bounded_get",
    "console",
    "echo",
    "err_console",
    "loaded_config",
    "print_json",
    "print_table",
    "progress",
    "shown",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PIPE_WIDTH = 10_000
"""Line width on stdout when it is not a terminal: tables and long lines are never wrapped for a pipe."""


class _LazyConsole:
    """A rich `Console` that is built (and rich imported) on first use, then stands in for it."""

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._built(), name)

    def print(self, *objects: Any, **options: Any) -> None:
        """`Console.print`, text passed through `shown` (it may quote servers' and agents' text)."""
        self._built().print(*(shown(item) if isinstance(item, str) else item for item in objects), **options)

    def _built(self) -> Console:
        if self._console is None:
            from rich.console import Console

            if self._stderr:
                self._console = Console(stderr=True, highlight=False, soft_wrap=True)
            else:
                width = None if sys.stdout.isatty() else PIPE_WIDTH
                self._console = Console(highlight=False, soft_wrap=True, width=width)
        return self._console


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))


def echo(message: str = "", *, err: bool = False) -> None:
    """One plain line for people (no markup, no rich): what commands that print a line or two use."""
    typer.echo(shown(message), err=err)


MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""Largest HTTP answer a command reads (a metrics page, a Prometheus query result): a bigger one fails."""


async def bounded_get(url: str, *, timeout_s: float, params: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """GET `url` (no proxy from the environment: the endpoints are local), as (status, reason, body):
    `timeout_s` bounds the whole answer, not each read, and the body MAX_ANSWER_BYTES, so a peer that
    trickles or floods cannot hold or fill the command.

    Raises:
        TimeoutError: no whole answer within `timeout_s`.
        ValueError: the answer is longer than MAX_ANSWER_BYTES.
        httpx2.HTTPError: the request failed.
    """
    import anyio
    import httpx2  # the mcp SDK's HTTP client, the project's one; imported by the commands that use it

    with anyio.fail_after(timeout_s):
        async with (
            httpx2.AsyncClient(trust_env=False, timeout=timeout_s, follow_redirects=True) as client,
            client.stream("GET", url, params=params) as response,
        ):
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ValueError(f"answer longer than {MAX_ANSWER_BYTES:,} bytes")
                chunks.append(chunk)
            return response.status_code, response.reason_phrase, b"".join(chunks)


def shown(text: str) -> str:
    """`text` as a terminal may show it: control characters (ESC, C1) and characters no one sees (bidi
    overrides, zero-width, line separators) escaped as `\\x1b`, `\\u202e`; line breaks and tabs kept. Output
    for people quotes tool names, agents' requests and records other processes wrote: none may move
    the cursor, recolour the terminal or reorder what a person reads."""
    return _SUSPECT.sub(_escaped_if_unseen, text)


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
    """Machine-readable output: one JSON document on stdout, nothing else. Letters of every script are
    written as they are; control, format and separator characters (C1 `U+009B`, bidi overrides, U+2028),
    which JSON leaves raw, are escaped: tool text from servers must not reach a terminal as such."""
    sys.stdout.write(shown(json.dumps(payload, indent=2, ensure_ascii=False, default=str)) + "\n")
    sys.stdout.flush()


_SUSPECT = re.compile(r"[^\t\n\x20-\x7e]")
"""Characters `shown` looks at: every one but tabs, line breaks and printable ASCII."""
_UNSEEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def _escaped_if_unseen(match: re.Match[str]) -> str:
    """A JSON escape (a surrogate pair past U+FFFF) for a character no one sees, else the character."""
    char = match.group(0)
    if unicodedata.category(char) not in _UNSEEN:
        return char
    return json.dumps(char)[1:-1]


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """An aligned table for people: rich on a terminal (bold header, cells wrapped to fit the width),
    the same columns as plain text when piped, without importing rich (about 30 ms of CPU).

    Cells are data (tool descriptions, config values), never rich markup.
    """
    header = [str(column) for column in columns]
    body = [["" if cell is None else shown(str(cell)) for cell in row] for row in rows]
    if not _stdout_styled():
        sys.stdout.write(plain_table(header, body))
        sys.stdout.flush()
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(*header, box=None, header_style="bold", pad_edge=False)
    for row in body:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The text rich prints for `print_table`'s table on an unstyled, unbounded console: every column
    as wide as its widest line, two spaces apart, a multi-line cell continuing on the lines below."""
    grid = [[cell.split("\n") for cell in row] for row in [header, *rows]]
    widths = [max((_cell_width(line) for row in grid for line in row[i]), default=0) for i in range(len(header))]
    lines = []
    for row in grid:
        for depth in range(max((len(cell) for cell in row), default=1)):
            parts = [cell[depth] if depth < len(cell) else "" for cell in row]
            lines.append(
                "  ".join(part + " " * (width - _cell_width(part)) for part, width in zip(parts, widths, strict=True))
            )
    return "".join(line + "\n" for line in lines)


def _cell_width(text: str) -> int:
    """Terminal cells `text` takes: East Asian wide characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text
    )


def _stdout_styled() -> bool:
    """Whether rich would style stdout: a terminal, or colour forced as rich's FORCE_COLOR and TTY_COMPATIBLE do."""
    forced = bool(os.environ.get("FORCE_COLOR")) or os.environ.get("TTY_COMPATIBLE") == "1"
    return forced or sys.stdout.isatty()


@contextlib.contextmanager
def progress(message: str, *, enabled: bool = True) -> Iterator[None]:
    """A spinner on stderr while long work runs; silent when stderr is not a terminal."""
    if not enabled or not err_console.is_terminal:
        yield
        return
    with err_console.status(message):
        yield
