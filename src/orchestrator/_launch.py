"""Launching one agent for one task: the I/O edge of the spawn path.

`spawn_agent(settings, task, agent)` is what `orchestrator spawn` runs. Warm path: a gateway answers at
`gateway.host:port` and proves it holds the gateway's secret (`gateway.token`, or the one `orchestrator
serve` wrote to its runtime file), so the spawn is opened there (`POST /spawns`) and the agent reuses its
live server connections. Cold path: nothing answers, no secret is known, or the process on the port
cannot prove itself (it gets nothing: a one-line warning says so), so this process starts the manager
(only the servers the profile may use) and a private gateway on a free loopback port for the spawn.
Either way the agent gets an MCP config file pointing at its own spawn endpoint, its command template
is filled in, and the process is awaited within the profile's `timeout_s`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Literal

import anyio

from ._config import AgentProfile, Settings
from ._errors import ConfigError
from ._gateway.client import GatewayAuthError, GatewayClient
from ._gateway.server import Gateway
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

PLACEHOLDERS = ("{task}", "{mcp_config}", "{mcp_url}", "{tools_prompt}", "{prompt_file}", "{server_name}")
"""What a command template may contain; replaced literally, so other braces (JSON) pass through untouched.
`{mcp_url}` is for agents without a config-file flag (Codex: `-c mcp_servers.{server_name}.url="{mcp_url}"`);
`{server_name}` is the gateway's name in the spawn's MCP config (gateway.server_name), which clients put
before tool names (`mcp__{server_name}__*` in Claude Code's --allowedTools)."""
PLACEHOLDERS_BY_NAME = tuple(placeholder.strip("{}") for placeholder in PLACEHOLDERS)
_PLACEHOLDER_PATTERN = re.compile("|".join(re.escape(placeholder) for placeholder in PLACEHOLDERS))
KILL_GRACE_S = 3.0
"""After the timeout: SIGTERM to the agent's process group, then SIGKILL if it is still there this long after."""
MCP_CONFIG_NAME = "mcp.json"
SECRET_ENV_VARS = (
    "BERNSTEIN_GATEWAY__TOKEN",
    "BERNSTEIN_GATEWAY__SIGNING_KEY",
    "BERNSTEIN_STORE__URL",
    "ORCHESTRATOR_GATEWAY_TOKEN",
)
"""Never handed to an agent: with them it could open spawns for any profile, or rewrite the store
(`ORCHESTRATOR_GATEWAY_TOKEN` is where docs/spawning.md has the user keep the admin secret for Codex)."""
MIN_HELD_SECRET_CHARS = 8
"""A variable whose value is at least this long and part of a server's env, header or URL value is not
handed to an agent (shorter values match too much by chance)."""
PROMPT_FILE_NAME = "tools-prompt.md"

log = logging.getLogger(__name__)


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
    """The argv with each `{placeholder}` replaced by its value, in one pass: a value that itself holds a
    placeholder (a task text quoting `{mcp_url}`) is never re-parsed.

    A value standing as a whole argument that starts with `-` would be read by the agent's CLI as an option
    (a checklist pasted from an issue, `- [ ] fix`, or an attack: `--settings={"hooks": ...}` made Claude
    Code run a command): it is refused unless a `--` argument, which ends the options, comes before it.

    Raises:
        ValueError: such a value with no `--` before it (one line naming the placeholder).
    """
    argv: list[str] = []
    options_ended = False
    for part in template:
        whole = _PLACEHOLDER_PATTERN.fullmatch(part)
        if whole is not None and not options_ended and values[part.strip("{}")].startswith("-"):
            raise ValueError(
                f"{part} starts with '-', and the agent's CLI would read it as an option: put \"--\" before {part}"
            )
        options_ended = options_ended or part == "--"
        argv.append(_PLACEHOLDER_PATTERN.sub(lambda match: values[match.group(0).strip("{}")], part))
    return argv


def _filled(agent: str, template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """`fill_command`, its refusal as a config error naming the profile's command.

    Raises:
        ConfigError: a whole-argument value starting with `-` and no `--` before it.
    """
    try:
        return fill_command(template, values)
    except ValueError as exc:
        raise ConfigError(f"agents.{agent}.command: {exc}") from None


def profile_servers(settings: Settings, profile: AgentProfile) -> list[str]:
    """The enabled servers an agent profile may use: all a cold spawn has to start."""
    return [
        name for name, server in settings.mcp.servers.items() if server.enabled and matches_any(name, profile.servers)
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
    warn: Callable[[str], None] | None = None,
) -> SpawnSummary:
    """Plan, launch and await one agent through a running gateway (warm) or one started for it (cold).

    Args:
        warn: where the one-line warning goes when the process on the gateway's port fails to prove it
            is the gateway (default: this module's logger).

    Raises:
        ConfigError: unknown profile, no command template, the command cannot start, or the profile's
            `timeout_s` outlives `gateway.spawn_ttl_s`.
    """
    profile = settings.agent(agent)
    if not profile.command:
        raise ConfigError(
            f"agents.{agent}.command: not set, so there is nothing to launch (use --dry-run to see the plan)"
        )
    if profile.timeout_s > settings.gateway.spawn_ttl_s:
        raise ConfigError(
            f"agents.{agent}.timeout_s: {profile.timeout_s:g} s outlives gateway.spawn_ttl_s "
            f"({settings.gateway.spawn_ttl_s:g} s): the agent's credential would expire while it runs"
        )
    _filled(agent, profile.command, {**dict.fromkeys(PLACEHOLDERS_BY_NAME, ""), "task": task})  # before any spawn
    client = GatewayClient.from_settings(settings)
    if await _gateway_proven(client, warn):
        info = await client.open_spawn(task, agent, task_id)
        try:
            run = await _launch(settings, profile, task, info, stdout, workdir, client.secret)
        finally:
            with anyio.CancelScope(shield=True):  # a spawn interrupted by a signal is closed all the same
                stats = await client.close_spawn(info["id"])
        return _summary(info, stats, run, "warm")
    async with _cold_gateway(settings, profile, telemetry) as gateway:
        handle = gateway.open_spawn(task, agent, task_id=task_id)
        info = handle.to_json()
        try:
            run = await _launch(settings, profile, task, info, stdout, workdir, client.secret)
        finally:
            stats = gateway.close_spawn(handle.id)
    return _summary(info, stats, run, "cold")


async def _gateway_proven(client: GatewayClient, warn: Callable[[str], None] | None) -> bool:
    """True when a gateway answers at the configured address and proves it holds its secret; False
    (the cold path) when none answers or no secret is known, and, with a warning, when an impostor does."""
    if not client.has_secret:
        return False
    try:
        return await client.authenticate()
    except GatewayAuthError as exc:
        message = f"{exc}; starting a private gateway for this spawn instead (cold path)"
        if warn is not None:
            warn(message)
        else:
            log.warning("%s", message)
        return False


@contextlib.asynccontextmanager
async def _cold_gateway(
    settings: Settings, profile: AgentProfile, telemetry: Telemetry | None
) -> AsyncIterator[Gateway]:
    """The manager (the profile's servers only) and a gateway on a free loopback port, for one spawn.

    Its admin secret exists only in this process (never written, never given to the agent), so the
    agent reaches nothing but its own spawn endpoint, whose credential carries its profile."""
    from .protocols.mcp._manager import MCPManager
    from .search._embedding import EmbeddingRuntime

    history = TaskHistory.from_settings(settings)  # in the shared store: later spawns see what this one called
    servers = profile_servers(settings, profile)
    try:
        with EmbeddingRuntime.from_settings(settings) as embeddings:
            # The shared store: tools held back from the warm gateway are held back here too.
            async with MCPManager(settings, servers=servers, telemetry=telemetry, store=history.store) as manager:
                async with (
                    Gateway(settings, manager, history=history, telemetry=telemetry, embeddings=embeddings) as gateway,
                    gateway.running("127.0.0.1", 0),
                ):
                    yield gateway
    finally:
        history.store.close()


async def _launch(
    settings: Settings,
    profile: AgentProfile,
    task: str,
    info: Mapping[str, Any],
    stdout: IO[Any] | int | None,
    workdir: Path | None,
    admin_secret: str,
) -> AgentRun:
    """Write the spawn's MCP config and prompt file, fill the template, run the agent (whose environment
    holds neither `admin_secret` nor the config's secrets)."""
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
            "server_name": next(iter(info["mcp_config"]["mcpServers"])),  # the serving gateway's own name
        }
        env = {
            **_without_secrets(os.environ, settings, (admin_secret,)),
            **profile.env,
            "ORCHESTRATOR_SPAWN_ID": info["id"],
            "ORCHESTRATOR_TASK_ID": info["task_id"],
            "ORCHESTRATOR_MCP_CONFIG": str(config_path),
            "ORCHESTRATOR_MCP_URL": info["url"],
            "ORCHESTRATOR_MCP_TOKEN": info["token"],
        }
        return await run_agent(
            _filled(str(info["agent"]), profile.command, values),
            env=env,
            timeout_s=profile.timeout_s,
            cwd=str(workdir) if workdir is not None else None,
            stdout=stdout,
        )


def _summary(
    info: Mapping[str, Any], stats: Mapping[str, Any], run: AgentRun, path: Literal["warm", "cold"]
) -> SpawnSummary:
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


def _without_secrets(environ: Mapping[str, str], settings: Settings, also: Iterable[str] = ()) -> dict[str, str]:
    """The environment without the gateway's secrets and the servers': the variables that set them, any
    variable holding one of them (`gateway.token: ${MY_TOKEN}` passes MY_TOKEN to this process too), or the
    admin secret in use (`also`), and any variable whose value is part of a server's env, header or URL
    value (`Authorization: "Bearer ${GITHUB_TOKEN}"`): with it an agent could reach the server around
    its profile."""
    gateway = settings.gateway
    secrets = {value for value in (gateway.token, gateway.signing_key, settings.store.url, *also) if value}
    held = [
        value
        for server in settings.mcp.servers.values()
        for value in (*server.env.values(), *server.headers.values(), server.url or "")
    ]
    return {
        name: value
        for name, value in environ.items()
        if name not in SECRET_ENV_VARS
        and value not in secrets
        and not (len(value) >= MIN_HELD_SECRET_CHARS and any(value in secret for secret in held))
    }


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
