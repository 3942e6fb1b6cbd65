"""A fork server for agent processes: imports the agent (and so `mcp`) once, then forks one child per run.

`import mcp` costs over a second of CPU; twenty agents on two cores would spend most of a test starting
up. The zygote pays it once: each spawn's command runs `forked.py` (stdlib only, starts in milliseconds),
which asks the zygote over a unix socket to fork a child that runs `agent.main(argv)` as its own process,
and exits with that child's status. The agents are still separate processes with their own MCP sessions.

    python tests/agents/zygote.py SOCKET_PATH      # prints "READY" once listening
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent


def _preload() -> None:
    """Run once what an agent's first run would otherwise import lazily in every child (the HTTP stack,
    anyio's asyncio backend): about half a second of CPU per agent."""
    import anyio
    import httpx2

    async def touch() -> None:
        async with httpx2.AsyncClient(verify=agent.TLS):
            pass

    anyio.run(touch)


def _child(conn: socket.socket, argv: list[str]) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        code = agent.main(argv)
    except BaseException:  # boundary: any failure is the agent's exit status, never a hang
        code = 1
    try:
        conn.sendall(f"{code}\n".encode())
    finally:
        os._exit(code)


def main() -> None:
    path = sys.argv[1]
    _preload()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    while True:
        conn, _ = server.accept()
        with conn.makefile("r") as reader:
            request = json.loads(reader.readline())
        if os.fork() == 0:
            server.close()
            _child(conn, request["argv"])
        conn.close()


if __name__ == "__main__":
    main()
