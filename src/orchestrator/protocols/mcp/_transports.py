"""How a connection reaches its server: the transport factory the manager takes.

`default_transport` opens what `mcp.servers.<name>` configures (a stdio child process, streamable HTTP
or SSE) with the `mcp` SDK's own clients. Tests hand the manager another factory, for example one that
returns the SDK's in-memory transport to an in-process server, and keep real subprocesses for the
crash, hang and signal tests.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import IO, Any, Protocol

from mcp.client import Transport

from ..._config import ServerConfig

__all__ = ["HTTP_CONNECT_TIMEOUT_S", "SSE_READ_TIMEOUT_S", "TransportFactory", "default_transport"]

HTTP_CONNECT_TIMEOUT_S = 10.0
"""Connect/write/pool bound for HTTP and SSE; the whole start is bounded by `startup_timeout_s` anyway."""
SSE_READ_TIMEOUT_S = 3600.0
"""Silence on an SSE stream before it counts as dead; servers ping every ~15 s, listen streams idle long."""


class TransportFactory(Protocol):
    """Opens one session's transport to a server: an async context manager of (read, write) streams.

    `errlog` is where a child process's stderr goes (stdio only; None otherwise).
    """

    def __call__(self, name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport: ...


def default_transport(name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport:
    """The configured transport: `stdio`, `http` (streamable HTTP) or `sse`, through the `mcp` SDK."""
    return _open(config, errlog)


@contextlib.asynccontextmanager
async def _open(config: ServerConfig, errlog: IO[str] | None) -> AsyncIterator[Any]:
    if config.transport == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=config.launch_command(),
            args=list(config.args),
            env={**os.environ, **config.env},
            cwd=config.cwd,
        )
        async with stdio_client(params, errlog=errlog) if errlog is not None else stdio_client(params) as streams:
            yield streams
    elif config.transport == "http":
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert config.url is not None
        timeout = httpx2.Timeout(HTTP_CONNECT_TIMEOUT_S, read=None)
        async with (
            httpx2.AsyncClient(headers=config.headers, timeout=timeout) as http,
            streamable_http_client(config.url, http_client=http) as streams,
        ):
            yield streams
    else:
        from mcp.client.sse import sse_client

        assert config.url is not None
        async with sse_client(
            config.url, headers=config.headers, timeout=HTTP_CONNECT_TIMEOUT_S, sse_read_timeout=SSE_READ_TIMEOUT_S
        ) as streams:
            yield streams
