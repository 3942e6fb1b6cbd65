"""An MCP server (stdio) offering the 590 real tool definitions of ../shared/data/catalogs, for load tests.

    python benchmarks/catalog_server.py [--catalogs DIR]

Each tool is served with its published description and input schema, under the name `<server>__<tool>`
(two catalogs may offer the same tool name, and one MCP server cannot list a name twice). A call answers
at once with one short text block naming the tool and its argument keys: the benchmark measures the
gateway, not the tools. An input schema without `type` (gitlab's) is served with `"type": "object"` added,
as protocol 2026-07-28 requires. Built on the SDK's low-level `Server`, so the 590 definitions are served exactly
as published (MCPServer would rebuild each schema from a Python signature).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

DEFAULT_CATALOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "catalogs"
NAME_SEPARATOR = "__"
# The gateway's own separator between server and tool, so a served name reads like a qualified one.


def load_tools(folder: Path) -> list[types.Tool]:
    """Every tool of every `<server>.json` in `folder` (a `tools/list` result each), renamed `<server>__<tool>`."""
    tools = []
    for path in sorted(folder.glob("*.json")):
        if path.name == "catalog-manifest.json":
            continue
        for raw in json.loads(path.read_text(encoding="utf-8")):
            schema = raw.get("inputSchema") or {}
            # The 2026-07-28 wire requires `type` on an input schema; gitlab's published ones are only
            # `{"$schema": ...}` (an object taking anything), which this keeps.
            schema = schema if "type" in schema else {**schema, "type": "object"}
            tools.append(
                types.Tool(
                    name=f"{path.stem}{NAME_SEPARATOR}{raw['name']}",
                    description=raw.get("description"),
                    input_schema=schema,
                )
            )
    if not tools:
        raise SystemExit(f"catalog_server: no tool lists (*.json) in {folder}")
    return tools


def build(tools: list[types.Tool]) -> Server[Any]:
    async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        keys = ", ".join(sorted(params.arguments or {})) or "no arguments"
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}: ok ({keys})")])

    return Server("catalog", on_list_tools=list_tools, on_call_tool=call_tool)


async def _main(folder: Path) -> None:
    server = build(load_tools(folder))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogs", type=Path, default=DEFAULT_CATALOGS, help="folder of <server>.json tool lists")
    args = parser.parse_args()
    anyio.run(_main, args.catalogs)


if __name__ == "__main__":
    main()
