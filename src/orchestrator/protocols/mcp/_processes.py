"""Starting a stdio server's process so that nothing it starts outlives it, and ending all of it.

On Linux the server runs under a keeper (`_keeper.py`, a small standard-library Python process started in
the server's place, in its own session): a child subreaper that ends every process below it, whatever
its session or process group, when the server exits, when asked to stop, or when the process that
started it dies, even by SIGKILL. The manager itself reaps nothing but its own children: asyncio's
child watcher keeps every exit status it waits for, and agent CLIs the launcher starts are left alone.

Elsewhere (macOS, the BSDs), or when no interpreter file is at hand to run the keeper (a frozen
executable), the server is started directly in its own session and process group, and its whole group
is ended when it stops (docs/servers.md, "Process cleanup": what each way covers).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc

__all__ = ["KEEPER_MARGIN_S", "KEEPER_SCRIPT", "ServerProcess", "exited", "keeper_usable", "open_server_process"]

KEEPER_SCRIPT = Path(__file__).with_name("_keeper.py")
"""Run as a script by the interpreter running orchestrator, isolated (`-I`) and without `site` (`-S`)."""
KEEPER_MARGIN_S = 1.0
"""Beyond the keeper's grace: for it to SIGKILL what ignored SIGTERM, reap it and exit."""
REPORT_BYTES = 64
"""The keeper's report is one short line: `ok <pid>` or `error <errno>`."""
EXIT_POLL_S = 0.01
"""How often the exit of a stopping process is checked."""


@dataclass(eq=False)
class ServerProcess:
    """A started stdio server: the process the manager holds (its keeper, or the server itself)."""

    process: anyio.abc.Process
    """Its stdin and stdout are the server's; on Linux it is the keeper, whose exit status is the server's."""
    kept: bool
    """Whether a keeper runs the server (Linux), or the server was started directly."""
    server_pid: int | None = None
    """The server's own pid, once `started()` has returned."""
    _report_fd: int | None = field(default=None, repr=False)

    async def started(self) -> None:
        """Wait for the keeper to start the server.

        Raises:
            OSError: the command could not be started (the errno of its failed exec), or the keeper
                exited without a word.
        """
        if self._report_fd is None:
            if not self.kept:
                self.server_pid = self.process.pid
            return
        fd = self._report_fd
        try:
            await anyio.wait_readable(fd)
            report = os.read(fd, REPORT_BYTES).decode("ascii", "replace").split()
        finally:
            self.close()
        if report[:1] == ["ok"] and len(report) == 2 and report[1].isdigit():
            self.server_pid = int(report[1])
            return
        if report[:1] == ["error"] and len(report) == 2 and report[1].isdigit():
            number = int(report[1])
            raise OSError(number, os.strerror(number))
        raise OSError(errno.ECHILD, "its process keeper exited before starting it")

    def close(self) -> None:
        """Close the report pipe (idempotent)."""
        fd, self._report_fd = self._report_fd, None
        if fd is not None:
            os.close(fd)

    async def end(self, grace_s: float) -> None:
        """End the server and every process it started: SIGTERM, `grace_s`, SIGKILL.

        Under a keeper the keeper does it (and exits); one that has not exited `KEEPER_MARGIN_S` after
        its grace is killed with its process group, and the server with it. Then the process group gets
        SIGTERM and SIGKILL as the mcp SDK's stdio client does it: the whole job without a keeper, at
        most a backstop with one.
        """
        from mcp.os.posix.utilities import terminate_posix_process_tree

        process = self.process
        if self.kept and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            if not await exited(process, grace_s + KEEPER_MARGIN_S):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        # The started process's pid is its group id (start_new_session); the group outlives it while a child
        # left in it is alive, and ESRCH tells us the group is already empty, as it is once a keeper has
        # ended its tree. What is left: a server's children after it was started without a keeper, or after
        # its keeper was killed from outside (the server dies with its keeper; they do not).
        await terminate_posix_process_tree(process, grace_s)


def keeper_usable() -> bool:
    """Whether servers can run under a keeper here: Linux with `/proc`, and an interpreter file to run it."""
    return (
        sys.platform == "linux"
        and not getattr(sys, "frozen", False)
        and os.path.isfile(sys.executable)
        and KEEPER_SCRIPT.is_file()
        and os.path.isfile("/proc/self/stat")
    )


async def open_server_process(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    stderr: IO[Any] | None,
    grace_s: float,
) -> ServerProcess:
    """Start `command` with piped stdin and stdout, in its own session: under a keeper when
    `keeper_usable()`, which ends what the server leaves after `grace_s` (SIGTERM to SIGKILL).

    Returns at once after the spawn: call `started()` (inside the `try` that ends the process) to learn
    whether the command itself could be started.

    Raises:
        OSError: the process (the keeper, or the server without one) cannot be started, e.g. `cwd` is missing.
    """
    if not keeper_usable():
        process = await anyio.open_process(list(command), env=env, cwd=cwd, stderr=stderr, start_new_session=True)
        return ServerProcess(process, kept=False)
    report_r, report_w = os.pipe()
    keeper = [
        sys.executable,
        "-I",
        "-S",
        str(KEEPER_SCRIPT),
        str(report_w),
        str(os.getpid()),
        f"{grace_s:g}",
        "--",
        *command,
    ]
    try:
        process = await anyio.open_process(
            keeper, env=env, cwd=cwd, stderr=stderr, start_new_session=True, pass_fds=(report_w,)
        )
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    return ServerProcess(process, kept=True, _report_fd=report_r)


async def exited(process: anyio.abc.Process, within_s: float) -> bool:
    """Whether the process exited within `within_s`; polls `returncode` (`wait()` also waits for pipe EOF,
    which a surviving child holding the pipe would delay)."""
    deadline = anyio.current_time() + within_s
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(EXIT_POLL_S)
    return True
