"""`orchestrator servers [--json]` end to end through the CLI runner, against real test servers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from orchestrator._cli import app

from .conftest import server_entry


def _write_config(tmp_path: Path, servers: dict[str, dict[str, object]]) -> Path:
    path = tmp_path / "bernstein.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"cache_dir": str(tmp_path / "cache"), "servers": servers}}))
    return path


def _stdio(script: str, *args: str, **extra: object) -> dict[str, object]:
    return server_entry(script, *args, **extra)


def test_servers_json_lists_every_server_and_exits_1_when_one_failed(tmp_path: Path) -> None:
    config = _write_config(
        tmp_path,
        {
            "basic": _stdio("basic.py"),
            "hanging": _stdio("hanging.py", startup_timeout_s=1.5),
            "spare": _stdio("basic.py", enabled=False),
        },
    )
    result = CliRunner().invoke(app, ["--config", str(config), "servers", "--json"])
    assert result.exit_code == 1, result.output
    rows = json.loads(result.stdout)
    summary = [{key: row[key] for key in ("name", "transport", "state", "tools", "error")} for row in rows]
    assert summary == [
        {"name": "basic", "transport": "stdio", "state": "ready", "tools": 5, "error": None},
        {
            "name": "hanging",
            "transport": "stdio",
            "state": "failed",
            "tools": 0,
            "error": "no answer within startup_timeout_s=1.5 s",
        },
        {
            "name": "spare",
            "transport": "stdio",
            "state": "stopped",
            "tools": 0,
            "error": "disabled (mcp.servers.spare.enabled: false)",
        },
    ]
    hanging = rows[1]
    assert hanging["circuit"] in ("open", "half-open")  # failed, and tried again later (not given up)
    assert rows[0]["circuit"] == "closed" and rows[0]["dropped_tools"] == []


def test_servers_table_exits_0_when_every_enabled_server_is_ready(tmp_path: Path) -> None:
    config = _write_config(
        tmp_path,
        {"paged": _stdio("paged.py", "--tools", "3"), "spare": _stdio("hanging.py", enabled=False)},
    )
    result = CliRunner().invoke(app, ["--config", str(config), "servers"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()]
    assert lines[0] == ["name", "transport", "state", "tools", "error"]
    assert lines[1] == ["paged", "stdio", "ready", "3"]
    assert lines[2][:4] == ["spare", "stdio", "stopped", "0"]
    assert result.stderr == ""


def test_servers_with_an_invalid_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = _write_config(tmp_path, {"web": {"transport": "http"}})
    result = CliRunner().invoke(app, ["--config", str(config), "servers"])
    assert result.exit_code == 2
    assert "mcp.servers.web: transport http needs 'url'" in result.stderr
