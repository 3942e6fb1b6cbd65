"""An MCP server whose tool list changes at run time, and that says so (stdio).

    python tests/servers/changing.py            # 2026-07-28: the change reaches `subscriptions/listen` streams
    python tests/servers/changing.py --legacy   # serves only the initialize handshake (like 1.x servers)
                                                # and the change arrives as notifications/tools/list_changed

Tools: `add_tool(name)` registers a new tool `name` (answering "I am <name>") and announces the change;
`remove_tool(name)` removes one and announces it; `base()` is always there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serve import serve_legacy
from mcp.server import MCPServer
from mcp.server.mcpserver.context import Context


def build(legacy: bool) -> MCPServer:
    server = MCPServer("changing", log_level="WARNING")

    async def announce(ctx: Context) -> None:
        if legacy:
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.notify_tools_changed()

    @server.tool(description="Always present.")
    def base() -> str:
        return "base"

    @server.tool(description="Register a new tool with the given name and announce the change.")
    async def add_tool(name: str, ctx: Context) -> str:
        def added() -> str:
            return f"I am {name}"

        server.add_tool(added, name=name, description=f"Added at run time: {name}.")
        await announce(ctx)
        return f"added {name}"

    @server.tool(description="Remove a tool by name and announce the change.")
    async def remove_tool(name: str, ctx: Context) -> str:
        server.remove_tool(name)
        await announce(ctx)
        return f"removed {name}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--legacy", action="store_true")
    args = parser.parse_args()
    server = build(args.legacy)
    if args.legacy:
        serve_legacy(server)
    else:
        server.run()


if __name__ == "__main__":
    main()
