"""`orchestrator spawn` and `orchestrator serve` end to end, as real processes, plus dry runs from snapshots."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from orchestrator._cli import app
from orchestrator._launch import fill_command

from .conftest import TIME_SERVER, server_entry

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "tests" / "agents" / "agent.py"
ORCHESTRATOR = str(Path(sys.executable).with_name("orchestrator"))
PROCESS_TIMEOUT_S = 120
# A bound, not an expectation: a cold spawn here is a few seconds.
BANNER_MAX_LINES = 20
# Lines of stderr read while waiting for serve's banner (deprecation warnings may come first).


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A bernstein.yaml with mcp-server-time, a search-mode agent running tests/agents/agent.py, a free port."""
    data = {
        "mcp": {
            "servers": {"time": server_entry(TIME_SERVER, "--local-timezone", "UTC")},
            "cache_dir": str(tmp_path / "cache"),
        },
        "agents": {
            "searcher": {
                "tool_search": {"threshold_tokens": 0},
                "command": [
                    sys.executable,
                    str(AGENT),
                    "--config",
                    "{mcp_config}",
                    "--out",
                    f"{tmp_path}/{{task}}.json",
                ],
                "timeout_s": 60,
            }
        },
        "gateway": {"host": "127.0.0.1", "port": _free_port()},
    }
    path = tmp_path / "bernstein.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _banner(serve: subprocess.Popen[str]) -> str:
    """The line `orchestrator serve` prints once it listens (warnings printed before it are skipped)."""
    assert serve.stderr is not None
    seen = []
    for _ in range(BANNER_MAX_LINES):
        line = serve.stderr.readline()
        seen.append(line)
        if not line or line.startswith("gateway: "):
            return line
    return "".join(seen)


def _orchestrator(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ORCHESTRATOR, "--config", str(config), *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S
    )


@pytest.mark.slow
def test_orchestrator_spawn_runs_a_real_agent_cold_then_through_a_running_gateway(
    config: Path, shared_data: Path
) -> None:
    folder = config.parent
    cold = _orchestrator(config, "spawn", "--task", "cold-run", "--agent", "searcher", "--format", "json")
    assert cold.returncode == 0, cold.stderr
    summary = json.loads(cold.stdout)
    assert (summary["path"], summary["mode"], summary["exit_status"]) == ("cold", "search", "ok")
    assert (summary["searches"], summary["expands"], summary["calls"]) == (1, 1, 1)
    assert summary["tokens_sent"] > 0 and summary["tokens_saved"] >= 0
    report = json.loads((folder / "cold-run.json").read_text())
    assert report["tool"] == "time__get_current_time" and report["result"]["timezone"] == "UTC"

    # Popen's `with` closes the stderr pipe; communicate() reads what is left of it after SIGTERM.
    with subprocess.Popen([ORCHESTRATOR, "--config", str(config), "serve"], stderr=subprocess.PIPE, text=True) as serve:
        try:
            banner = _banner(serve)
            assert "gateway: agent 'default'" in banner, banner
            warm = _orchestrator(config, "spawn", "--task", "warm-run", "--agent", "searcher")
            assert warm.returncode == 0, warm.stderr
            lines = [line.split() for line in warm.stdout.splitlines()]
            assert ["exit", "status", "ok"] in lines and ["mode", "search"] in lines
            assert "(warm gateway)" in warm.stdout and "tokens saved" in warm.stdout
            assert json.loads((folder / "warm-run.json").read_text())["result"]["timezone"] == "UTC"
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                rest = serve.communicate(timeout=30)[1]
            except subprocess.TimeoutExpired:
                serve.kill()
                raise
    assert serve.returncode == 0, rest

    # A later spawn of the first task gets the tool it called pinned (the history outlives both gateways).
    plan = json.loads(
        _dry_run(
            config,
            shared_data / "catalogs" / "time.json",
            "--task",
            "cold-run",
            "--agent",
            "searcher",
            "--format",
            "json",
        )
    )
    assert "time__get_current_time" in plan["pinned"]


@pytest.mark.slow
def test_orchestrator_serve_over_stdio_presents_the_agents_tools(config: Path) -> None:
    async def listed() -> list[str]:
        params = StdioServerParameters(
            command=ORCHESTRATOR, args=["--config", str(config), "serve", "--transport", "stdio"], env=dict(os.environ)
        )
        async with Client(params) as client:
            # serve answers at once with what is up; the time server's tools arrive when it is.
            with anyio.fail_after(PROCESS_TIMEOUT_S):
                while not (names := [tool.name for tool in (await client.list_tools()).tools]):  # noqa: ASYNC110 (a stdio client hears no change here)
                    await anyio.sleep(0.1)
            return names

    assert anyio.run(listed) == ["time__convert_time", "time__get_current_time"]


def test_a_launch_without_a_command_template_is_a_config_error(config: Path) -> None:
    result = CliRunner().invoke(app, ["--config", str(config), "spawn", "--task", "x", "--agent", "default"])
    assert result.exit_code == 2
    assert "agents.default.command: not set" in result.output


def test_a_task_that_reads_as_an_option_is_refused_unless_the_options_end_before_it(
    config: Path, tmp_path: Path
) -> None:
    """Found by red-teaming: a task starting with `-` stood as an argument of its own, so the agent's CLI read
    it as an option; with the documented Claude Code template, `--settings={"hooks": ...}` ran a command."""
    data = yaml.safe_load(config.read_text())
    data["agents"]["echoer"] = {"command": [sys.executable, "-c", "print('ran')", "{task}"]}
    config.write_text(yaml.safe_dump(data))
    attack = '--settings={"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "id"}]}]}}'
    result = CliRunner().invoke(app, ["--config", str(config), "spawn", "--task", attack, "--agent", "echoer"])
    assert result.exit_code == 2 and "ran" not in result.output
    assert result.output.strip() == (
        "error: agents.echoer.command: {task} starts with '-', and the agent's CLI would read it as an option: "
        'put "--" before {task}'
    )
    assert not (tmp_path / "cache" / "run").exists()  # refused before any gateway or spawn
    values = {"task": "- [ ] fix the build", "mcp_config": "/tmp/x.json"}
    assert fill_command(["agent", "--config", "{mcp_config}", "--", "{task}"], values) == [
        "agent",
        "--config",
        "/tmp/x.json",
        "--",
        "- [ ] fix the build",
    ]
    assert fill_command(["agent", "--prompt={task}"], values) == ["agent", "--prompt=- [ ] fix the build"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_a_spawn_stopped_by_a_signal_stops_its_agent(config: Path, tmp_path: Path, signum: int) -> None:
    """Found by red-teaming: only Ctrl-C was handled. SIGTERM or SIGHUP ended `orchestrator spawn` and left
    its agent running (in a session of its own, the signal never reaches it), past its timeout."""
    pid_file = tmp_path / "agent.pid"
    sleeper = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
    data = yaml.safe_load(config.read_text())
    data["agents"]["sleeper"] = {"command": [sys.executable, "-c", sleeper, str(pid_file), "--", "{task}"]}
    config.write_text(yaml.safe_dump(data))
    spawn = subprocess.Popen(
        [ORCHESTRATOR, "--config", str(config), "spawn", "--agent", "sleeper", "--task", "wait"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while not pid_file.exists() or not pid_file.read_text():
            assert spawn.poll() is None and time.monotonic() < deadline, "the agent never started"
            time.sleep(0.05)
        agent = int(pid_file.read_text())
        spawn.send_signal(signum)
        _, stderr = spawn.communicate(timeout=30)  # the agent holds stderr open while it lives
        assert spawn.returncode == 128 + signum and "spawn interrupted" in stderr, stderr
        with pytest.raises(ProcessLookupError):
            os.kill(agent, 0)  # stopped (and reaped) before orchestrator exited
    finally:
        if spawn.poll() is None:
            spawn.kill()
            spawn.wait()


def _dry_run(config: Path, catalog: Path, *extra: str) -> Any:
    task = [] if "--task" in extra else ["--task", "review the PR"]
    result = CliRunner().invoke(
        app, ["--config", str(config), "spawn", *task, "--dry-run", "--catalog", str(catalog), *extra]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_dry_run_prints_the_plan_from_a_snapshot(config: Path, shared_data: Path) -> None:
    plan = json.loads(_dry_run(config, shared_data / "catalogs", "--format", "json"))
    assert {"mode", "full_tokens", "prompt_tokens", "directory_level", "fingerprint", "prompt", "tools"} <= set(plan)
    assert plan["mode"] == "search" and plan["full_tokens"] > 100_000
    assert [tool["name"] for tool in plan["tools"]][-1] == "call_tool"
    again = json.loads(_dry_run(config, shared_data / "catalogs", "--format", "json"))
    assert again["fingerprint"] == plan["fingerprint"]


def test_dry_run_prints_provider_request_fragments(config: Path, shared_data: Path) -> None:
    anthropic = json.loads(_dry_run(config, shared_data / "catalogs", "--format", "anthropic"))
    openai = json.loads(_dry_run(config, shared_data / "catalogs", "--format", "openai"))
    assert anthropic["system"] and {"name", "description", "input_schema"} == set(anthropic["tools"][0])
    assert openai["messages"][0]["role"] == "system" and openai["tools"][0]["type"] == "function"
    text = _dry_run(config, shared_data / "catalogs" / "time.json", "--format", "text")
    assert "mode" in text and "full" in text and "time__get_current_time" in text


def test_provider_formats_need_dry_run(config: Path) -> None:
    result = CliRunner().invoke(app, ["--config", str(config), "spawn", "--task", "x", "--format", "openai"])
    assert result.exit_code == 2 and "--dry-run" in result.output


def test_serve_refuses_a_non_loopback_host_without_a_token(config: Path) -> None:
    result = CliRunner().invoke(app, ["--config", str(config), "serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2
    assert "gateway.host: '0.0.0.0' is not a loopback address; set gateway.token" in result.output
