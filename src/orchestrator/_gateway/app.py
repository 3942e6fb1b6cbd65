"""The gateway's HTTP side: the ASGI router, the admin endpoints, address and bind rules, uvicorn wiring.

    /mcp                  the gateway's own agent profile (`orchestrator serve --agent NAME`)
    /spawn/<id>/mcp       one spawn: its profile, its task's pinned tools, its own counts
    POST /spawns          open a spawn {"task", "agent", "task_id"} -> {"id", "url", "token", "plan", ...}
    GET|DELETE /spawns/<id>   its counts (DELETE also closes it)
    GET /health           catalog, server states and the worker pool

Security: binds 127.0.0.1 by default; a non-loopback host is refused unless `gateway.token` is set, and
with a token every request must carry `Authorization: Bearer <token>`. A spawn endpoint always needs
its own token (or the gateway's), so one spawn cannot act as another. The MCP protocol itself is the
server's (`server.py`); this module only routes to it.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import ipaddress
import json
import re
import socket
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._errors import ConfigError, OrchestratorError

if TYPE_CHECKING:
    from .server import Gateway

__all__ = [
    "DEFAULT_PATH",
    "SCOPE_KEY",
    "SERVER_NAME",
    "check_bind",
    "client_base_url",
    "is_loopback",
    "mcp_config",
    "serve",
]

DEFAULT_PATH = "/mcp"
SERVER_NAME = "orchestrator"
# The name an agent's MCP config gives the gateway: tools show up as `mcp__orchestrator__<tool>` in Claude Code.
SCOPE_KEY = "orchestrator.spawn"
# Set on the ASGI scope by the router: which spawn (None = the gateway's own profile) a request is for.
_SPAWN_PATH = re.compile(r"^/spawn/([A-Za-z0-9_-]{1,64})/mcp/?$")
_SPAWN_ADMIN_PATH = re.compile(r"^/spawns/([A-Za-z0-9_-]{1,64})/?$")
GRACEFUL_SHUTDOWN_S = 2
# Bound on waiting for open HTTP streams when the gateway stops; sessions are ended before it anyway.
LISTEN_BACKLOG = 256
# Connections the kernel queues before uvicorn accepts them: room for a burst of agents starting at once.
_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: addresses other machines cannot reach."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
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


@contextlib.asynccontextmanager
async def serve(gateway: Gateway, host: str, port: int) -> AsyncIterator[tuple[str, anyio.Event]]:
    """Serve `gateway` over streamable HTTP on `host:port` (0: a free port) for the duration of the block.

    Yields the base URL and an event set when the HTTP server has stopped (on its own or at the end of
    the block).

    Raises:
        ConfigError: a non-loopback host without a token, or the address cannot be bound.
    """
    check_bind(host, gateway.settings.gateway.token)
    sock = _bind(host, port)
    base_url = client_base_url(host, sock.getsockname()[1])
    sessions = StreamableHTTPSessionManager(app=gateway.server, security_settings=_transport_security(host))
    config = uvicorn.Config(
        _Router(gateway, sessions),
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    http = _Uvicorn(config)
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await http.serve([sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tg, sessions.run():
            tg.start_soon(run)
            try:
                yield base_url, stopped
            finally:
                http.should_exit = True
    finally:
        sock.close()


class _Router:
    """The gateway's ASGI app: MCP endpoints to the session manager, small JSON admin endpoints, auth."""

    def __init__(self, gateway: Gateway, sessions: StreamableHTTPSessionManager) -> None:
        self._gateway = gateway
        self._sessions = sessions

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        gateway = self._gateway
        request = Request(scope, receive)
        path = scope["path"]
        spawn_match = _SPAWN_PATH.match(path)
        if path in (DEFAULT_PATH, DEFAULT_PATH + "/") or spawn_match:
            spawn_token: str | None = None
            spawn_id: str | None = None
            if spawn_match:
                spawn_id = spawn_match.group(1)
                spawn_token = gateway.spawn_token(spawn_id)
                if spawn_token is None:
                    await _json({"error": f"no open spawn {spawn_id!r}"}, 404)(scope, receive, send)
                    return
            if not self._authorized(request, spawn_token):
                await _unauthorized()(scope, receive, send)
                return
            scope[SCOPE_KEY] = spawn_id
            await self._sessions.handle_request(scope, receive, send)
            return
        if not self._authorized(request, None):
            await _unauthorized()(scope, receive, send)
            return
        response = await self._admin(request, path)
        await response(scope, receive, send)

    def _authorized(self, request: Request, spawn_token: str | None) -> bool:
        """With a gateway token, it (or the spawn's own token) is required; a spawn (which always has a
        token) always needs one."""
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        value = value.strip() if scheme.lower() == "bearer" else ""
        accepted = [token for token in (self._gateway.settings.gateway.token, spawn_token) if token]
        if not accepted:
            return True
        return any(hmac.compare_digest(value.encode(), token.encode()) for token in accepted)

    async def _admin(self, request: Request, path: str) -> Response:
        """The JSON endpoints; their work (planning, history files, catalog sizes) runs in the worker pool."""
        gateway = self._gateway
        method = request.method
        try:
            if path == "/health" and method == "GET":
                return _json(await gateway.run_sync(gateway.health))
            if path in ("/spawns", "/spawns/") and method == "POST":
                body = await _read_json(request)
                task = body.get("task")
                if not isinstance(task, str):
                    return _json({"error": "POST /spawns needs a JSON body with 'task' (a string)"}, 400)
                open_spawn = functools.partial(gateway.open_spawn, task, body.get("agent"), task_id=body.get("task_id"))
                handle = await gateway.run_sync(open_spawn)
                return _json(handle.to_json(), 201)
            admin_match = _SPAWN_ADMIN_PATH.match(path)
            if admin_match and method in ("GET", "DELETE"):
                spawn_id = admin_match.group(1)
                action = gateway.close_spawn if method == "DELETE" else gateway.spawn_stats
                return _json(await gateway.run_sync(action, spawn_id))
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        except OrchestratorError as exc:
            return _json({"error": str(exc)}, 404)
        return _json({"error": f"no endpoint {method} {path}"}, 404)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers: the application decides what SIGINT/SIGTERM mean, so a stop
    always unwinds the manager (children stopped) instead of uvicorn re-raising the signal afterwards."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound before the server starts, so clients can connect at once."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only disables Nagle on accepted sockets whose proto says TCP, and with
    # Nagle on, every keep-alive response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"gateway.port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _transport_security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection on loopback (browsers must not reach it); elsewhere the token protects."""
    if is_loopback(host):
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _json(payload: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(payload, status_code=status)


def _unauthorized() -> Response:
    return JSONResponse(
        {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _read_json(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
