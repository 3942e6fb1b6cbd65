"""Short-lived commands import only what they use: help and `config` never load the heavy stacks.

Each case runs the CLI in a fresh interpreter (imports are per process) and reads back which top-level
packages it loaded. benchmarks/cli_startup.py measures the CPU this saves.
"""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import orchestrator._cli as cli

HEAVY = frozenset(
    {
        "mcp",
        "numpy",
        "onnxruntime",
        "tokenizers",
        "tiktoken",
        "opentelemetry",
        "prometheus_client",
        "uvicorn",
        "starlette",
        "httpx2",
        "httpx",
        "jsonschema",
        "anyio",
    }
)
"""Packages that only commands talking to servers, searching or exporting metrics need."""

RUN_TIMEOUT_S = 60
"""A start-up takes well under a second; this only bounds a hung child on a loaded machine."""

_PROBE = """
import json, sys
sys.argv = ["orchestrator", *json.loads(sys.argv[1])]
from orchestrator._cli import app
try:
    app()
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded_packages(*args: str, cwd: Path) -> tuple[set[str], str]:
    """(top-level packages imported, stdout) of `orchestrator ARGS` run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    marker = done.stderr.rpartition("MODULES ")
    assert marker[1], done.stderr
    packages = set(json.loads(marker[2]))
    assert {"typer", "orchestrator"} <= packages  # the probe saw the command run
    return packages, done.stdout


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "bernstein.yaml"
    path.write_text(
        "mcp:\n  servers:\n    time:\n      command: python\n      args: [-m, mcp_server_time]\n",
        encoding="utf-8",
    )
    return path


def test_importing_the_cli_loads_neither_heavy_packages_nor_rich_nor_the_settings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, orchestrator._cli; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    packages = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert not packages & (HEAVY | {"rich", "pydantic", "pydantic_settings", "yaml"})
    assert "orchestrator._config" not in json.loads(done.stdout)


def test_help_loads_no_heavy_package_nor_the_settings_nor_rich(tmp_path: Path) -> None:
    packages, out = loaded_packages("--help", cwd=tmp_path)
    assert "config" in out and "spawn" in out and "metrics" in out  # every command is still listed
    assert not packages & (HEAVY | {"pydantic_settings", "rich", "markdown_it", "pygments"})


def test_config_check_loads_no_heavy_package_and_no_rich(config: Path) -> None:
    packages, out = loaded_packages("--config", str(config), "config", "check", cwd=config.parent)
    assert out.startswith(f"ok: {config} (--config): 1 servers, 1 enabled")
    assert not packages & (HEAVY | {"rich"})


def test_config_show_to_a_pipe_loads_no_heavy_package_and_no_rich(config: Path) -> None:
    packages, out = loaded_packages("--config", str(config), "config", "show", cwd=config.parent)
    lines = out.splitlines()
    assert lines[0] == f"config file: {config} (--config)"
    assert lines[1].split() == ["key", "value", "source"]
    assert any(line.split()[:2] == ["mcp.servers.time.command", "python"] for line in lines)
    assert not packages & (HEAVY | {"rich"})


def test_what_serve_imports_loads_neither_pyjwt_nor_the_detectors_rules(tmp_path: Path) -> None:
    """A stdio `serve` whose listings match their pins mints no credential and scans nothing: PyJWT and
    the detector's rules (about 0.3 s of CPU together) are imported when first used."""
    modules = ("orchestrator._cli.spawn", "orchestrator._gateway.server", "orchestrator.protocols.mcp._manager")
    done = subprocess.run(
        [sys.executable, "-c", f"import json, sys, {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert set(modules) <= loaded
    assert "jwt" not in loaded
    assert "orchestrator.protocols.mcp._poisoning_rules" not in loaded


@pytest.mark.parametrize(
    ("header", "rows"),
    [
        (["key", "value", "source"], [["mcp.cache_dir", "null", "default"], ["gateway.port", "8931", "file"]]),
        (["", ""], [["agent", "default"], ["reason", "catalog of 1,054 tokens is under threshold_tokens 6000"]]),
        (["name", "summary"], [["time__get_current_time", "Current time\nin a timezone"], ["b", ""]]),
        (["server", "summary"], [["日本語", "東京の時刻"], ["ascii", "café, naïve, e\u0301"]]),
        (["name", "summary"], [["[bold]not markup[/bold]", "[/] :smile: [red]"]]),
        (["a", "b"], []),
    ],
)
def test_a_piped_table_is_exactly_what_rich_prints_for_it(header: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from orchestrator._cli._common import PIPE_WIDTH, plain_table

    out = io.StringIO()
    table = Table(*header, box=None, header_style="bold", pad_edge=False)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(file=out, highlight=False, soft_wrap=True, width=PIPE_WIDTH).print(table)
    assert plain_table(header, rows) == out.getvalue()


def test_the_lazy_command_table_names_every_command_each_module_registers() -> None:
    registered: dict[str, str] = {}
    for module_info in pkgutil.iter_modules(cli.__path__):
        if module_info.name.startswith("_"):  # helpers, and __main__ (which would run the CLI)
            continue
        module = importlib.import_module(f"{cli.__name__}.{module_info.name}")
        commands = typer.Typer()
        module.register(commands)
        for name in typer.main.get_group(commands).commands:
            assert name not in registered, f"{name} registered by {registered.get(name)} and {module_info.name}"
            registered[name] = module_info.name
    assert registered == cli.COMMAND_MODULES


def test_help_lists_every_command_and_a_typo_gets_a_suggestion() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli.app, ["--help"])
    assert listed.exit_code == 0, listed.output
    for name in cli.COMMAND_MODULES:
        assert re.search(rf"^\W*{name} ", listed.output, re.MULTILINE), name
    typo = runner.invoke(cli.app, ["confg"])
    assert typo.exit_code == 2
    assert "No such command 'confg'. Did you mean 'config'?" in typo.output
