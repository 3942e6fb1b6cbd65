"""`orchestrator tools list|search|expand|plan` and `orchestrator eval` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator._cli import app

from .conftest import server_entry
from .test_tool_search import TOOLS


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(TOOLS))
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config with no servers, so commands never pick up a stray ./bernstein.yaml."""
    path = tmp_path / "bernstein.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"cache_dir": str(tmp_path / "cache"), "tool_search": {"max_expand": 2}}}))
    return path


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), *args])
    return result.exit_code, result.stdout, result.stderr


def test_tools_list_json_gives_every_tool(config: Path, snapshot: Path) -> None:
    code, out, _ = run(config, "tools", "list", "--catalog", str(snapshot), "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 12
    assert rows[0] == {
        "name": "db__run_query",
        "server": "db",
        "tool": "run_query",
        "summary": "Run a read-only statement",
    }


def test_json_output_escapes_characters_no_one_sees(config: Path, tmp_path: Path) -> None:
    """Found by red-teaming: `--json` wrote a tool's own name as the server sent it, so a C1 control (U+009B,
    a terminal's CSI), a bidi override or a line separator reached the terminal raw. Other scripts stay."""
    name = "c1\x9b2Jname\u202etxt.exe\u2028x"
    snapshot = tmp_path / "hostile.json"
    snapshot.write_text(
        json.dumps({"s": [{"name": name, "description": "Busca archivos: 查找文件.", "inputSchema": {}}]})
    )
    code, out, _ = run(config, "tools", "list", "--catalog", str(snapshot), "--json")
    assert code == 0 and not any(char in out for char in "\x9b\u202e\u2028")
    assert "查找文件" in out  # letters are written as they are
    assert json.loads(out)[0]["tool"] == name  # escaped, not lost


def test_tools_list_filters_by_server_for_people(config: Path, snapshot: Path) -> None:
    code, out, err = run(config, "tools", "list", "--catalog", str(snapshot), "--server", "time")
    assert code == 0
    assert "time__convert_time" in out and "files__read_file" not in out
    assert "2 tools, catalog version" in err


def test_tools_search_json_prints_query_outcome_and_hits(config: Path, snapshot: Path) -> None:
    code, out, _ = run(config, "tools", "search", "read a file", "-k", "2", "--catalog", str(snapshot), "--json")
    assert code == 0
    result = json.loads(out)
    assert (result["query"], result["outcome"]) == ("read a file", "hit")
    assert len(result["hits"]) == 2
    assert set(result["hits"][0]) == {"name", "server", "tool", "summary", "score"}
    assert result["hits"][0]["name"] == "files__read_file"


def test_a_search_that_finds_nothing_prints_a_miss_and_exits_1(config: Path, snapshot: Path) -> None:
    code, out, _ = run(config, "tools", "search", "xylophone", "--catalog", str(snapshot), "--json")
    assert code == 1
    assert json.loads(out) == {"query": "xylophone", "outcome": "miss", "hits": []}
    code, _, err = run(config, "tools", "search", "xylophone", "--catalog", str(snapshot))
    assert code == 1 and "a miss" in err


def test_an_empty_query_is_one_error_line(config: Path, snapshot: Path) -> None:
    code, _, err = run(config, "tools", "search", " ", "--catalog", str(snapshot))
    assert code == 2
    assert err.strip() == "error: tool_search query is empty: describe the tool you need in a few words"


def test_tools_expand_json_prints_full_definitions(config: Path, snapshot: Path) -> None:
    code, out, _ = run(
        config, "tools", "expand", "time__convert_time", "convert_time", "--catalog", str(snapshot), "--json"
    )
    assert code == 0
    assert json.loads(out) == {
        "tools": [
            {
                "name": "time__convert_time",
                "description": "Convert time between timezones",
                "input_schema": TOOLS["time"][1]["inputSchema"],
            }
        ]
    }


def test_tools_expand_for_people_lists_parameters(config: Path, snapshot: Path) -> None:
    code, out, _ = run(config, "tools", "expand", "files__read_file", "--catalog", str(snapshot))
    assert code == 0
    assert "files__read_file" in out and "path (string) - Path of the file" in out


def test_tools_expand_errors_name_the_problem(config: Path, snapshot: Path) -> None:
    code, _, err = run(config, "tools", "expand", "files__read_fil", "--catalog", str(snapshot))
    assert code == 1
    assert err.strip() == "error: unknown tool 'files__read_fil'; closest: files__read_file, files__write_file"
    code, _, err = run(config, "tools", "expand", "read_file", "write_file", "run_query", "--catalog", str(snapshot))
    assert code == 2 and "the limit is 2 per call (mcp.tool_search.max_expand)" in err


def test_tools_plan_json_prints_the_plan(config: Path, snapshot: Path) -> None:
    code, out, _ = run(config, "tools", "plan", "--catalog", str(snapshot), "--json")
    assert code == 0
    plan = json.loads(out)
    assert {"mode", "full_tokens", "prompt_tokens", "directory_level", "reason", "prompt", "tools", "pinned"} <= set(
        plan
    )
    assert (plan["mode"], plan["directory_level"], plan["prompt"]) == ("full", "none", "")
    assert plan["prompt_tokens"] == plan["full_tokens"] and len(plan["tools"]) == 12


def test_tools_plan_on_the_real_catalog_is_search_mode(config: Path, shared_data: Path) -> None:
    code, out, _ = run(config, "tools", "plan", "--catalog", str(shared_data / "catalogs"))
    assert code == 0
    assert "mode: search" in out and "directory: servers" in out and "## Tools" in out


def test_a_broken_snapshot_is_one_error_line(config: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    code, _, err = run(config, "tools", "list", "--catalog", str(bad))
    assert code == 2
    assert err.startswith(f"error: {bad}: invalid JSON") and err.count("\n") == 1


def test_eval_prints_the_metrics_and_a_miss_is_a_measurement_not_a_failure(
    config: Path, snapshot: Path, tmp_path: Path
) -> None:
    queries = tmp_path / "queries.jsonl"
    lines = [
        {"id": "1", "query": "read a file", "gold": [["files", "read_file"]]},
        {"id": "2", "query": "convert timezones", "gold": [["time", "convert_time"], ["time", "get_current_time"]]},
    ]
    queries.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    code, out, _ = run(config, "eval", str(queries), "--catalog", str(snapshot), "-k", "1", "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["queries"], report["k"], report["hit_at_1"], report["hit_at_k"], report["mrr"]) == (
        2,
        1,
        1.0,
        1.0,
        1.0,
    )
    assert report["recall_at_k"] == 0.75 and report["ranking"] == "hybrid"  # the models are installed
    queries.write_text(json.dumps({"query": "xylophone", "gold": [["files", "read_file"]]}) + "\n")
    code, out, _ = run(config, "eval", str(queries), "--catalog", str(snapshot), "--ranking", "lexical")
    assert code == 0 and "hit@5" in out


def test_without_a_snapshot_the_tools_come_from_the_configured_servers(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    server = server_entry("basic.py")
    path.write_text(yaml.safe_dump({"mcp": {"cache_dir": str(tmp_path / "cache"), "servers": {"basic": server}}}))
    code, out, _ = run(path, "tools", "search", "echo", "--json")
    assert code == 0, out
    assert json.loads(out)["hits"][0]["name"] == "basic__echo"
