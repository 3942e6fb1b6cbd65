"""A small real MCP agent: reads the MCP config it was given, finds a tool, calls it, writes what happened.

    python tests/agents/agent.py --config MCP_CONFIG.json --out RESULT.json \
        [--tool get_current_time] [--query "current time"] [--arguments '{"timezone": "UTC"}'] [--mode auto|legacy]

The config is the file `orchestrator spawn` writes (Claude Code's `--mcp-config` shape:
`{"mcpServers": {NAME: {"type": "http", "url": ..., "headers": {...}}}}`); the first server is used.
Search mode (the gateway lists `tool_search`): search, expand the hit for `--tool`, run it with `call_tool`.
Full mode: call the listed tool whose original name is `--tool` directly. Exit 0 when the call succeeded.
`main(argv)` is importable so tests can run many agents from one pre-imported process (tests/zygote.py).
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HTTP_TIMEOUT = httpx2.Timeout(30.0, read=120.0)
# Generous: 20 agents share two cores in the concurrency test.
TLS = ssl.create_default_context()
# Built once at import (so once per zygote, not once per forked agent): httpx builds one per client
# otherwise, about 50 ms of CPU each, though the gateway is plain HTTP.


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tool", default="get_current_time")
    parser.add_argument("--query", default="current time in a timezone")
    parser.add_argument("--arguments", default='{"timezone": "UTC"}')
    parser.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    return parser.parse_args(argv)


def _payload(result: Any) -> Any:
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    joined = "\n".join(texts)
    try:
        return json.loads(joined)
    except ValueError:
        return joined


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = json.loads(args.config.read_text(encoding="utf-8"))
    server = next(iter(config["mcpServers"].values()))
    report: dict[str, Any] = {"url": server["url"], "ok": False}
    started = time.perf_counter()
    async with (
        httpx2.AsyncClient(headers=server.get("headers") or {}, timeout=HTTP_TIMEOUT, verify=TLS) as http,
        Client(streamable_http_client(server["url"], http_client=http), mode=args.mode) as client,
    ):
        listed = [tool.name for tool in (await client.list_tools()).tools]
        report["listed"] = listed
        arguments = json.loads(args.arguments)
        if "tool_search" in listed:
            report["mode"] = "search"
            found = _payload(await client.call_tool("tool_search", {"query": args.query}))
            report["first_search_s"] = time.perf_counter() - started
            report["first_search_at"] = time.time()  # wall clock, for latency measured by the launcher
            report["search"] = found
            hits = [
                hit
                for hit in found.get("hits", [])
                if hit.get("name") == args.tool or str(hit.get("name")).endswith("__" + args.tool)
            ]
            if not hits:
                report["error"] = f"tool_search did not find {args.tool!r}"
                return report
            name = hits[0]["name"]
            expanded = _payload(await client.call_tool("expand_tools", {"names": [name]}))
            report["expanded"] = [tool["name"] for tool in expanded.get("tools", [])]
            result = await client.call_tool("call_tool", {"name": name, "arguments": arguments})
        else:
            report["mode"] = "full"
            names = [n for n in listed if n == args.tool or n.endswith("__" + args.tool)]
            if not names:
                report["error"] = f"no listed tool is {args.tool!r}"
                return report
            name = names[0]
            result = await client.call_tool(name, arguments)
        report["tool"] = name
        report["is_error"] = bool(result.is_error)
        report["result"] = _payload(result)
        report["ok"] = not result.is_error
    report["elapsed_s"] = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        report = anyio.run(run, args)
    except Exception as exc:  # boundary: the report must say what broke
        report = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return 0 if report.get("ok") else 1


def warm() -> None:
    """Run once by the zygote that forks agents (tests/zygote.py): what an agent's first run would otherwise
    import lazily in every child (the HTTP stack, anyio's asyncio backend), about half a second of CPU each."""

    async def touch() -> None:
        async with httpx2.AsyncClient(verify=TLS):
            pass

    anyio.run(touch)


if __name__ == "__main__":
    sys.exit(main())
