"""The MCP gateway: one long-running MCP server that presents each agent's plan over live connections.

    server.py   `Gateway` (the MCP server: agent views, spawns, handlers, list_changed, warm-up, the
                worker pool) and `SpawnHandle`
    app.py      the HTTP side: ASGI router, admin endpoints, bind/loopback/transport-security rules, uvicorn
    client.py   `GatewayClient`: the admin endpoints over one async HTTP client
    proxy.py    the upstream servers' resources and prompts, listed and read through the gateway
    auth.py     credentials: the admin secret and its runtime file, signed spawn capabilities (JWT),
                the challenge that proves a gateway before a client sends it anything
    sessions.py per-spawn session accounting (rounds, searches, expands, calls; tokens in both modes)

`orchestrator` re-exports `Gateway`, `SpawnHandle` and `GatewayClient`; the rest is for the CLI and launcher.
"""

from __future__ import annotations

from .app import DEFAULT_PATH, check_bind, client_base_url, is_loopback, mcp_config
from .client import GatewayClient
from .server import Gateway, SpawnHandle

__all__ = [
    "DEFAULT_PATH",
    "Gateway",
    "GatewayClient",
    "SpawnHandle",
    "check_bind",
    "client_base_url",
    "is_loopback",
    "mcp_config",
]
