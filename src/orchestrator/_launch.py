"""Launching one agent for one task: the I/O edge of the spawn path.

`spawn_agent(settings, task, agent)` is what `orchestrator spawn` runs. Warm path: a gateway already
answers at `gateway.host:port`, so the spawn is registered there (`POST /spawns`) and the agent reuses
its live server connections. Cold path: nothing answers, so this process starts the manager (only the
servers the profile may use) and a gateway on a free loopback port for the length of the spawn.
Either way the agent gets an MCP config file pointing at its own spawn endpoint, its command template
is filled in, and the process is awaited within the profile's `timeout_s`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Literal

import anyio

from ._config import AgentProfile, Settings
from ._errors import ConfigError
from ._gateway import Gateway, GatewayClient, client_base_url
from ._history import TaskHistory
from ._planning import matches_any
from ._telemetry import Telemetry

__all__ = [
    "PLACEHOLDERS",
    "AgentRun",
    "SpawnSummary",
    "fill_command",
    "profile_servers",
    "run_agent",
    "spawn_agent",
]

PLACEHOLDERS = ("{task}", "{mcp_config}", "{mcp_url}", "{tools_prompt}", "{prompt_file}")
# What a command template may contain; replaced literally, so other braces (JSON) pass through untouched.
# `{mcp_url}` is for agents without a config-file flag (Codex: `-c mcp_servers.NAME.url="{mcp_url}"`).
KILL_GRACE_S = 3.0
# After the timeout: SIGTERM to the agent's process group, then SIGKILL if it is still there this long after.
MCP_CONFIG_NAME = "mcp.json"
PROMPT_FILE_NAME = "tools-prompt.md"


@dataclass(frozen=True)
class AgentRun:
    """How the agent process ended."""

    exit_code: int | None
    timed_out: bool
    duration_s: float

    @property
    def status(self) -> str:
        if self.timed_out:
            return "timeout"
        return "ok" if self.exit_code == 0 else f"exit {self.exit_code}"


@dataclass(frozen=True)
class SpawnSummary:
    """The per-spawn summary `orchestrator spawn` prints."""

    spawn_id: str
    agent: str
    task_id: str
    path: Literal["warm", "cold"]
    mode: str
    tokens_sent: int
    tokens_saved: int
    searches: int
    expands: int
    calls: int
    errors: int
    exit_status: str
    exit_code: int | None
    duration_s: float
    fingerprint: str

    @property
    def ok(self) -> bool:
        return self.exit_status == "ok"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fill_command(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The argv with each `{placeholder}` replaced by its value (values are never re-parsed)."""
    argv = []
    for part in template:
        for placeholder in PLACEHOLDERS:
            if placeholder in part:
                part = part.replace(placeholder, values[placeholder.strip("{}")])
        argv.append(part)
    return argv


def profile_servers(settings: Settings, profile: AgentProfile) -> list[str]:
    """The enabled servers an agent profile may use: all a cold spawn has to start."""
    return [
        name
        for name, server in settings.mcp.servers.items()
        if server.enabled and matches_any(name, profile.servers)
    ]


async def run_agent(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    cwd: str | None = None,
    stdout: IO[Any] | int | None = None,
) -> AgentRun:
    """Run the agent command to completion, or stop its whole process group after `timeout_s`.

    Raises:
        ConfigError: the command cannot be started (names the program).
    """
    started = time.monotonic()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=None,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        raise ConfigError(f"agent command {argv[0]!r} cannot be started: {exc.strerror or exc}") from None
    async with process:
        try:
            with anyio.move_on_after(timeout_s) as scope:
                await process.wait()
        finally:
            if process.returncode is None:  # timed out, or we are cancelled (Ctrl-C): stop its whole group
                with anyio.CancelScope(shield=True):
                    await _stop_group(process)
    return AgentRun(process.returncode, scope.cancelled_caught, time.monotonic() - started)


async def _stop_group(process: Any) -> None:
    """SIGTERM to the agent's process group, SIGKILL if it is still there after KILL_GRACE_S."""
    _signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
        return
    _signal_group(process.pid, signal.SIGKILL)
    await process.wait()


async def spawn_agent(
    settings: Settings,
    task: str,
    agent: str,
    *,
    task_id: str | None = None,
    stdout: IO[Any] | int | None = None,
    workdir: Path | None = None,
    telemetry: Telemetry | None = None,
) -> SpawnSummary:
    """Plan, launch and await one agent through a running gateway (warm) or one started for it (cold).

    Raises:
        ConfigError: unknown profile, no command template, or the command cannot start.
    """
    profile = settings.agent(agent)
    if not profile.command:
        raise ConfigError(
            f"agents.{agent}.command: not set, so there is nothing to launch (use --dry-run to see the plan)"
        )
    gw = settings.gateway
    client = GatewayClient(client_base_url(gw.host, gw.port), gw.token)
    if await client.health() is not None:
        info = await client.open_spawn(task, agent, task_id)
        try:
            run = await _launch(settings, profile, task, info, stdout, workdir)
        finally:
            stats = await client.close_spawn(info["id"])
        return _summary(info, stats, run, "warm")
    async with _cold_gateway(settings, profile, telemetry) as gateway:
        handle = gateway.open_spawn(task, agent, task_id=task_id)
        info = handle.to_json()
        try:
            run = await _launch(settings, profile, task, info, stdout, workdir)
        finally:
            stats = gateway.close_spawn(handle.id)
    return _summary(info, stats, run, "cold")


@contextlib.asynccontextmanager
async def _cold_gateway(settings: Settings, profile: AgentProfile, telemetry: Telemetry | None) -> AsyncIterator[Gateway]:
    """The manager (the profile's servers only) and a gateway on a free loopback port, for one spawn."""
    from .protocols.mcp._embedding import EmbeddingRuntime
    from .protocols.mcp._manager import MCPManager

    history = TaskHistory.from_settings(settings)
    servers = profile_servers(settings, profile)
    with EmbeddingRuntime.from_settings(settings) as embeddings:
        async with MCPManager(settings, servers=servers, telemetry=telemetry) as manager:
            gateway = Gateway(settings, manager, history=history, telemetry=telemetry, embeddings=embeddings)
            try:
                async with gateway.running("127.0.0.1", 0):
                    yield gateway
            finally:
                gateway.close()


async def _launch(
    settings: Settings,
    profile: AgentProfile,
    task: str,
    info: Mapping[str, Any],
    stdout: IO[Any] | int | None,
    workdir: Path | None,
) -> AgentRun:
    """Write the spawn's MCP config and prompt file, fill the template, run the agent."""
    assert profile.command is not None
    with tempfile.TemporaryDirectory(prefix="orchestrator-spawn-") as folder:
        config_path = Path(folder) / MCP_CONFIG_NAME
        config_path.write_text(json.dumps(info["mcp_config"], indent=2), encoding="utf-8")
        config_path.chmod(0o600)  # it holds the spawn's bearer token
        prompt = info["plan"]["prompt"]
        prompt_path = Path(folder) / PROMPT_FILE_NAME
        prompt_path.write_text(prompt, encoding="utf-8")
        values = {
            "task": task,
            "mcp_config": str(config_path),
            "mcp_url": info["url"],
            "tools_prompt": prompt,
            "prompt_file": str(prompt_path),
        }
        env = {
            **os.environ,
            **profile.env,
            "ORCHESTRATOR_SPAWN_ID": info["id"],
            "ORCHESTRATOR_TASK_ID": info["task_id"],
            "ORCHESTRATOR_MCP_CONFIG": str(config_path),
            "ORCHESTRATOR_MCP_URL": info["url"],
            "ORCHESTRATOR_MCP_TOKEN": info["token"],
        }
        return await run_agent(
            fill_command(profile.command, values),
            env=env,
            timeout_s=profile.timeout_s,
            cwd=str(workdir) if workdir is not None else None,
            stdout=stdout,
        )


def _summary(info: Mapping[str, Any], stats: Mapping[str, Any], run: AgentRun, path: Literal["warm", "cold"]) -> SpawnSummary:
    plan = info["plan"]
    return SpawnSummary(
        spawn_id=info["id"],
        agent=info["agent"],
        task_id=info["task_id"],
        path=path,
        mode=stats.get("mode", plan["mode"]),
        tokens_sent=int(stats.get("tokens_sent", plan["prompt_tokens"])),
        tokens_saved=int(stats.get("tokens_saved", plan["tokens_saved"])),
        searches=int(stats.get("searches", 0)),
        expands=int(stats.get("expands", 0)),
        calls=int(stats.get("calls", 0)),
        errors=int(stats.get("errors", 0)),
        exit_status=run.status,
        exit_code=run.exit_code,
        duration_s=round(run.duration_s, 3),
        fingerprint=str(stats.get("fingerprint", plan["fingerprint"])),
    )


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)

