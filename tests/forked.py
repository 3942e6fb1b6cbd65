"""Run a script as a child of the zygote (zygote.py) and exit as it exits. Stdlib only.

    python -I -S tests/forked.py SOCKET_PATH SCRIPT ARGS...
    python -I -S tests/forked.py SOCKET_PATH -m MODULE ARGS...    # as `python -m MODULE ARGS...`

This process hands the zygote its stdin, stdout and stderr, arguments, environment and working
directory; the forked child serves on them. Signals sent here (SIGTERM, SIGINT, SIGHUP, SIGQUIT) are
passed on to the child, and this process ends with the child's status, or by the signal that ended it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main() -> int:
    path, script, *args = sys.argv[1:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as exc:
        print(f"forked.py: no zygote at {path}: {exc}", file=sys.stderr)
        return 1
    request = {"args": args, "env": dict(os.environ), "cwd": os.getcwd()}
    if script == "-m" and args:
        request.update(module=args[0], args=args[1:])
    else:
        request["script"] = os.path.abspath(script)
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    # The server holds stdin and stdout now: its reader sees the end of stdout when the server's copy closes.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    reader = conn.makefile("rb")
    started = reader.readline().split()
    if started[:1] != [b"PID"]:
        return 1
    pid = int(started[1])
    for passed in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(passed, lambda number, _frame: os.kill(pid, number))
    ended = reader.readline().split()
    code = int(ended[1]) if ended[:1] == [b"EXIT"] else 1
    if code < 0:  # killed by a signal: so is this process, so its parent sees the same end
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
