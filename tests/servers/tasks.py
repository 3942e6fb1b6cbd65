"""A stdio MCP server with a tool that only runs as an MCP task (raw JSON-RPC, no mcp import: starts in ~50 ms).

    python tests/servers/tasks.py

Speaks the 2025-11-25 protocol (tasks exist only there; `server/discover` gets "method not found", so 2.x
clients fall back to `initialize`) and lists two tools:

- `quick(text)`: an ordinary tool, answers `quick: <text>`;
- `background(text)`: declares `execution.taskSupport: "required"`; a plain `tools/call` (without the task
  field) gets the JSON-RPC error real servers send, "requires task augmentation".
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
TEXT_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
TOOLS = [
    {"name": "quick", "description": "Answer at once.", "inputSchema": TEXT_SCHEMA},
    {
        "name": "background",
        "description": "A long job that only runs as a task.",
        "inputSchema": TEXT_SCHEMA,
        "execution": {"taskSupport": "required"},
    },
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            info = {"name": "tasks", "version": "0.1"}
            capabilities = {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {"protocolVersion": PROTOCOL_VERSION, "capabilities": capabilities, "serverInfo": info},
                }
            )
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            params = message.get("params") or {}
            text = str((params.get("arguments") or {}).get("text", ""))
            if params.get("name") == "quick":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "result": {"content": [{"type": "text", "text": f"quick: {text}"}]},
                    }
                )
            else:
                error = {"code": -32602, "message": f"Tool {params.get('name')} requires task augmentation"}
                send({"jsonrpc": "2.0", "id": request_id, "error": error})
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )


if __name__ == "__main__":
    main()
