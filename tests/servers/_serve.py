"""Run an MCP server over the transport named on the command line (shared by the test servers).

stdio: serves stdin/stdout. streamable-http / sse: binds 127.0.0.1 on the given port (0 = an
ephemeral port), then prints `PORT <n>` on stdout so the starter knows where to connect. The socket
is listening before the line is printed, so a client may connect as soon as it reads it.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

__all__ = ["add_transport_args", "serve", "serve_legacy", "warm"]


def add_transport_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=["stdio", "streamable-http", "sse"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)


def serve(server: Any, args: argparse.Namespace) -> None:
    """Serve `server` (an MCPServer) over `args.transport`."""
    if args.transport == "stdio":
        server.run()
        return
    import anyio
    import uvicorn

    if args.transport == "sse":
        app = server.sse_app(host=args.host)
    else:
        app = server.streamable_http_app(host=args.host)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    sys.stdout.write(f"PORT {sock.getsockname()[1]}\n")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve, [sock])


def serve_legacy(server: Any) -> None:
    """Serve `server` over stdio in the handshake era only (as 1.x servers and the TypeScript SDK's do), so
    a changed tool list arrives as `notifications/tools/list_changed`."""
    import anyio
    from mcp.server.lowlevel import NotificationOptions
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # test-only: MCPServer has no public handshake-only runner
    options = lowlevel.create_initialization_options(NotificationOptions(tools_changed=True))

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream), lowlevel.lifespan(lowlevel) as state:
            await serve_loop(lowlevel, read_stream, write_stream, lifespan_state=state, init_options=options)

    anyio.run(run)


def warm() -> None:
    """What every server imports and starts, done once by the zygote that forks them (tests/zygote.py)."""
    import anyio
    import mcp.server.stdio  # noqa: F401
    import uvicorn  # noqa: F401  # the HTTP transports
    from mcp.server import MCPServer  # noqa: F401
    from mcp.server.lowlevel import Server  # noqa: F401

    async def nothing() -> None:
        pass

    anyio.run(nothing)  # anyio's asyncio backend, imported on first use
