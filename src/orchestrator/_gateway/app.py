"""The gateway's HTTP side: the ASGI router, the admin endpoints, address and bind rules, uvicorn wiring.

    /mcp                  the gateway's own agent profile (`orchestrator serve --agent NAME`): admin secret
    /spawn/<id>/mcp       one spawn: the profile, task and pins its signed credential carries
    POST /spawns          open a spawn {"task", "agent", "task_id"} -> {"id", "url", "token", "plan", ...}
    GET|DELETE /spawns/<id>   its counts (DELETE also closes it and revokes its credential)
    GET /health           catalog, server states, open spawns and the worker pool
    POST /auth/challenge  {"nonce"} -> {"proof"}: the client checks it talks to the gateway (no credential)

Security (docs/security.md): every endpoint but the challenge needs a credential, with or without
`gateway.token`: the admin secret (`gateway.token`, else generated at start) for `/mcp`, `/health` and
`/spawns`, the spawn's own signed credential for its endpoint, verified on every request, so the
profile an agent gets is the one in its credential. On every endpoint the Host must be this machine's
(421) and a browser's Origin is refused (403; loopback pages may reach the MCP endpoints, as the SDK
allows). Admin bodies: JSON only (415), at most `gateway.max_body_bytes` (413), every field checked (400,
one line). A non-loopback host is refused unless `gateway.token` is set. The MCP protocol itself is the
server's (`server.py`); this module only routes to it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any, Protocol, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.abc
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._config import Settings
from .._errors import ConfigError, OrchestratorError
from .._store import StoreError
from .._untrusted import is_number
from .addresses import (
    CHALLENGE_PATH,
    DEFAULT_PATH,
    LOOPBACK_HOSTS,
    LOOPBACK_ORIGINS,
    check_bind,
    client_base_url,
    is_loopback,
    matches_address,
    spawn_path,
)
from .auth import (
    CLOCK_LEEWAY_S,
    CredentialError,
    Credentials,
    SpawnClaims,
    SpawnClosedError,
    SpawnLimitError,
    bearer_token,
)
from .views import ROUTED_SCOPE, SCOPE_KEY

log = logging.getLogger(__name__)

__all__ = ["GatewayBackend", "serve"]

_SPAWN_PATH = re.compile(r"^/spawn/([A-Za-z0-9_-]{1,64})/mcp/?$")
_SPAWN_ADMIN_PATH = re.compile(r"^/spawns/([A-Za-z0-9_-]{1,64})/?$")
GRACEFUL_SHUTDOWN_S = 2
"""Bound on waiting for open HTTP streams when the gateway stops; sessions are ended before it anyway."""
MAX_SESSIONS_PER_SPAWN = 32
"""Handshake-era MCP sessions one spawn may hold on a replica; opening another ends its oldest. The SDK's
10,000 are shared by every spawn: one agent opening sessions in a loop locked all the others out."""
LISTEN_BACKLOG = 256
"""Connections the kernel queues before uvicorn accepts them: room for a burst of agents starting at once."""
_NONCE = re.compile(r"[0-9a-f]{32,256}")
_TASK_ID = re.compile(r"[!-~]{1,128}")
"""Printable ASCII without spaces: task ids name store records and appear in logs."""
_KIND_NAMES = {str: "string", int: "integer", list: "list", dict: "object"}

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class GatewayBackend(Protocol):
    """What the HTTP side needs from the gateway (`Gateway` is one): its settings, the MCP server to
    route to, the credentials to check, and the admin operations, run in its worker pool."""

    settings: Settings
    server: Any
    """The lowlevel MCP server the streamable HTTP session manager runs."""
    credentials: Credentials

    def run_sync(self, func: Callable[[Unpack[Ts]], T], /, *args: *Ts) -> Awaitable[T]: ...

    def verify_spawn(self, token: str, spawn_id: str) -> SpawnClaims: ...

    def open_spawn(self, task: str, agent: str | None = None, *, task_id: str | None = None) -> Any: ...

    def spawn_stats(self, spawn_id: str) -> dict[str, Any]: ...

    def close_spawn(self, spawn_id: str) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...


@contextlib.asynccontextmanager
async def serve(gateway: GatewayBackend, host: str, port: int) -> AsyncIterator[str]:
    """Serve `gateway` over streamable HTTP on `host:port` (0: a free port) for the duration of the block;
    yields the base URL.

    Raises:
        ConfigError: a non-loopback host without a token, or the address cannot be bound.
    """
    check_bind(host, gateway.settings.gateway.token)
    sock = _bind(host, port)
    base_url = client_base_url(host, sock.getsockname()[1])
    sessions = StreamableHTTPSessionManager(app=gateway.server, security_settings=_transport_security(host))
    spawn_sessions = _SpawnSessions(sessions, base_url)
    config = uvicorn.Config(
        _Router(gateway, sessions, spawn_sessions, host),
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    http = _Uvicorn(config)
    try:
        async with anyio.create_task_group() as tg, sessions.run(), anyio.create_task_group() as timers:
            spawn_sessions.timers = timers
            tg.start_soon(http.serve, [sock])
            try:
                yield base_url
            finally:
                http.should_exit = True
                timers.cancel_scope.cancel()  # the spawns' expiry timers; sessions.run() then ends every session
    finally:
        sock.close()


class _Router:
    """The gateway's ASGI app: every request is checked (Host, Origin), authenticated, then routed: MCP
    endpoints to the session manager with the caller's verified claims on the scope, the small JSON
    admin endpoints here."""

    def __init__(
        self,
        gateway: GatewayBackend,
        sessions: StreamableHTTPSessionManager,
        spawn_sessions: _SpawnSessions,
        host: str,
    ) -> None:
        self._gateway = gateway
        self._sessions = sessions
        self._spawn_sessions = spawn_sessions
        self._loopback = is_loopback(host)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = scope["path"]
        mcp = path in (DEFAULT_PATH, DEFAULT_PATH + "/")
        spawn_match = _SPAWN_PATH.match(path)
        refused = self._misdirected(request, admin=not (mcp or spawn_match))
        if refused is None and mcp:
            refused = self._admin_only(request)
            scope[SCOPE_KEY] = None
            scope["user"] = _principal("admin")
        elif refused is None and spawn_match:
            spawn_id = spawn_match.group(1)
            verified = await self._spawn_claims(request, spawn_id)
            if isinstance(verified, SpawnClaims):
                scope[SCOPE_KEY] = verified
                scope["user"] = _principal(f"spawn:{spawn_id}")
            else:
                refused = verified
        if refused is None and (mcp or spawn_match):
            claims = scope[SCOPE_KEY]
            session = _header(scope["headers"], MCP_SESSION_ID_HEADER)
            if claims is not None and not session:
                send = self._spawn_sessions.watch(claims, send)  # a request that may open a session
            routed = ROUTED_SCOPE.set(scope)
            try:
                await self._sessions.handle_request(scope, receive, send)
            finally:
                ROUTED_SCOPE.reset(routed)
            if claims is not None and session and request.method == "DELETE":
                self._spawn_sessions.ended(claims.spawn_id, session.decode("ascii", "replace"))
            return
        if refused is None:
            refused = await self._admin(request, path)
        await refused(scope, receive, send)

    def _misdirected(self, request: Request, *, admin: bool) -> Response | None:
        """421 for a Host this gateway does not answer to (DNS rebinding: a web page's name resolving to
        127.0.0.1), 403 for a browser page's Origin. MCP endpoints accept loopback pages, as the SDK does;
        the admin endpoints accept no browser at all."""
        if self._loopback and not matches_address(request.headers.get("host", ""), LOOPBACK_HOSTS):
            return _error("Host header not allowed (DNS rebinding protection)", 421)
        origin = request.headers.get("origin")
        if origin is not None and (admin or not self._loopback or not matches_address(origin, LOOPBACK_ORIGINS)):
            return _error("cross-origin requests are refused", 403)
        return None

    def _admin_only(self, request: Request) -> Response | None:
        if self._gateway.credentials.is_admin(bearer_token(request.headers)):
            return None
        return _unauthorized("missing or wrong bearer token (Authorization: Bearer <gateway secret>)")

    async def _spawn_claims(self, request: Request, spawn_id: str) -> SpawnClaims | Response:
        """The verified claims of the spawn credential sent, or the refusal (401, 404 once closed)."""
        gateway = self._gateway
        try:
            return await gateway.run_sync(gateway.verify_spawn, bearer_token(request.headers), spawn_id)
        except SpawnClosedError as exc:
            await self._spawn_sessions.end(spawn_id)  # closed on another replica: its sessions here end too
            return _error(str(exc), 404)
        except CredentialError as exc:
            return _unauthorized(str(exc))
        except StoreError as exc:
            log.warning("spawn %s refused: %s", spawn_id, exc)
            return _error("the gateway's store is unavailable; try again", 503)

    async def _admin(self, request: Request, path: str) -> Response:
        """The JSON endpoints; their work (planning, the store, catalog sizes) runs in the worker pool.
        Every refusal is a one-line JSON error; nothing unexpected reaches the client as a traceback."""
        gateway = self._gateway
        method = request.method
        try:
            if path == CHALLENGE_PATH and method == "POST":  # before any credential: the client checks us
                body = await self._json_body(request, {"nonce": str})
                nonce = body["nonce"]
                if not _NONCE.fullmatch(nonce):
                    raise _BadRequest("'nonce' must be 32 to 256 hex digits")
                return _json({"proof": gateway.credentials.proof(nonce)})
            refused = self._admin_only(request)
            if refused is not None:
                return refused
            if path == "/health" and method == "GET":
                return _json(await gateway.run_sync(gateway.health))
            if path in ("/spawns", "/spawns/") and method == "POST":
                body = await self._json_body(request, {"task": str, "agent": str, "task_id": str}, required=("task",))
                task, agent, task_id = body["task"], body.get("agent"), body.get("task_id")
                if not task.strip():
                    raise _BadRequest("'task' must not be empty")
                if task_id is not None and not _TASK_ID.fullmatch(task_id):
                    raise _BadRequest("'task_id' must be 1 to 128 printable characters without spaces")
                open_spawn = functools.partial(gateway.open_spawn, task, agent, task_id=task_id)
                handle = await gateway.run_sync(open_spawn)
                return _json(handle.to_json(), 201)
            admin_match = _SPAWN_ADMIN_PATH.match(path)
            if admin_match and method in ("GET", "DELETE"):
                spawn_id = admin_match.group(1)
                if method == "GET":
                    return _json(await gateway.run_sync(gateway.spawn_stats, spawn_id))
                closed = await gateway.run_sync(gateway.close_spawn, spawn_id)
                await self._spawn_sessions.end(spawn_id)
                return _json(closed)
        except _Refused as exc:
            return _error(str(exc), exc.status)
        except ConfigError as exc:
            return _error(str(exc), 400)
        except SpawnLimitError as exc:
            return _error(str(exc), 429)
        except StoreError as exc:
            log.warning("%s %s: %s", method, path, exc)
            return _error("the gateway's store is unavailable; try again", 503)
        except OrchestratorError as exc:
            return _error(str(exc), 404)
        except Exception:  # boundary: a bug must cost one request a 500, never leak a traceback to it
            log.exception("%s %s failed", method, path)
            return _error(f"internal error in {method} {path}; see the gateway's log", 500)
        return _error(f"no endpoint {method} {path}", 404)

    async def _json_body(
        self, request: Request, fields: dict[str, type], required: tuple[str, ...] | None = None
    ) -> dict[str, Any]:
        """The request's JSON object, checked: content type (415), size (413), syntax, unknown fields,
        types (400). Optional fields may be null."""
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            raise _Refused(f"Content-Type must be application/json, got {media_type or 'none'!r}", 415)
        raw = await _read_capped(request, self._gateway.settings.gateway.max_body_bytes)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise _BadRequest("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _BadRequest(f"the body must be a JSON object, got {type(body).__name__}")
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise _BadRequest(f"unknown field {unknown[0][:64]!r} (expected: {', '.join(fields)})")
        needed = tuple(fields) if required is None else required
        for name, kind in fields.items():
            value = body.get(name)
            if value is None and name not in needed:
                continue
            if not isinstance(value, kind):
                got = "missing" if name not in body else type(value).__name__
                raise _BadRequest(f"{name!r} must be a {_KIND_NAMES.get(kind, kind.__name__)}, got {got}")
        return body


class _SpawnSessions:
    """The MCP sessions each spawn opened on this replica, ended with the spawn: when it is closed here
    (`DELETE /spawns/<id>`), when a request shows it was closed on another replica, and when its credential
    expires (after the clock leeway it still verifies in).

    The SDK keeps a handshake-era session until its client ends it or it has been idle for 30 minutes, and
    an open GET stream is never idle: without this, a finished spawn's agent kept its stream (and the
    notifications on it) past the close, and every short-lived spawn whose agent was killed held one of the
    session slots all spawns share until it idled out. A session is ended the way its client would end it, by
    a DELETE with its id and its spawn's principal, through the SDK's own handling.
    """

    def __init__(self, manager: StreamableHTTPSessionManager, base_url: str) -> None:
        self._manager = manager
        self._host = urllib.parse.urlsplit(base_url).netloc.encode("ascii")
        self._open: dict[str, dict[str, None]] = {}
        """Spawn id -> ids of the sessions it opened here and has not ended, oldest first."""
        self.timers: anyio.abc.TaskGroup | None = None
        """Where each spawn's expiry timer runs (the server's; cancelled when it stops)."""

    def watch(self, claims: SpawnClaims, send: Any) -> Any:
        """`send`, noting the session a response opens for the spawn of `claims`."""

        async def noting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = _header(message.get("headers", ()), MCP_SESSION_ID_HEADER)
                if opened:
                    self._opened(claims, opened.decode("ascii", "replace"))
            await send(message)

        return noting

    def _opened(self, claims: SpawnClaims, session_id: str) -> None:
        first = claims.spawn_id not in self._open
        opened = self._open.setdefault(claims.spawn_id, {})
        opened[session_id] = None
        if self.timers is None:
            return
        if first:
            self.timers.start_soon(self._end_at, claims.spawn_id, claims.expires + CLOCK_LEEWAY_S)
        if len(opened) > MAX_SESSIONS_PER_SPAWN:  # the spawn's oldest session makes room (its own, no one else's)
            oldest = next(iter(opened))
            del opened[oldest]
            self.timers.start_soon(self._end_sessions, claims.spawn_id, [oldest])

    def ended(self, spawn_id: str, session_id: str) -> None:
        """The spawn's client ended one of its sessions (DELETE)."""
        self._open.get(spawn_id, {}).pop(session_id, None)

    async def _end_at(self, spawn_id: str, when: float) -> None:
        await anyio.sleep(max(0.0, when - time.time()))
        await self.end(spawn_id)

    async def end(self, spawn_id: str) -> None:
        """End every session the spawn opened here (those its client ended already answer 404: nothing)."""
        await self._end_sessions(spawn_id, list(self._open.pop(spawn_id, {})))

    async def _end_sessions(self, spawn_id: str, session_ids: list[str]) -> None:
        for session_id in session_ids:
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "DELETE",
                "scheme": "http",
                "path": spawn_path(spawn_id),
                "raw_path": spawn_path(spawn_id).encode("ascii"),
                "query_string": b"",
                "root_path": "",
                "headers": [(b"host", self._host), (MCP_SESSION_ID_HEADER.encode("ascii"), session_id.encode("ascii"))],
                "client": None,
                "server": None,
                "user": _principal(f"spawn:{spawn_id}"),
                SCOPE_KEY: None,
            }
            try:
                with anyio.CancelScope(shield=True):  # a close answered is a session ended, even if the caller left
                    await self._manager.handle_request(scope, _no_body, _discard)
            except Exception:  # boundary: a failure here must not fail the close, nor stop the server's timers
                log.exception("gateway: could not end MCP session %s of spawn %s", session_id, spawn_id)


async def _no_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _discard(message: MutableMapping[str, Any]) -> None:
    return None


def _header(headers: Iterable[tuple[bytes, bytes]], name: str) -> bytes | None:
    """The first value of header `name` (lowercase) in ASGI headers."""
    wanted = name.encode("ascii")
    return next((value for key, value in headers if key.lower() == wanted), None)


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
            allowed_hosts=list(LOOPBACK_HOSTS),
            allowed_origins=list(LOOPBACK_ORIGINS),
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _json(payload: Any, status: int = 200) -> JSONResponse:
    # Admin answers carry secrets (spawn credentials): never cached; no CORS header is ever sent.
    return JSONResponse(payload, status_code=status, headers={"Cache-Control": "no-store"})


def _error(message: str, status: int) -> JSONResponse:
    """A one-line JSON error."""
    return _json({"error": " ".join(message.split())}, status)


def _unauthorized(message: str) -> Response:
    response = _error(message, 401)
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


class _Refused(Exception):
    """Internal: a request refused with `status` and a one-line reason."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _BadRequest(_Refused):
    def __init__(self, message: str) -> None:
        super().__init__(message, 400)


async def _read_capped(request: Request, limit: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed `limit` (declared length first, then as read)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not is_number(declared.strip()):
            raise _BadRequest("Content-Length is not a number")
        if int(declared) > limit:
            raise _Refused(
                f"request body of {int(declared):,} bytes; the limit is {limit:,} (gateway.max_body_bytes)", 413
            )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _Refused(f"request body over {limit:,} bytes (gateway.max_body_bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _principal(name: str) -> AuthenticatedUser:
    """Who the request authenticated as: the SDK binds a handshake-era session to it, so one credential
    cannot continue another's session."""
    return AuthenticatedUser(AccessToken(token="", client_id=name, scopes=[], subject=name))
