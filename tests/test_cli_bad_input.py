"""Every bad input to every command: one line naming what is wrong, the documented exit code, no traceback.

Exit codes: 2 for bad input (arguments, configuration), 1 when the job ran and something failed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator._cli import app


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {
        "ok": ("mcp:\n  cache_dir: {cache}\n"),
        "unknown_key": "bogus_key: 1\n",
        "unknown_nested": "mcp:\n  tool_search:\n    threshold: 5\n",
        "bad_type": "mcp:\n  tool_search:\n    threshold_tokens: many\n",
        "not_mapping": "- a\n- b\n",
        "bad_yaml": "mcp: [unclosed\n",
        "deep_yaml": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "bad_replica": "mcp:\n  servers:\n    a: {command: x, replica_of: nope}\n",
    }
    paths = {}
    for name, text in made.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text.replace("{cache}", str(tmp_path / "cache")), encoding="utf-8")
        paths[name] = path
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe not utf-8")
    paths["binary"] = tmp_path / "binary.jsonl"
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    paths["deep_json"] = tmp_path / "deep.json"
    (tmp_path / "queries.jsonl").write_text('{"query": "x", "gold": [["a", "b"]]}\n')
    paths["queries"] = tmp_path / "queries.jsonl"
    (tmp_path / "catalog.json").write_text('{"s": [{"name": "t", "description": "d"}]}')
    paths["catalog"] = tmp_path / "catalog.json"
    return paths


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


CASES = [
    # (config file, arguments, exit code, text the one error line names)
    ("unknown_key", ["config", "check"], 2, "bogus_key: unknown key (line 1)"),
    ("unknown_nested", ["config", "check"], 2, "mcp.tool_search.threshold: unknown key"),
    ("bad_type", ["config", "check"], 2, "mcp.tool_search.threshold_tokens"),
    ("not_mapping", ["config", "check"], 2, "the top level must be a mapping"),
    ("bad_yaml", ["config", "check"], 2, "malformed YAML"),
    ("deep_yaml", ["config", "check"], 2, "malformed YAML"),
    ("bad_replica", ["config", "check"], 2, "replica_of: no server named 'nope'"),
    ("ok", ["serve", "--port", "99999"], 2, "--port"),
    ("ok", ["serve", "--port", "-1"], 2, "--port"),
    ("ok", ["eval", "{queries}", "--catalog", "{catalog}", "--ranking", "bogus"], 2, "--ranking"),
    ("ok", ["eval", "{binary}", "--catalog", "{catalog}"], 2, "not UTF-8"),
    ("ok", ["tools", "list", "--catalog", "{deep_json}"], 2, "nested too deeply"),
    ("ok", ["tools", "audit", "--catalog", "{binary}"], 2, "not UTF-8"),
    ("ok", ["tools", "search", " ", "--catalog", "{catalog}"], 2, "tool_search query is empty"),
    ("ok", ["tools", "search", "x " * 4001, "--catalog", "{catalog}"], 2, "the limit is 8,000"),
    # A name the catalog does not have is a failed lookup (like grep's miss), not bad input.
    ("ok", ["tools", "expand", "nope__tool", "--catalog", "{catalog}"], 1, "unknown tool 'nope__tool'"),
    (
        "ok",
        ["spawn", "--task", "x", "--agent", "ghost", "--dry-run", "--catalog", "{catalog}"],
        2,
        "unknown agent profile 'ghost'",
    ),
    ("ok", ["serve", "--agent", "ghost"], 2, "unknown agent profile 'ghost'"),
    ("ok", ["serve", "--host", "10.1.2.3", "--port", "0"], 2, "gateway.host"),
]


@pytest.mark.parametrize(("config", "args", "code", "names"), CASES)
def test_bad_input_is_one_line_with_the_right_exit_code(
    files: dict[str, Path], config: str, args: list[str], code: int, names: str
) -> None:
    filled = [arg.format(**{key: str(path) for key, path in files.items()}) for arg in args]
    result = CliRunner().invoke(app, ["--config", str(files[config]), *filled])
    output = result.output
    assert result.exit_code == code, output
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert names in " ".join(output.split()), output


def test_a_port_in_use_is_one_line_not_a_traceback(files: dict[str, Path], busy_port: int) -> None:
    result = CliRunner().invoke(app, ["--config", str(files["ok"]), "serve", "--port", str(busy_port)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert f"cannot listen on 127.0.0.1:{busy_port}" in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1
