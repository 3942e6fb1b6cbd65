"""Shared plumbing of the interop tests: the npm install check, gateway processes, Node scripts, spawns.

Used by tests/test_interop_clients.py (TypeScript SDK clients and the Inspector CLI) and
tests/test_agent_clis.py (Claude Code and Codex). Everything runs as real processes on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = [
    "GATEWAY_TOKEN",
    "INTEROP_DIR",
    "NODE_BIN",
    "ORCHESTRATOR",
    "Gateway",
    "free_port",
    "open_spawn",
    "require_node_packages",
    "run_node",
    "running_gateway",
    "write_config",
]

INTEROP_DIR = Path(__file__).resolve().parent
REPO = INTEROP_DIR.parents[1]
NODE_MODULES = INTEROP_DIR / "node_modules"
NODE_BIN = NODE_MODULES / ".bin"
INSTALL_SCRIPT = REPO / "scripts" / "install-node-deps.sh"
ORCHESTRATOR = str(Path(sys.executable).with_name("orchestrator"))
GATEWAY_START_TIMEOUT_S = 60.0
# A bound, not an expectation: the gateway with three test servers is up in 2-4 s here; each server imports
# the mcp SDK (about 2 s of CPU) and the machine's 2 cores are shared.
INSTALL_TIMEOUT_S = 600.0
# `npm ci` of the pinned packages takes 25-40 s from the registry; a slow mirror gets room.
NODE_SCRIPT_TIMEOUT_S = 100.0
# Above the scripts' own watchdog (90 s), so a hung script still reports what it saw; below pytest's 120 s.
# The gateway's stderr reaches EOF when it and the servers it started (they share the pipe) have exited.
STDERR_EOF_TIMEOUT_S = 15.0
_BANNER_URL = re.compile(r"at (http://\S+?)/mcp\b")
GATEWAY_TOKEN = "interop-tests-admin-secret-0123456789"
"""`gateway.token` of every config written here: the admin secret `/mcp`, `/health` and `POST /spawns` want
(set, not generated, so every process reading the config knows it)."""


def require_node_packages() -> None:
    """Skip when node or npm is missing; otherwise make sure tests/interop's packages are installed
    (scripts/install-node-deps.sh: a no-op when node_modules matches the lock) or fail saying why."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not on PATH: the interop tests drive npm packages (Node >= 20)")
    done = subprocess.run(["sh", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"sh {INSTALL_SCRIPT.relative_to(REPO)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def free_port() -> int:
    """A port free on 127.0.0.1 now (for a gateway that `orchestrator spawn` must find at gateway.port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_config(path: Path, servers: Mapping[str, Any], agents: Mapping[str, Any], **sections: Any) -> Path:
    """A bernstein.yaml for the tests: search mode by default (threshold 0), lexical ranking (no model load:
    these tests are about the protocol, not ranking), no tools pinned because earlier tests' spawns of a
    similar task called them (each test expects a first spawn's plan), caches under the file's folder."""
    data: dict[str, Any] = {
        "mcp": {
            "servers": dict(servers),
            "cache_dir": str(path.parent / "cache"),
            "tool_search": {"threshold_tokens": 0, "ranking": "lexical", "traces": {"pin_similar_tasks": False}},
        },
        "agents": dict(agents),
        "gateway": {"host": "127.0.0.1", "port": 0, "token": GATEWAY_TOKEN},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@dataclass
class Gateway:
    """A running `orchestrator serve --transport http`."""

    base_url: str
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def authorization(self) -> str:
        """The header line a client of `/mcp` sends (`Name: value`)."""
        return f"Authorization: Bearer {GATEWAY_TOKEN}"


@contextlib.contextmanager
def running_gateway(config: Path, *args: str) -> Iterator[Gateway]:
    """`orchestrator --config CONFIG serve ARGS...` until the block ends; yields once its banner names the URL."""
    command = [ORCHESTRATOR, "--config", str(config), "serve", *args]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    drain: threading.Thread | None = None
    try:
        base_url = _read_banner(process, lines)
        drain = threading.Thread(target=_drain, args=(process, lines), daemon=True)
        drain.start()
        _wait_until_servers_are_up(base_url, lines)
        yield Gateway(base_url, process, lines)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _close_stderr(process, drain)


def _read_banner(process: subprocess.Popen[str], lines: list[str]) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + GATEWAY_START_TIMEOUT_S
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stderr], [], [], remaining)
        if not readable:
            break
        line = process.stderr.readline()
        if not line:
            raise RuntimeError(f"orchestrator serve exited ({process.wait()}): {''.join(lines)[-2000:]}")
        lines.append(line)
        match = _BANNER_URL.search(line)
        if match:
            return match.group(1)
    raise RuntimeError(
        f"orchestrator serve printed no URL within {GATEWAY_START_TIMEOUT_S:g} s: {''.join(lines)[-2000:]}"
    )


def _wait_until_servers_are_up(base_url: str, lines: list[str]) -> None:
    """`serve` answers at once and announces servers as they come up; the scenarios want them all listed
    first (a client that connects earlier gets the ready part and a list_changed later)."""
    deadline = time.monotonic() + GATEWAY_START_TIMEOUT_S
    request = urllib.request.Request(f"{base_url}/health", headers={"Authorization": f"Bearer {GATEWAY_TOKEN}"})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                servers = json.loads(response.read()).get("servers", [])
        except (OSError, ValueError):
            servers = []
        if servers and all(server.get("state") in ("ready", "degraded", "stopped") for server in servers):
            return
        time.sleep(0.1)
    raise RuntimeError(
        f"the gateway's servers were not up within {GATEWAY_START_TIMEOUT_S:g} s: {''.join(lines)[-2000:]}"
    )


def _close_stderr(process: subprocess.Popen[str], drain: threading.Thread | None) -> None:
    """Close our end of the gateway's stderr once the drain thread has read it to the end (the gateway has
    exited; its servers, which write to the same pipe, with it)."""
    if drain is not None:
        drain.join(timeout=STDERR_EOF_TIMEOUT_S)
        assert not drain.is_alive(), f"the gateway's stderr stayed open {STDERR_EOF_TIMEOUT_S:g} s after it exited"
    assert process.stderr is not None
    process.stderr.close()


def _drain(process: subprocess.Popen[str], lines: list[str]) -> None:
    """Keep reading the gateway's stderr so it never blocks on a full pipe; kept for failure messages."""
    assert process.stderr is not None
    for line in process.stderr:
        lines.append(line)


def open_spawn(gateway: Gateway, task: str, agent: str) -> dict[str, Any]:
    """`POST /spawns` on the gateway: the spawn's `url`, `token`, `mcp_config` and `plan`."""
    request = urllib.request.Request(
        f"{gateway.base_url}/spawns",
        data=json.dumps({"task": task, "agent": agent}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {GATEWAY_TOKEN}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def run_node(
    script: str, args: Sequence[str], *, cwd: Path = INTEROP_DIR, timeout: float = NODE_SCRIPT_TIMEOUT_S
) -> Any:
    """Run a Node script of tests/interop and parse the JSON report it prints last on stdout.

    Raises:
        AssertionError: the script printed no JSON, naming its exit status and stderr tail.
    """
    done = subprocess.run(
        ["node", str(INTEROP_DIR / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{script} printed no report (exit {done.returncode}): {done.stderr.strip()[-3000:]}"
    return json.loads(lines[-1])
