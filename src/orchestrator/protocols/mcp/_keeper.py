"""The keeper of one stdio server (Linux): nothing the server starts outlives the server or its starter.

    python -I -S _keeper.py REPORT_FD PARENT_PID GRACE_S -- COMMAND [ARG...]

The manager starts this script in place of a stdio server (`_processes.open_server_process`). It starts
COMMAND as its child with the same stdin, stdout and stderr (it keeps no copy of stdin or stdout, so the
manager sees end of file when the server goes), writes `ok <server pid>` or `error <errno>` (the command
could not be started) to REPORT_FD, and then:

- it is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process below it whose parent exits becomes its
  child instead of init's, so a child that called `setsid()` or daemonized with a double fork stays in
  its tree, found by walking `/proc`, and its exit status is reaped here;
- when the server exits, when it is asked to stop (SIGTERM or SIGINT), or when the process that started
  it dies (`PR_SET_PDEATHSIG` sends SIGHUP; acted on once `getppid()` shows the parent process is gone,
  since the kernel also sends it when only the thread that started the keeper exits), it ends every
  process below it: SIGTERM and SIGCONT, up to GRACE_S for them to exit, then SIGKILL;
- the server itself dies with the keeper if the keeper is killed (`PR_SET_PDEATHSIG` SIGKILL);
- it exits with the server's status (128 + N for a server killed by signal N) once no process below it
  is left.

Standard library only, run without `site`, so it starts in tens of milliseconds and costs each server
about 5 MB of its own memory. It must not import anything from orchestrator: it runs as a script.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

__all__ = ["descendants", "main"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_GONE = signal.SIGHUP
"""What the kernel sends the keeper when the thread that started it exits (`PR_SET_PDEATHSIG`)."""
STOP = frozenset({signal.SIGTERM, signal.SIGINT})
WATCHED = frozenset({signal.SIGCHLD, PARENT_GONE, *STOP})
"""Blocked for the whole run and taken with `sigwaitinfo`, so no handler ever interrupts the keeper."""
POLL_S = 0.05
"""How often the tree is walked while waiting for it to exit (a direct child's exit wakes it sooner)."""
KILL_WAIT_S = 0.5
"""After SIGKILL, for the killed processes to be gone; only one stuck in the kernel (state D) runs it out."""
EXIT_UNKNOWN = 1
"""The keeper's status when the server's own was never seen."""


def main(argv: list[str]) -> int:
    report_fd, parent, grace_s, command = _parse(argv)
    os.set_inheritable(report_fd, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, PARENT_GONE)
    if os.getppid() != parent:  # the starter died before the death signal was armed
        return EXIT_UNKNOWN
    try:
        server = _spawn(command)
    except OSError as exc:
        _report(report_fd, f"error {exc.errno or 0}")
        return 127
    _report(report_fd, f"ok {server}")
    _detach_stdio()
    status = _watch(server, parent)
    status = _end_tree(grace_s, server, status)
    if status is None:
        return EXIT_UNKNOWN
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _parse(argv: list[str]) -> tuple[int, int, float, list[str]]:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _keeper.py REPORT_FD PARENT_PID GRACE_S -- COMMAND [ARG...]\n")
        raise SystemExit(2)
    return int(argv[0]), int(argv[1]), float(argv[2]), argv[4:]


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}): {os.strerror(error)}")


def _spawn(command: list[str]) -> int:
    """Fork and exec the server; OSError when exec fails (its errno comes back through a close-on-exec pipe)."""
    keeper = os.getpid()
    errors_r, errors_w = os.pipe()  # close-on-exec: the pipe closes empty when exec succeeds
    pid = os.fork()
    if pid == 0:  # the server, until exec: nothing here may return into the keeper's code
        try:
            os.close(errors_r)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != keeper:
                os._exit(EXIT_UNKNOWN)
            # What Python set for itself is not the server's: SIGPIPE and SIGXFSZ ignored, signals blocked.
            for ignored in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(ignored, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(errors_w, str(exc.errno or 0).encode())
        finally:
            os._exit(127)
    os.close(errors_w)
    chunks = []
    while chunk := os.read(errors_r, 64):
        chunks.append(chunk)
    os.close(errors_r)
    if chunks:
        os.waitpid(pid, 0)
        code = int(b"".join(chunks))
        raise OSError(code, os.strerror(code))
    return pid


def _report(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the starter may be gone already; the run goes on regardless
        os.write(fd, (line + "\n").encode())
    os.close(fd)


def _detach_stdio() -> None:
    """Give up the keeper's copies of stdin and stdout: the server's end of file must be the manager's."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def _watch(server: int, parent: int) -> int | None:
    """Wait until the server exits (its wait status) or the keeper must stop (None)."""
    while True:
        info = signal.sigwaitinfo(WATCHED)
        if info.si_signo == signal.SIGCHLD:
            status = _reap(server)
            if status is not None:
                return status
        elif info.si_signo == PARENT_GONE and os.getppid() == parent:
            continue  # only the thread that started the keeper exited; its process lives on
        else:
            return None


def _reap(server: int) -> int | None:
    """Reap every child that has exited (the server, or an orphan handed to the keeper); the server's status."""
    found = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == server:
            found = status


def _end_tree(grace_s: float, server: int, status: int | None) -> int | None:
    """SIGTERM and SIGCONT to every process below the keeper, up to `grace_s` for them to exit, then
    SIGKILL until none is left; returns the server's wait status once it is reaped."""
    me = os.getpid()
    for pid, started in descendants(me).items():
        _send(pid, started, signal.SIGTERM)
        _send(pid, started, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    deadline = time.monotonic() + grace_s
    while True:
        status = _reaped(server, status)
        left = descendants(me)
        if not left:
            return status
        if time.monotonic() >= deadline:
            break
        signal.sigtimedwait({signal.SIGCHLD}, POLL_S)
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        status = _reaped(server, status)
        left = descendants(me, zombies=True)
        if not left or time.monotonic() >= deadline:
            return status
        for pid, started in left.items():
            _send(pid, started, signal.SIGKILL)
        signal.sigtimedwait({signal.SIGCHLD}, POLL_S / 5)


def _reaped(server: int, status: int | None) -> int | None:
    """Reap what has exited; the server's wait status, whether it was reaped just now or before."""
    now = _reap(server)
    return status if now is None else now


def descendants(root: int, *, zombies: bool = False) -> dict[int, int]:
    """Every process below `root` (pid -> start time in clock ticks) from one walk of `/proc`, whatever
    its session or process group; zombies only when asked (they are dead, only not yet reaped)."""
    children: dict[int, list[int]] = {}
    facts: dict[int, tuple[bytes, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields is None:
            continue
        state, ppid, started = fields
        children.setdefault(ppid, []).append(int(name))
        facts[int(name)] = (state, started)
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            state, started = facts[child]
            if zombies or state != b"Z":
                found[child] = started
            todo.append(child)
    return found


def _stat(pid: int) -> tuple[bytes, int, int] | None:
    """(state, ppid, start time) of a process from `/proc/<pid>/stat`; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def _send(pid: int, started: int, number: int) -> None:
    """Signal `pid` only if it is still the process seen in the walk (same start time): a pid reused
    since then belongs to someone else. A pidfd pins the process between the check and the signal."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd on this kernel: check, then signal by pid
        fields = _stat(pid)
        if fields is not None and fields[2] == started:
            with contextlib.suppress(OSError):
                os.kill(pid, number)
        return
    try:
        fields = _stat(pid)
        if fields is not None and fields[2] == started:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, number)
    finally:
        os.close(pidfd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
