"""Where a gateway listens and how clients reach it: paths, names, loopback and bind rules.

Shared by the server side (`app.py`) and the clients (`client.py`, the launcher, `orchestrator metrics`),
so a client never loads the HTTP server (uvicorn, Starlette) or the MCP SDK to learn an address.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from .._errors import ConfigError
from .._untrusted import is_number

__all__ = [
    "CHALLENGE_PATH",
    "DEFAULT_PATH",
    "LOOPBACK_HOSTS",
    "LOOPBACK_ORIGINS",
    "SERVER_NAME",
    "check_bind",
    "client_base_url",
    "is_loopback",
    "matches_address",
    "mcp_config",
    "spawn_path",
]

DEFAULT_PATH = "/mcp"
"""The gateway's own agent profile (`orchestrator serve --agent NAME`); spawns are under `spawn_path`."""
SERVER_NAME = "orchestrator"
"""The name an agent's MCP config gives the gateway: tools show up as `mcp__orchestrator__<tool>` in
Claude Code (`gateway.server_name` changes it)."""
CHALLENGE_PATH = "/auth/challenge"
"""POST {"nonce"} -> {"proof": HMAC(secret, nonce)}: the one endpoint that needs no credential."""

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""`Host` headers a loopback listener answers to: any other is a web page's name resolving to 127.0.0.1
(DNS rebinding)."""
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")

_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def spawn_path(spawn_id: str) -> str:
    """The MCP endpoint of one spawn."""
    return f"/spawn/{spawn_id}/mcp"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: addresses other machines cannot reach."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def matches_address(value: str, patterns: tuple[str, ...]) -> bool:
    """`value` equals a pattern, or a `...:*` pattern with any port."""
    for pattern in patterns:
        if value == pattern or (
            pattern.endswith(":*") and value.startswith(pattern[:-1]) and is_number(value[len(pattern) - 1 :])
        ):
            return True
    return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a bearer token.

    Raises:
        ConfigError: naming `gateway.host` and `gateway.token`.
    """
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"gateway.host: {host!r} is not a loopback address; set gateway.token (a bearer token every "
            "client must send) before serving beyond this machine"
        )


def client_base_url(host: str, port: int) -> str:
    """Where a local client reaches a gateway bound to `host:port` (a wildcard host means this machine)."""
    if host in ("0.0.0.0", "", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def mcp_config(url: str, token: str | None, name: str = SERVER_NAME) -> dict[str, Any]:
    """An MCP config pointing at the gateway, in the shape Claude Code's `--mcp-config` reads."""
    server: dict[str, Any] = {"type": "http", "url": url}
    if token:
        server["headers"] = {"Authorization": f"Bearer {token}"}
    return {"mcpServers": {name: server}}
