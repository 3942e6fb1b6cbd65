"""The admin side of a running gateway, as `orchestrator spawn` uses it: one async HTTP client (httpx2).

    async with GatewayClient(base_url, token) as client:   one connection pool for the block
        await client.health()                              None when nothing answers there
        info = await client.open_spawn(task, agent)        POST /spawns
        await client.close_spawn(info["id"])               DELETE /spawns/<id>

Used without `async with`, each call opens and closes its own connection, so nothing is left open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx2

from .._errors import OrchestratorError

__all__ = ["ADMIN_TIMEOUT_S", "HEALTH_TIMEOUT_S", "GatewayClient"]

HEALTH_TIMEOUT_S = 0.5
# How long `orchestrator spawn` waits to learn whether a gateway is up: local, so a refusal is immediate.
ADMIN_TIMEOUT_S = 30.0
# Opening a spawn plans it (token counts of a changed catalog take a moment); closing only reads counts.


class GatewayClient:
    """HTTP calls to a gateway's admin endpoints (`/health`, `/spawns`).

    Args:
        base_url: the gateway's address, e.g. `http://127.0.0.1:8931` (`client_base_url`).
        token: the gateway's bearer token, when it has one.
        http: an `httpx2.AsyncClient` to send through (tests, shared pools); the caller closes it.
            Default: one of its own per `async with` block, or per call outside one.
    """

    def __init__(self, base_url: str, token: str | None = None, *, http: httpx2.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._http = http
        self._owned: httpx2.AsyncClient | None = None

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

    async def health(self, timeout: float = HEALTH_TIMEOUT_S) -> dict[str, Any] | None:  # noqa: ASYNC109 (the HTTP request's own timeout)
        """The gateway's health, or None when nothing answers there.

        Raises:
            OrchestratorError: something answers but refuses (a wrong or missing token, not a gateway).
        """
        try:
            return await self._request("GET", "/health", None, timeout)
        except _Unreachable:
            return None

    async def open_spawn(self, task: str, agent: str, task_id: str | None = None) -> dict[str, Any]:
        """Register a spawn; its endpoint, token and plan (`SpawnHandle.to_json`).

        Raises:
            OrchestratorError: the gateway refused (unknown agent, wrong token) or cannot be reached.
        """
        return await self._request("POST", "/spawns", {"task": task, "agent": agent, "task_id": task_id})

    async def close_spawn(self, spawn_id: str) -> dict[str, Any]:
        """Close a spawn; its final counts.

        Raises:
            OrchestratorError: no such spawn, or the gateway refused or cannot be reached.
        """
        return await self._request("DELETE", f"/spawns/{spawn_id}", None)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, wait_s: float = ADMIN_TIMEOUT_S
    ) -> dict[str, Any]:
        where = f"gateway {self.base_url}: {method} {path}"
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
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
