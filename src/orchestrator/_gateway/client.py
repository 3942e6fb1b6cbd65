"""The admin side of a running gateway, as `orchestrator spawn` uses it: one async HTTP client (httpx2).

    client = GatewayClient.from_settings(settings)   secret: gateway.token, else serve's runtime file
    async with client:                               one connection pool for the block
        await client.authenticate()                  True once the gateway proved it holds the secret
        await client.health()                        None when nothing answers there
        info = await client.open_spawn(task, agent)  POST /spawns
        await client.close_spawn(info["id"])         DELETE /spawns/<id>

Before the first request that carries the secret (or a task's text), the client sends a fresh nonce to
`POST /auth/challenge` and checks the answer is HMAC(secret, nonce): a process that took the gateway's
port while it was down (a squatter) cannot answer, so it gets nothing (`GatewayAuthError`).
Used without `async with`, each call opens and closes its own connection, so nothing is left open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx2

from .._errors import OrchestratorError
from .addresses import CHALLENGE_PATH, client_base_url
from .auth import RuntimeFile, check_proof, new_nonce, runtime_dir

if TYPE_CHECKING:
    from .._config import Settings

__all__ = ["ADMIN_TIMEOUT_S", "HEALTH_TIMEOUT_S", "GatewayAuthError", "GatewayClient"]

HEALTH_TIMEOUT_S = 0.5
"""How long `orchestrator spawn` waits to learn whether a gateway is up: local, so a refusal is immediate."""
ADMIN_TIMEOUT_S = 30.0
"""Opening a spawn plans it (token counts of a changed catalog take a moment); closing only reads counts."""


class GatewayAuthError(OrchestratorError):
    """Something answers at the gateway's address but did not prove it holds the gateway's secret, or
    no secret is known for that address."""


class GatewayClient:
    """HTTP calls to a gateway's admin endpoints (`/health`, `/spawns`), after checking who answers.

    Args:
        base_url: the gateway's address, e.g. `http://127.0.0.1:8931` (`client_base_url`).
        secret: the gateway's admin secret (`gateway.token`, or the one `orchestrator serve` generated).
            None: read from serve's runtime file for `base_url` in the default runtime folder.
        http: an `httpx2.AsyncClient` to send through (tests, shared pools); the caller closes it.
            Default: one of its own per `async with` block, or per call outside one.
    """

    def __init__(self, base_url: str, secret: str | None = None, *, http: httpx2.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._secret = secret if secret is not None else RuntimeFile(runtime_dir(None), self.base_url).read_secret()
        self._http = http
        self._owned: httpx2.AsyncClient | None = None
        self._verified = False

    @classmethod
    def from_settings(cls, settings: Settings, *, http: httpx2.AsyncClient | None = None) -> GatewayClient:
        """The client of the gateway at `gateway.host:port`, with `gateway.token` or, without one, the
        secret from the runtime file `orchestrator serve` wrote for that address."""
        gw = settings.gateway
        base_url = client_base_url(gw.host, gw.port)
        secret = gw.token or RuntimeFile.for_settings(settings, base_url).read_secret()
        return cls(base_url, secret or "", http=http)

    @property
    def secret(self) -> str:
        """The admin secret it sends ('' when none is known): what a launched agent must never inherit."""
        return self._secret or ""

    @property
    def has_secret(self) -> bool:
        """False when no secret is known for this address (no token, no runtime file): nothing to talk to."""
        return bool(self._secret)

    async def __aenter__(self) -> GatewayClient:
        if self._owned is not None:
            raise RuntimeError("GatewayClient: already open (one `async with` block at a time)")
        if self._http is None:
            self._owned = self._new_http()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool of the current `async with` block (not an `http` passed in)."""
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.aclose()

    async def authenticate(self, timeout: float = HEALTH_TIMEOUT_S) -> bool:  # noqa: ASYNC109 (the HTTP request's own timeout)
        """Check that the process at the address holds the gateway's secret; True once it has shown it,
        False when nothing answers there. Sends a fresh nonce, never the secret.

        Raises:
            GatewayAuthError: no secret is known, or something answers without the right proof.
        """
        if self._verified:
            return True
        secret = self._secret
        where = f"gateway {self.base_url}"
        if not secret:
            raise GatewayAuthError(f"{where}: no secret known (set gateway.token, or start it with orchestrator serve)")
        nonce = new_nonce()
        try:
            async with self._client() as http:
                response = await http.post(self.base_url + CHALLENGE_PATH, json={"nonce": nonce}, timeout=timeout)
        except httpx2.TransportError:  # refused, reset, timed out: nothing (usable) answers there
            return False
        try:
            proof = response.json().get("proof") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            proof = None
        if not check_proof(secret, nonce, proof):
            raise GatewayAuthError(
                f"{where}: the process answering there did not prove it holds the gateway's secret "
                f"(HTTP {response.status_code}); nothing was sent to it"
            )
        self._verified = True
        return True

    async def health(self, timeout: float = HEALTH_TIMEOUT_S) -> dict[str, Any] | None:  # noqa: ASYNC109 (the HTTP request's own timeout)
        """The gateway's health, or None when nothing answers there.

        Raises:
            GatewayAuthError: something answers but is not the gateway (or no secret is known).
            OrchestratorError: the gateway refuses.
        """
        try:
            if not await self.authenticate(timeout):
                return None
            return await self._request("GET", "/health", None, timeout)
        except _Unreachable:
            return None

    async def open_spawn(self, task: str, agent: str, task_id: str | None = None) -> dict[str, Any]:
        """Open a spawn; its endpoint, credential and plan (`SpawnHandle.to_json`).

        Raises:
            GatewayAuthError: the process at the address is not the gateway.
            OrchestratorError: the gateway refused (unknown agent, too many spawns) or cannot be reached.
        """
        return await self._request("POST", "/spawns", {"task": task, "agent": agent, "task_id": task_id})

    async def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        """Close a spawn (its credential is revoked); its final counts.

        Raises:
            OrchestratorError: no such spawn, or the gateway refused or cannot be reached.
        """
        return await self._request("DELETE", f"/spawns/{spawn_id}", None)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, wait_s: float = ADMIN_TIMEOUT_S
    ) -> dict[str, Any]:
        where = f"gateway {self.base_url}: {method} {path}"
        if not await self.authenticate(wait_s):
            raise _Unreachable(f"{where}: nothing answers there")
        headers = {"Authorization": f"Bearer {self._secret}"}
        try:
            async with self._client() as http:
                response = await http.request(method, self.base_url + path, json=body, headers=headers, timeout=wait_s)
        except httpx2.TransportError as exc:  # refused, reset, timed out: nothing (usable) answers there
            raise _Unreachable(f"{where}: {_reason(exc)}") from None
        if response.status_code >= 400:
            raise OrchestratorError(f"{where} failed: {response.status_code} {_error_text(response)}".rstrip())
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            raise OrchestratorError(f"{where}: the answer is not JSON") from None
        if not isinstance(payload, dict):
            raise OrchestratorError(f"{where}: the answer is not a JSON object")
        return payload

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx2.AsyncClient]:
        """The pool to send through: the caller's, the open block's, or one for this call only."""
        current = self._http or self._owned
        if current is not None:
            yield current
            return
        async with self._new_http() as http:
            yield http

    def _new_http(self) -> httpx2.AsyncClient:
        # The gateway is reached directly: a proxy configured for the internet must not see its tokens.
        # TLS settings only for an https address; building the default context costs ~40 ms of CPU.
        return httpx2.AsyncClient(trust_env=False, verify=self.base_url.startswith("https://"))


class _Unreachable(OrchestratorError):
    """Nothing answers at the gateway's address (so `orchestrator spawn` takes the cold path)."""


def _reason(exc: httpx2.TransportError) -> str:
    return str(exc) or type(exc).__name__


def _error_text(response: httpx2.Response) -> str:
    try:
        detail = response.json()
    except ValueError:
        return response.reason_phrase
    return str(detail.get("error", "")) if isinstance(detail, dict) else response.reason_phrase
