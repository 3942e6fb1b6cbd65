"""An MCP server whose children try to outlive it (stdio): two of them ignore SIGTERM, one leaves its session.

    python tests/servers/escaping.py --pid-dir DIR [--linger]

Before serving (and before importing the SDK) it forks two children that ignore SIGTERM and wait forever
with stdin and stdout on /dev/null:

- `group`: stays in the server's process group and keeps its stderr;
- `session`: daemonizes: forks, calls `setsid()`, forks again and the middle process exits, so it is in a
  new session and process group, orphaned, holding none of the server's pipes.

Then it writes `DIR/<server pid>.json`, `{"server": pid, "group": pid, "session": pid}` (through a
rename: a reader never sees half a file; one file per start, so restarts leave one each), and serves
`echo(text)` and `crash()` (exits with status 3 in the middle of the call).
With `--linger` the server itself ignores SIGTERM and keeps running after stdin closes: only SIGKILL
ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path


def fork_child(role: str, report: int) -> int:
    """Fork a child that ignores SIGTERM and writes `<role> <pid>` to `report`; the server's copy returns
    the forked pid (for `session`, the middle process, which exits at once)."""
    pid = os.fork()
    if pid:
        return pid
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if role == "session":
        os.setsid()
        if os.fork():
            os._exit(0)
        os.dup2(null, 2)
    os.write(report, f"{role} {os.getpid()}\n".encode())
    while True:
        signal.pause()


def start_children() -> dict[str, int]:
    report_r, report_w = os.pipe()
    fork_child("group", report_w)
    middle = fork_child("session", report_w)
    os.close(report_w)
    os.waitpid(middle, 0)
    pids = {"server": os.getpid()}
    with os.fdopen(report_r, "rb") as report:
        while len(pids) < 3:  # both children hold the pipe for ever: read lines, not to EOF
            role, pid = report.readline().split()
            pids[role.decode()] = int(pid)
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pid-dir", required=True, type=Path)
    parser.add_argument("--linger", action="store_true")
    args = parser.parse_args()
    if args.linger:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    target = args.pid_dir / f"{os.getpid()}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(start_children()))
    os.replace(partial, target)

    from mcp.server import MCPServer

    server = MCPServer("escaping", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Exit the server process (status 3) in the middle of this call.")
    def crash() -> str:
        os._exit(3)

    server.run()
    while args.linger:
        signal.pause()


if __name__ == "__main__":
    main()
