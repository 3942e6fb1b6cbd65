"""An MCP server that exits in the middle of a call (stdio).

    python tests/servers/crashy.py [--refuse-restart MARKER]

Tools: `ping()` answers "pong"; `crash()` writes "crashy: fatal: crashing on purpose" to stderr and
exits with status 3 before answering. With `--refuse-restart MARKER` the first start creates the file
MARKER and every later start (a restart) writes "crashy: refusing to restart" to stderr and exits 1 at
once, before importing anything heavy: a server whose restarts keep failing.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and "--refuse-restart" in sys.argv:
    _marker = sys.argv[sys.argv.index("--refuse-restart") + 1]
    if os.path.exists(_marker):
        sys.stderr.write("crashy: refusing to restart\n")
        sys.exit(1)
    open(_marker, "w").close()

from mcp.server import MCPServer


def build() -> MCPServer:
    server = MCPServer("crashy", log_level="WARNING")

    @server.tool(description="Answer pong.")
    def ping() -> str:
        return "pong"

    @server.tool(description="Exit the server process in the middle of this call.")
    def crash() -> str:
        sys.stderr.write("crashy: fatal: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    return server


if __name__ == "__main__":
    build().run()
