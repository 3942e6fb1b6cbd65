"""An MCP server that prints garbage on stdout between well-formed messages (stdio).

    python tests/servers/garbage.py

Before serving it prints a banner and a progress line on stdout (as careless servers do); the tool
`shout(text)` prints a non-JSON line on stdout before answering. Otherwise it works: tools `shout`
and `still_here`. It serves stdio with explicit streams, so the SDK does not divert stray prints.
"""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(
        name="shout",
        description="Print a line of garbage on stdout, then answer with the text upper-cased.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(name="still_here", description="Answer 'yes'.", input_schema={"type": "object", "properties": {}}),
]


async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "shout":
        print("LOG: shouting now (garbage on stdout)", flush=True)
        text = str((params.arguments or {}).get("text", "")).upper()
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    return types.CallToolResult(content=[types.TextContent(type="text", text="yes")])


async def _main() -> None:
    print("garbage-server v0.1 starting (this line is not JSON-RPC)", flush=True)
    print("{not even json", flush=True)
    server = Server("garbage", on_list_tools=list_tools, on_call_tool=call_tool)
    stdin = anyio.wrap_file(sys.stdin)
    stdout = anyio.wrap_file(sys.stdout)
    async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_main)
