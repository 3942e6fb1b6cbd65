"""A small well-behaved MCP server over any transport: the reference peer for manager and gateway tests.

    python tests/servers/basic.py                                   # stdio
    python tests/servers/basic.py --transport streamable-http       # prints "PORT <n>"; http://127.0.0.1:<n>/mcp
    python tests/servers/basic.py --transport sse                   # prints "PORT <n>"; http://127.0.0.1:<n>/sse

Tools: echo(text), add(a, b), fail(message) (an isError result), sleep(seconds) (for timeouts),
whoami() (returns the value of $BASIC_SERVER_TAG, to check env reaches a stdio child).
`--name NAME` sets the server name; `--tools N` adds N extra tools `extra_0..` (catalog size tests).
`--grandchild` starts a `sleep 300` child first (a server with its own subprocess); `--linger` keeps
the process alive after stdin closes, until it is signalled (a server that ignores the polite close).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serve import add_transport_args, serve
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build(name: str = "basic", extra_tools: int = 0) -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    @server.tool(title="Echo", description="Echo the text back unchanged.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails with the given message (an isError result).")
    def fail(message: str = "it broke") -> str:
        raise ToolError(message)

    @server.tool(description="Sleep for the given number of seconds, then answer 'slept'.")
    async def sleep(seconds: float) -> str:
        import anyio

        await anyio.sleep(seconds)
        return "slept"

    @server.tool(description="The value of the BASIC_SERVER_TAG environment variable.")
    def whoami() -> str:
        return os.environ.get("BASIC_SERVER_TAG", "")

    for index in range(extra_tools):
        server.add_tool(_extra(index), name=f"extra_{index}", description=f"Extra tool number {index}.")
    return server


def _extra(index: int):  # type: ignore[no-untyped-def]
    """One extra tool bound to its number (the SDK refuses parameters named with a leading `_`)."""

    def extra(value: str = "") -> str:
        return f"extra {index}: {value}"

    return extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_transport_args(parser)
    parser.add_argument("--name", default="basic")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--linger", action="store_true")
    args = parser.parse_args()
    if args.grandchild:
        subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    serve(build(args.name, args.tools), args)
    if args.linger:
        time.sleep(300)


if __name__ == "__main__":
    main()
