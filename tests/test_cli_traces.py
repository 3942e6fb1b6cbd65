"""`orchestrator traces stats|export|import|clear`, `orchestrator eval --traces` and tune's search quality,
through typer's CliRunner, end to end over a store in a temporary cache folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator import Settings
from orchestrator._cli import app
from orchestrator._cli.tune import MIN_SEARCHED_CALLS, search_quality

runner = CliRunner()

LINES = [
    {"query": "do I need an umbrella in Porto", "server": "weather", "tool": "forecast", "spawn": "a", "ok": True},
    {
        "query": "umbrella tomorrow? my api_key: sk-live-123",
        "server": "weather",
        "tool": "forecast",
        "spawn": "b",
        "ok": True,
        "at": "2026-11-30T10:00:00Z",
        "rank": 2,
    },
    {"query": "umbrella in Faro", "server": "weather", "tool": "forecast", "spawn": "c", "ok": False},
]
CATALOG = {
    "weather": [
        {"name": "forecast", "description": "Weather forecast for a city.", "inputSchema": {"type": "object"}},
        {"name": "alerts", "description": "Severe weather alerts for a region.", "inputSchema": {"type": "object"}},
    ],
    "ledger": [{"name": "post_entry", "description": "Post a journal entry.", "inputSchema": {"type": "object"}}],
}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "bernstein.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"cache_dir": str(tmp_path / "cache")}}), encoding="utf-8")
    return path


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_import_stats_export_and_clear_round_trip_with_secrets_redacted(config: Path, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", LINES)
    imported = runner.invoke(app, ["--config", str(config), "traces", "import", str(source)])
    assert imported.exit_code == 0, imported.output
    assert "imported 2 traces" in imported.output and "1 failed calls skipped" in imported.output
    stats = runner.invoke(app, ["--config", str(config), "traces", "stats", "--json"])
    assert stats.exit_code == 0, stats.output
    payload = json.loads(stats.output)
    assert (payload["traces"], payload["tools"], payload["tools_with_evidence"], payload["spawns"]) == (2, 1, 1, 2)
    assert payload["found_at"] == {"2": 1, "not_found": 1} and payload["found_in_top_5"] == 0.5
    exported = runner.invoke(app, ["--config", str(config), "traces", "export"])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines()]
    assert [line["spawn"] for line in lines] == ["b", "a"]  # oldest first
    assert lines[0]["query"] == "umbrella tomorrow? my api_key: ***" and lines[0]["at"] == "2026-11-30T10:00:00Z"
    assert "sk-live" not in "".join(path.read_text() for path in (tmp_path / "cache").rglob("*.json"))
    cleared = runner.invoke(app, ["--config", str(config), "traces", "clear", "--yes"])
    assert cleared.exit_code == 0 and "deleted 2 traces" in cleared.output
    assert json.loads(runner.invoke(app, ["--config", str(config), "traces", "stats", "--json"]).output)["traces"] == 0


def test_request_text_with_line_separators_and_controls_round_trips_as_ascii(config: Path, tmp_path: Path) -> None:
    """Found by red-teaming: export wrote an agent's request text raw (a U+2028 in it, a C1 CSI, an RLO), and
    import split lines at U+2028 too, so one stored query made the whole file fail to import."""
    query = "umbrella\u2028in Porto \u009b31m \u202egnirts"
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({**LINES[0], "query": query}, ensure_ascii=False) + "\n", encoding="utf-8")
    imported = runner.invoke(app, ["--config", str(config), "traces", "import", str(source)])
    assert imported.exit_code == 0, imported.output
    exported = runner.invoke(app, ["--config", str(config), "traces", "export"])
    assert exported.exit_code == 0 and exported.output.isascii()
    assert [json.loads(line)["query"] for line in exported.output.splitlines()] == [query]


def test_a_bad_import_line_is_one_error_naming_the_line(config: Path, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [LINES[0], {"query": "q", "server": "s", "tool": "t"}])
    result = runner.invoke(app, ["--config", str(config), "traces", "import", str(source)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {source}: line 2: 'spawn' must be a non-empty string"


def test_clear_asks_first(config: Path, tmp_path: Path) -> None:
    runner.invoke(app, ["--config", str(config), "traces", "import", str(write_lines(tmp_path / "in.jsonl", LINES))])
    refused = runner.invoke(app, ["--config", str(config), "traces", "clear"], input="n\n")
    assert refused.exit_code == 1
    assert json.loads(runner.invoke(app, ["--config", str(config), "traces", "stats", "--json"]).output)["traces"] == 2


def test_eval_with_traces_applies_them_in_a_temporary_store(config: Path, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG), encoding="utf-8")
    queries = write_lines(
        tmp_path / "queries.jsonl",
        [{"id": "1", "query": "umbrella needed in Lisbon?", "gold": [["weather", "forecast"]]}],
    )
    traces = write_lines(tmp_path / "traces.jsonl", LINES)
    common = ["--config", str(config), "eval", str(queries), "--catalog", str(catalog), "--ranking", "lexical"]
    without = runner.invoke(app, [*common, "--json"])
    assert without.exit_code == 0 and json.loads(without.output)["hit_at_k"] == 0.0  # no word in common
    learned = runner.invoke(app, [*common, "--traces", str(traces), "--json"])
    assert learned.exit_code == 0, learned.output
    assert json.loads(learned.output)["hit_at_1"] == 1.0
    assert not (tmp_path / "cache" / "traces").exists()  # the configured store was never written


def test_search_quality_says_what_to_change() -> None:
    settings = Settings()
    few = search_quality({"1": 3, "not_found": 1}, settings, source="test")
    assert few.found_in_top_5 == 0.75 and "need at least" in few.advice
    poor = search_quality({"1": 10, "7": 0, "not_found": 20, "unsearched": 50}, settings, source="test")
    assert poor.searched_calls == 30 and poor.found_first == pytest.approx(1 / 3)
    assert "learning from use is on" in poor.advice and "pin the tools" in poor.advice
    deep = search_quality({"1": 10, "4": 7, "6-10": 3}, Settings(mcp={"tool_search": {"search_limit": 8}}), source="t")
    assert deep.found_in_top_5 == 0.85 and "search_limit from 8 to 10" in deep.advice
    good = search_quality({"1": MIN_SEARCHED_CALLS}, settings, source="test")
    assert good.advice.startswith("search finds what agents call: 100%")
