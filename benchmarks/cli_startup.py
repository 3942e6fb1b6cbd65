"""CLI start-up: CPU and wall time of short-lived commands, next to `python -c pass` in the same run.

    .venv/bin/python benchmarks/cli_startup.py [--runs N]

Each command runs N times as a child process (the `orchestrator` console script next to this Python, as
a user runs it; `python -c "... main()"` when it is not installed), round-robin so that load from other
work on the machine spreads over every command alike. One unmeasured run per command first writes the
bytecode cache, to a temporary PYTHONPYCACHEPREFIX: the tree stays clean, and PYTHONDONTWRITEBYTECODE
cannot make every run compile the sources again. CPU time is the child's user + sys from `os.wait4`;
wall time is from start to reaped. Every run must exit 0 and print something, otherwise the figure
would be the cost of failing. The floor row imports what `config check` cannot avoid (typer and the
settings stack, exiting as the CLI does), so a command's own share shows next to it.

Target: `orchestrator --help`, `config check` and `config show` (with the repo's bernstein.yaml) each
at most 0.25 s of CPU (median).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from _common import REPO, add_results_flag, median, report_targets, run_recorded, table

DEFAULT_RUNS = 7
TTY_SIZE = (120, 40)
"""Columns and rows of the pseudo-terminal with --tty: a common terminal window."""
TTY_DRAIN_TIMEOUT_S = 5.0
"""The child has exited when the drain is joined; this only bounds a reader stuck on a bad terminal."""
TARGET_CPU_S = 0.25
CONFIG = REPO / "bernstein.yaml"
FLOOR = "import typer, pydantic_settings, yaml, orchestrator._config, gc; gc.freeze()"
"""What `config check` cannot avoid: the CLI framework and the settings stack, then the same quick exit
as `orchestrator._cli.main` (gc.freeze). Shown, not judged: a command's CPU minus this is the CLI's own
share (parsing, reading the config, printing)."""


@dataclass
class Command:
    label: str
    argv: list[str]
    target: bool
    """Held to TARGET_CPU_S (the baseline is not)."""
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def cli_argv() -> list[str]:
    """How a user starts the CLI: the console script installed next to this interpreter."""
    script = Path(sys.executable).with_name("orchestrator")
    if script.exists():
        return [str(script)]
    return [
        sys.executable,
        "-c",
        "import sys; from orchestrator._cli import main; sys.argv[0] = 'orchestrator'; main()",
    ]


def child_env(pycache: Path) -> dict[str, str]:
    """The children's environment: bytecode cached (in `pycache`, outside the tree), as an installed CLI has it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("BERNSTEIN_CONFIG", None)  # --config names the file; the environment must not pick another
    # With PYTHONDONTWRITEBYTECODE every run would compile the project's sources again (tens of ms):
    # a cost no installed CLI pays, since pip compiles a wheel's modules and Python caches the rest.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def run_once(
    argv: Sequence[str], env: dict[str, str], *, prints: bool = True, tty: bool = False
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run; exits when the command fails or (`prints`) prints nothing.

    `tty`: stdout is a pseudo-terminal of TTY_SIZE, as for a user at a terminal (rich styles and wraps).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with _stdout(tty, out) as (stdout, received):
            start = time.perf_counter()
            process = subprocess.Popen(argv, stdout=stdout, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO, env=env)
            _pid, status, usage = os.wait4(process.pid, 0)
            wall = time.perf_counter() - start
            process.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        out.seek(0)
        printed = bytes(received) + out.read()
        if process.returncode != 0 or (prints and not printed):
            raise SystemExit(f"{' '.join(argv)} exited {process.returncode}: {_last_line(err)}")
    return usage.ru_utime + usage.ru_stime, wall


@contextlib.contextmanager
def _stdout(tty: bool, file: IO[bytes]) -> Iterator[tuple[IO[bytes] | int, bytearray]]:
    """The child's stdout and what a terminal received: `file` (and nothing), or a pseudo-terminal whose
    output a thread collects until the child closes it."""
    received = bytearray()
    if not tty:
        yield file, received
        return
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", TTY_SIZE[1], TTY_SIZE[0], 0, 0))

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
            while chunk := os.read(master, 65536):
                received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield slave, received
    finally:
        os.close(slave)
        reader.join(timeout=TTY_DRAIN_TIMEOUT_S)
        os.close(master)


def _last_line(err: IO[bytes]) -> str:
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help=f"runs per command (default {DEFAULT_RUNS})")
    parser.add_argument("--tty", action="store_true", help="stdout on a pseudo-terminal, as at a terminal")
    add_results_flag(parser)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    cli = cli_argv()
    commands = [
        Command("python -c pass", [sys.executable, "-c", "pass"], target=False),
        Command("floor: typer + settings imports", [sys.executable, "-c", FLOOR], target=False),
        Command("orchestrator --help", [*cli, "--help"], target=True),
        Command("orchestrator config check", [*cli, "--config", str(CONFIG), "config", "check"], target=True),
        Command("orchestrator config show", [*cli, "--config", str(CONFIG), "config", "show"], target=True),
    ]
    with tempfile.TemporaryDirectory(prefix="cli-startup-pycache-") as pycache:
        env = child_env(Path(pycache))
        for command in commands:  # warm-up: write the bytecode cache, load the files into the page cache
            run_once(command.argv, env, prints=command.target, tty=args.tty)
        for _ in range(args.runs):
            for command in commands:
                cpu, wall = run_once(command.argv, env, prints=command.target, tty=args.tty)
                command.cpu.append(cpu)
                command.wall.append(wall)

    baseline = median(commands[0].cpu)
    floor = median(commands[1].cpu)
    where = "a pseudo-terminal" if args.tty else "a file"
    print(f"CLI start-up, median of {args.runs} runs each, stdout to {where} ({' '.join(cli)})\n")
    table(
        ("command", "CPU s", "wall s", "CPU over python -c pass", "CPU over floor", "CPU min-max"),
        [
            (
                c.label,
                f"{median(c.cpu):.3f}",
                f"{median(c.wall):.3f}",
                f"{median(c.cpu) - baseline:+.3f}" if c is not commands[0] else "",
                f"{median(c.cpu) - floor:+.3f}" if c.target else "",
                f"{min(c.cpu):.3f}-{max(c.cpu):.3f}",
            )
            for c in commands
        ],
    )
    return report_targets(
        [
            (f"{c.label}: median CPU {median(c.cpu):.3f} s <= {TARGET_CPU_S} s", median(c.cpu) <= TARGET_CPU_S)
            for c in commands
            if c.target
        ]
    )


if __name__ == "__main__":
    sys.exit(run_recorded(main))
