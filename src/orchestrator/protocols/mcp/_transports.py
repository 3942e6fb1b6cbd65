"""How a connection reaches its server: the transport factory the manager takes.

`default_transport` opens what `mcp.servers.<name>` configures: streamable HTTP and SSE through the `mcp`
SDK's own clients, and stdio through `stdio_transport` below, which replaces the SDK's stdio client
because a real server's stdout is not always clean and the SDK's reader is not built for that:

- it decodes strictly, so one invalid UTF-8 byte ends its reader while the process lives on (the
  connection looks up, and every later call waits out its timeout); here bad bytes become U+FFFD;
- it logs a traceback for every non-JSON line (a server's banner or a stray `print`); here such a line
  is skipped and reported once to the connection, which logs it rate-limited;
- it joins chunks into a growing string until a newline comes, so a 32 MB line costs quadratic time
  and memory before it is parsed; here a line longer than `max_message_bytes` is dropped as it streams
  in, and if it begins like a response, its request fails at once instead of waiting for a timeout;
- pydantic's JSON parser refuses nesting past ~200 levels, which turns a valid `tools/list` holding one
  deeply nested schema into "non-MCP output"; here such a line is parsed again with the standard
  library, so the listing arrives and the one tool is dropped with its reason;
- it ends a server's process group only when the server itself lingers, so a child a server leaves
  behind outlives it; here every process the server started is ended every time a server stops, and
  with the orchestrator when it dies (`_processes`: a keeper per server on Linux, the group elsewhere).

The messages themselves still go through the SDK's client and session unchanged. Tests hand the manager
another factory, for example one that returns the SDK's in-memory transport to an in-process server.

`WatchedTransport` wraps whatever the factory opens: it notices the end of the read stream, and passes each
`tools/list` answer through the connection's per-tool check before the SDK parses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, Any, Protocol, TextIO, cast

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client import Transport
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ..._config import ServerConfig
from ._normalization import one_line
from ._processes import ServerProcess, exited, open_server_process

__all__ = [
    "HTTP_CONNECT_TIMEOUT_S",
    "LINE_FAULT_REASONS",
    "SSE_READ_TIMEOUT_S",
    "TOO_LONG_MARKER",
    "StdoutLineFault",
    "TransportFactory",
    "WatchedTransport",
    "default_transport",
    "stdio_transport",
]

HTTP_CONNECT_TIMEOUT_S = 10.0
"""Connect/write/pool bound for HTTP and SSE; the whole start is bounded by `startup_timeout_s` anyway."""
SSE_READ_TIMEOUT_S = 3600.0
"""Silence on an SSE stream before it counts as dead; servers ping every ~15 s, listen streams idle long."""
PROCESS_EXIT_TIMEOUT_S = 2.0
"""Grace for a stdio server to exit by itself once its stdin is closed (the MCP shutdown sequence)."""
GROUP_KILL_TIMEOUT_S = 2.0
"""Between SIGTERM and SIGKILL to the processes a server started (its keeper's grace on Linux)."""
REAP_TIMEOUT_S = 2.0
"""For the event loop to see a killed server exit; only an unkillable process runs this out."""
WRITER_FLUSH_TIMEOUT_S = 0.5
"""For messages already accepted to reach the server's stdin before it is closed."""
READ_CHUNK_BYTES = 65536
"""One read from the server's stdout."""
PARSE_OFF_LOOP_BYTES = 262_144
"""A stdout line this long or longer is parsed on a worker thread (about 0.1 s of CPU per 256 KB): the event
loop serves every server, and a long listing parsed on it held the others up."""
HEAD_BYTES = 4096
"""How much of a too-long line is kept to find the id of the request it answers."""
EXCERPT_CHARS = 80
"""Characters of a skipped line quoted in logs and errors."""
TOO_LONG_MARKER = "orchestrator:line_too_long"
"""`error.data` of the error that stands in for a response dropped for its size (`call_tool` names it)."""

LINE_FAULT_REASONS = ("not_json", "not_jsonrpc", "too_long", "too_deep", "invalid_utf8")
"""Why a stdout line was skipped (`invalid_utf8`: repaired with U+FFFD and used)."""

_RESPONSE_HEAD = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")\s*,')
"""The start of a JSON-RPC message whose id comes first (or right after `jsonrpc`), as every SDK writes it."""


class TransportFactory(Protocol):
    """Opens one session's transport to a server: an async context manager of (read, write) streams.

    `errlog` is where a child process's stderr goes (stdio only; None otherwise).
    """

    def __call__(self, name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport: ...


class StdoutLineFault(Exception):
    """A stdout line the reader skipped (or repaired): handed to the session like a transport error, so
    the client's `message_handler` hears of it; never raised."""

    def __init__(self, reason: str, excerpt: str, size: int) -> None:
        super().__init__(f"{reason}: {excerpt}")
        self.reason = reason
        """One of LINE_FAULT_REASONS."""
        self.excerpt = excerpt
        """The start of the line, one line, quoted."""
        self.size = size
        """Bytes in the line (for `too_long`: how many had arrived when it was dropped)."""


def default_transport(name: str, config: ServerConfig, errlog: IO[str] | None) -> Transport:
    """The configured transport: `stdio` (`stdio_transport`), `http` (streamable HTTP) or `sse`."""
    if config.transport == "stdio" and sys.platform != "win32":
        return stdio_transport(config, errlog)
    return _open_sdk(config, errlog)


@contextlib.asynccontextmanager
async def stdio_transport(config: ServerConfig, errlog: IO[str] | None) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server in its own session (under its keeper on Linux); exchange JSON-RPC lines with it.

    On exit (shielded from cancellation): stdin is closed, the server gets `PROCESS_EXIT_TIMEOUT_S` to
    exit, then every process it started gets SIGTERM and, `GROUP_KILL_TIMEOUT_S` later, SIGKILL: on Linux
    all of them, whatever their session or process group (the keeper does it, also if orchestrator dies);
    elsewhere its process group. This happens even when the server exited by itself, so children it
    left behind go with it.
    """
    server = await open_server_process(
        [config.launch_command(), *config.args],
        env={**os.environ, **config.env},
        cwd=config.cwd,
        stderr=errlog if errlog is not None else sys.stderr,
        grace_s=GROUP_KILL_TIMEOUT_S,
    )
    process = server.process
    # No await between the spawn and the `try`: a cancellation in that gap would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    try:
        await server.started()  # OSError when the command itself cannot be started
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_stdout, process, read_writer, config.max_message_bytes)
            tasks.start_soon(_write_stdin, process, write_reader, read_writer, writer_done)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()  # the reader keeps draining stdout so a blocked server can exit
                    write_stream.close()
                    with anyio.move_on_after(WRITER_FLUSH_TIMEOUT_S):
                        await writer_done.wait()
                    await _stop(server)
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            server.close()
            if process.returncode is None:  # the task group never started: still end the process
                await _stop(server)
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()
            _close_pipes(process)


async def _read_stdout(
    process: anyio.abc.Process, sink: MemoryObjectSendStream[SessionMessage | Exception], limit: int
) -> None:
    """Split stdout into lines and hand each parsed message (or fault) to the session; drain after it left."""
    assert process.stdout is not None
    lines = _LineReader(limit)
    forwarding = True
    try:
        while True:
            try:
                chunk = await process.stdout.receive(READ_CHUNK_BYTES)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                return
            # A line that makes a long message (a listing of many tools) is parsed on a worker thread.
            parsed = (
                lines.feed(chunk)
                if lines.pending + len(chunk) < PARSE_OFF_LOOP_BYTES
                else await anyio.to_thread.run_sync(lines.feed, chunk)
            )
            for item in parsed:
                if not forwarding:
                    break
                try:
                    await sink.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    forwarding = False  # the session is gone; keep reading so the server never blocks on a full pipe
    finally:
        sink.close()  # end of stream: the session sees the connection close


async def _write_stdin(
    process: anyio.abc.Process,
    source: MemoryObjectReceiveStream[SessionMessage],
    reader_sink: MemoryObjectSendStream[SessionMessage | Exception],
    done: anyio.Event,
) -> None:
    assert process.stdin is not None
    try:
        async with source:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((data + "\n").encode("utf-8", "replace"))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading (or exited): end the session instead of leaving requests waiting.
        await reader_sink.aclose()
    finally:
        done.set()


async def _stop(server: ServerProcess) -> None:
    """The MCP shutdown sequence, then the end of every process the server started."""
    process = server.process
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    await exited(process, PROCESS_EXIT_TIMEOUT_S)
    await server.end(GROUP_KILL_TIMEOUT_S)
    await exited(process, REAP_TIMEOUT_S)


def _close_pipes(process: anyio.abc.Process) -> None:
    """Close the asyncio subprocess transport, which otherwise stays open (and warns at garbage collection)
    while a survivor holds a pipe; nothing public exposes it."""
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


class _LineReader:
    """Bytes in, parsed messages and faults out, one line at a time, never holding more than `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._discarding = False

    @property
    def pending(self) -> int:
        """Bytes of the line read so far."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception]:
        items: list[SessionMessage | Exception] = []
        start = 0
        while start <= len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not self._discarding:
                self._buffer += chunk[start:end]
                if len(self._buffer) > self._limit:
                    items.extend(self._drop_too_long())
            if newline < 0:
                return items
            if self._discarding:
                self._discarding = False
            else:
                line, self._buffer = bytes(self._buffer), bytearray()
                items.extend(_parse_line(line))
            start = newline + 1
        return items

    def _drop_too_long(self) -> list[SessionMessage | Exception]:
        """Drop the line being read (its rest is skipped as it arrives); fail the request it answers."""
        head = bytes(self._buffer[:HEAD_BYTES])
        size = len(self._buffer)
        self._buffer = bytearray()
        self._discarding = True
        fault = StdoutLineFault("too_long", _excerpt(head), size)
        items: list[SessionMessage | Exception] = [fault]
        match = _RESPONSE_HEAD.match(head)
        if match is not None:
            request_id: int | str = json.loads(match.group(1))
            error = types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=f"the server's response is longer than max_message_bytes={self._limit} and was dropped",
                data=TOO_LONG_MARKER,
            )
            items.append(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))
        return items


def _parse_line(raw: bytes) -> list[SessionMessage | Exception]:
    """One line as a message, plus a fault when it had to be repaired; only a fault when it is skipped."""
    raw = raw.strip()
    if not raw:
        return []
    items: list[SessionMessage | Exception] = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        items.append(StdoutLineFault("invalid_utf8", _excerpt(text), len(raw)))
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] != "json_invalid":
            return [*items, StdoutLineFault("not_jsonrpc", _excerpt(text), len(raw))]
        if "recursion limit" not in str(first.get("msg", "")):
            return [*items, StdoutLineFault("not_json", _excerpt(text), len(raw))]
        parsed = _parse_deep(text)
        if parsed is None:
            return [*items, StdoutLineFault("too_deep", _excerpt(text), len(raw))]
        message = parsed
    return [*items, SessionMessage(message)]


def _parse_deep(text: str) -> Any:
    """A message nested deeper than pydantic's JSON parser allows, through the standard library's parser
    (its limit is the interpreter's recursion limit, ~1000 levels); None when that fails too."""
    try:
        return types.jsonrpc_message_adapter.validate_python(json.loads(text), by_name=False)
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        return None


def _excerpt(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text[: EXCERPT_CHARS * 4].decode("utf-8", "replace")
    return repr(one_line(text[: EXCERPT_CHARS * 4], EXCERPT_CHARS))


@contextlib.asynccontextmanager
async def _open_sdk(config: ServerConfig, errlog: IO[str] | None) -> AsyncIterator[Any]:
    """HTTP and SSE (and stdio on Windows) through the SDK's own clients."""
    if config.transport == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=config.launch_command(),
            args=list(config.args),
            env={**os.environ, **config.env},
            cwd=config.cwd,
            encoding_error_handler="replace",
        )
        stdio = stdio_client(params, errlog=cast(TextIO, errlog)) if errlog is not None else stdio_client(params)
        async with stdio as streams:
            yield streams
    elif config.transport == "http":
        from mcp.client.streamable_http import streamable_http_client

        assert config.url is not None
        timeout = httpx2.Timeout(HTTP_CONNECT_TIMEOUT_S, read=None)
        limit = config.max_message_bytes
        bounded = _BoundedTransport(httpx2.AsyncHTTPTransport(), limit)
        async with (
            httpx2.AsyncClient(headers=config.headers, timeout=timeout, transport=bounded) as http,
            streamable_http_client(config.url, http_client=http, max_sse_event_size=limit) as streams,
        ):
            yield streams
    else:
        from mcp.client.sse import sse_client

        assert config.url is not None
        async with sse_client(
            config.url, headers=config.headers, timeout=HTTP_CONNECT_TIMEOUT_S, sse_read_timeout=SSE_READ_TIMEOUT_S
        ) as streams:
            yield streams


class ResponseTooLong(httpx2.StreamError):
    """A response body past `max_message_bytes` (a stream error: the SDK fails that request only)."""


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """An httpx transport whose JSON response bodies end in an error past `limit` bytes, read as they stream
    in (never buffered whole), so a streamable HTTP server's huge answer fails its request, as a too-long
    stdout line does (`max_message_bytes`), instead of growing the process that serves every server. The
    SDK itself bounds each SSE event (`max_sse_event_size`)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").split(";", 1)[0].strip().lower() == "application/json":
            response.stream = _BoundedBody(response.stream, self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body stream that raises `ResponseTooLong` once more than `limit` bytes came through."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise ResponseTooLong(
                    f"the server's response is longer than max_message_bytes={self._limit} and was dropped"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class WatchedTransport:
    """Wraps a transport so the end of its read stream (EOF: process exited, socket closed) is noticed, and
    each `tools/list` result passes through `filter_listing` before the SDK parses it.

    Without the first a dead server with no request in flight would go unnoticed until the next call;
    without the second one unusable tool fails the SDK's parsing of the whole page. The filter runs on a
    worker thread: checking a listing of many tools took the event loop, and every other server, for seconds.
    """

    def __init__(
        self, inner: Any, on_end: Callable[[], None], filter_listing: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        self._inner = inner
        self._on_end = on_end
        self._filter_listing = filter_listing
        self._listings: set[Any] = set()
        """Ids of the `tools/list` requests sent and not yet answered."""

    async def __aenter__(self) -> tuple[Any, Any]:
        read_stream, write_stream = await self._inner.__aenter__()
        return _WatchedReadStream(read_stream, self._on_end, self._incoming), _WatchedWriteStream(
            write_stream, self._outgoing
        )

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        suppressed: bool | None = await self._inner.__aexit__(*exc_info)
        return suppressed

    def _outgoing(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest) and message.method == "tools/list":
            self._listings.add(message.id)

    async def _incoming(self, item: Any) -> Any:
        if not self._listings or not isinstance(item, SessionMessage):
            return item
        message = item.message
        if isinstance(message, types.JSONRPCError):
            self._listings.discard(message.id)
        elif isinstance(message, types.JSONRPCResponse) and message.id in self._listings:
            self._listings.discard(message.id)
            filtered = await anyio.to_thread.run_sync(self._filter_listing, message.result)
            return dataclasses.replace(item, message=message.model_copy(update={"result": filtered}))
        return item


class _WatchedWriteStream:
    """A write stream that shows each outgoing message to `on_send` first."""

    def __init__(self, inner: Any, on_send: Callable[[Any], None]) -> None:
        self._inner = inner
        self._on_send = on_send

    async def send(self, item: Any) -> None:
        self._on_send(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> _WatchedWriteStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class _WatchedReadStream:
    """A read stream that passes each item through `transform` and calls `on_end` once when it reaches its
    end or is closed under the reader."""

    def __init__(self, inner: Any, on_end: Callable[[], None], transform: Callable[[Any], Awaitable[Any]]) -> None:
        self._inner = inner
        self._on_end = on_end
        self._transform = transform

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return await self._transform(item)

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
