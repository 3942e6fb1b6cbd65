"""An MCP server with many tools served over several `tools/list` pages (stdio).

    python tests/servers/paged.py [--tools 250] [--page-size 40]

Tools are `tool_000` .. `tool_249`, each taking `{"value": string}` and answering `"tool_NNN: value"`.
Cursors are opaque strings; a client that does not follow `nextCursor` sees only the first page.
"""

from __future__ import annotations

import argparse

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def build(count: int, page_size: int) -> Server:
    tools = [
        types.Tool(
            name=f"tool_{index:03d}",
            title=f"Tool {index}",
            description=f"Paged test tool number {index}; answers with its own name and the value.",
            input_schema={"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]},
            annotations=types.ToolAnnotations(read_only_hint=True),
        )
        for index in range(count)
    ]

    async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        start = int(params.cursor.removeprefix("page-")) if params and params.cursor else 0
        end = start + page_size
        return types.ListToolsResult(tools=tools[start:end], next_cursor=f"page-{end}" if end < count else None)

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        value = (params.arguments or {}).get("value", "")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}: {value}")])

    return Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def _main(count: int, page_size: int) -> None:
    server = build(count, page_size)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=250)
    parser.add_argument("--page-size", type=int, default=40)
    args = parser.parse_args()
    anyio.run(_main, args.tools, args.page_size)


if __name__ == "__main__":
    main()
