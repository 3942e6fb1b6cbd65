"""A fork server for the processes tests start by the hundred: imports their modules once, then forks one
child per start.

Importing the mcp SDK costs a test server or agent about 1.6 s of CPU before it does anything, and the
suite starts over a hundred. Each start through `forked.py` (stdlib only, a few milliseconds) hands this
process the launcher's stdin, stdout and stderr; a forked child takes them as its own and runs the script
as `__main__` (a preloaded one through its `main()`), or a module as `python -m` would, with the
launcher's arguments, environment and working directory. Its exit status goes back to the launcher, which
exits with it (or dies by the same signal); the signals a client sends the launcher are passed on, and a
child whose launcher is gone (SIGKILL) kills itself. So the client sees one process that behaves as the script would, though not
the script's own process tree: tests that look at process trees start the scripts directly.

    python tests/zygote.py SOCKET_PATH PRELOAD...   # prints "READY" once listening; exits when stdin closes

Each PRELOAD.py is imported (its folder first on sys.path) and its `warm()`, if it has one, run: what
every child would otherwise import or build itself (tests/servers/_serve.py, tests/agents/agent.py). A
PRELOAD without `.py` is a module name, imported (the published `mcp_server_time`, run with `-m`).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

REQUEST_BYTES = 1 << 20
"""Largest request (script, arguments, environment, working directory) read in one message."""


def _preload(paths: list[str]) -> dict[str, Any]:
    """Import each file as a module (its folder first on sys.path) and run its `warm()`, and each module
    name; the files' modules by resolved path."""
    modules = {}
    for path in paths:
        if not path.endswith(".py"):
            importlib.import_module(path)
            continue
        file = Path(path).resolve()
        sys.path.insert(0, str(file.parent))
        module = importlib.import_module(file.stem)
        warm = getattr(module, "warm", None)
        if warm is not None:
            warm()
        modules[str(file)] = module
    return modules


def _child(conn: socket.socket, fds: list[int], request: dict[str, Any], preloaded: dict[str, Any]) -> None:
    """Become the process the launcher asked for: its stdio, arguments, environment and directory."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    threading.Thread(target=_die_with_launcher, args=(conn,), daemon=True).start()
    module_name = request.get("module")
    script = str(Path(request["script"]).resolve()) if module_name is None else ""
    sys.argv = [script or module_name, *request["args"]]
    if script:
        sys.path.insert(0, str(Path(script).parent))
    code = 0
    try:
        module = preloaded.get(script)
        if module_name is not None:
            runpy.run_module(module_name, run_name="__main__", alter_sys=True)
        elif module is not None:
            code = module.main() or 0  # what it built at import is kept: that was the point of preloading it
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # boundary: the script's failure is its exit status, as in its own process
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _die_with_launcher(conn: socket.socket) -> None:
    """The launcher never writes after its request: end of stream means it is gone, and this process goes too."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    path = sys.argv[1]
    preloaded = _preload(sys.argv[2:])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # reaped in the loop below; the handler only wakes it
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    children: dict[int, socket.socket] = {}
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                message, fds, _flags, _address = socket.recv_fds(conn, REQUEST_BYTES, 3)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    selector.close()
                    listener.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    for other in children.values():
                        other.close()
                    _child(conn, fds, json.loads(message), preloaded)
                for fd in fds:
                    os.close(fd)
                try:
                    conn.sendall(f"PID {pid}\n".encode())
                    children[pid] = conn
                except OSError:  # the launcher is gone already
                    os.kill(pid, signal.SIGKILL)
                    conn.close()
            elif key.data == "reap":
                _drain(wake_read)
                _reap(children)
            elif not os.read(sys.stdin.fileno(), 512):  # the test run is over
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each ended child's launcher how it ended: `EXIT <code>` (minus the signal that killed it)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"EXIT {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


if __name__ == "__main__":
    main()
