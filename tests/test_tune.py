"""`orchestrator tune` and `orchestrator tools plan --sweep` through typer's CliRunner, end to end.

The spawn logs here are written the way the gateway writes them (`SpawnLog` over `SpawnRecord`s whose
bases come from the planner over the same catalog snapshot tune reads), with scripted sessions of two
habits: `steady` agents find a tool once and call it many rounds; `flailing` agents search twice and
expand once per tool, one round each, and call each tool once. tests/test_accounting.py covers the
gateway writing such lines from real MCP sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator import (
    Action,
    Batches,
    ProfileFilter,
    SessionBasis,
    Settings,
    SpawnLog,
    SpawnPlanner,
    SpawnRecord,
    ToolCatalog,
)
from orchestrator._accounting import break_even, session_cost
from orchestrator._cli import app
from orchestrator._cli.tune import MIN_SESSIONS, THRESHOLD_STEP
from orchestrator._planning import effective_tool_search
from orchestrator._spawnlog import FileSpawnLogStore

BIG_TOOLS = 60
"""A catalog of about 6.5k tokens: each habit's break-even falls on its own side of its size."""
DIRECTORY_BUDGET = 3000
"""Room for a one-line-per-tool directory of the 60 tools: search mode then sends about a third of the
catalog each round, as with real catalogs of this size."""
RESULT_TOKENS = 300
PINNED_BY_HABIT = "big__tool_00"
"""The tool every steady session finds first."""


def big_snapshot(path: Path) -> Path:
    tools = [
        {
            "name": f"tool_{index:02d}",
            "description": f"Tool number {index} of the big server: looks up records of kind {index} by key, "
            "filters them by owner and state, and returns the matching entries with their history.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "The record key to look up"},
                    "owner": {"type": "string", "description": "Only records of this owner"},
                    "state": {"type": "string", "enum": ["open", "closed", "any"], "description": "Record state"},
                },
                "required": ["key"],
            },
        }
        for index in range(BIG_TOOLS)
    ]
    path.write_text(json.dumps({"big": tools}), encoding="utf-8")
    return path


def write_config(folder: Path, spawn_log: Path | None = None) -> Path:
    config: dict[str, Any] = {
        "mcp": {
            "cache_dir": str(folder / "cache"),
            "tool_search": {"threshold_tokens": 6000, "directory_budget_tokens": DIRECTORY_BUDGET},
        },
        "agents": {"steady": {}, "flailing": {}},
    }
    if spawn_log is not None:
        config["gateway"] = {"spawn_log": str(spawn_log)}
    path = folder / "bernstein.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), *args])
    return result.exit_code, result.stdout, result.stderr


def bases(config: Path, snapshot: Path) -> dict[str, dict[str, Any]]:
    """Per profile: its per-round costs in each mode and each tool's schema tokens, as the gateway plans."""
    settings = Settings(config)
    catalog = ToolCatalog.from_snapshot(snapshot)
    planner = SpawnPlanner(settings)
    found = {}
    for agent in ("steady", "flailing"):
        profile = settings.agent(agent)
        visible = ProfileFilter.from_profile(profile).apply(catalog)
        search_settings = effective_tool_search(settings.mcp.tool_search, profile)
        searched = planner.plan_tools(visible, search_settings.model_copy(update={"threshold_tokens": 0}))
        counter = planner.counter(search_settings.tokenizer)
        found[agent] = {
            "full": searched.full_tokens,
            "search": searched.prompt_tokens,
            "schemas": {entry.name: counter.entry(entry) for entry in visible},
        }
    return found


def steady(schemas: dict[str, int], mode: str, index: int) -> Batches:
    """Find tool_00 (and one more) once, then call them for eight rounds."""
    other = f"big__tool_{10 + index:02d}"
    calls = [((PINNED_BY_HABIT, schemas[PINNED_BY_HABIT]),), ((other, schemas[other]),)]
    rounds: list[tuple[Action, ...]] = []
    if mode == "search":
        rounds.append(tuple(Action("search", result_tokens=RESULT_TOKENS, hits=5) for _ in calls))
        rounds.append((Action("expand", tools=tuple(tool for call in calls for tool in call)),))
    rounds.extend((Action("call", result_tokens=20, tools=calls[step % 2]),) for step in range(8))
    return tuple(rounds)


def flailing(schemas: dict[str, int], mode: str, index: int) -> Batches:
    """Three tools, each found with a miss, a hit and an expand of its own, each called once."""
    rounds: list[tuple[Action, ...]] = []
    for offset in range(3):
        name = f"big__tool_{20 + 3 * index + offset:02d}"
        tool = ((name, schemas[name]),)
        if mode == "search":
            rounds.append((Action("search", result_tokens=40, hits=0),))
            rounds.append((Action("search", result_tokens=RESULT_TOKENS, hits=5),))
            rounds.append((Action("expand", tools=tool),))
        rounds.append((Action("call", result_tokens=20, tools=tool),))
    return tuple(rounds)


def record(agent: str, index: int, basis: SessionBasis, batches: Batches) -> SpawnRecord:
    return SpawnRecord(
        id=f"{agent}-{index}",
        agent=agent,
        task_id=f"task-{index}",
        mode=basis.mode,
        ended="closed",
        opened_at=1_000.0 + index,
        duration_s=3.0,
        catalog_version="v",
        threshold_tokens=6000,
        basis=basis,
        batches=batches,
        session=session_cost(basis, batches).to_dict(),
    )


def write_log(path: Path, records: list[SpawnRecord]) -> None:
    log = SpawnLog(FileSpawnLogStore(path))
    for item in records:
        log.append(item)
    log.close()


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path, list[SpawnRecord]]:
    """A config whose spawn log holds 6 sessions of each habit, half in each mode; the catalog snapshot."""
    log = tmp_path / "spawns.jsonl"
    config = write_config(tmp_path, log)
    snapshot = big_snapshot(tmp_path / "catalog.json")
    plans = bases(config, snapshot)
    records = []
    for agent, script in (("steady", steady), ("flailing", flailing)):
        plan = plans[agent]
        for index in range(6):
            mode = "search" if index % 2 else "full"
            basis = SessionBasis(mode, plan["full"], plan["search"])
            records.append(record(agent, index, basis, script(plan["schemas"], mode, index)))
    write_log(log, records)
    return config, snapshot, records


def test_tune_finds_each_habits_break_even_and_recommends_its_threshold_and_pins(
    recorded: tuple[Path, Path, list[SpawnRecord]],
) -> None:
    config, snapshot, records = recorded
    code, out, _ = run(config, "tune", "--catalog", str(snapshot), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["sessions"] == 12 and report["message"] is None
    agents = {item["agent"]: item for item in report["agents"]}
    catalog_tokens = agents["steady"]["catalog_tokens"]
    assert catalog_tokens == records[0].basis.full_tokens and agents["steady"]["mode_now"] == "search"
    for agent, item in agents.items():
        mine = [r for r in records if r.agent == agent]
        searched = [a.result_tokens for r in mine for batch in r.batches for a in batch if a.searched]
        costs = [
            session_cost(r.basis, r.batches, search_result_tokens=round(sum(searched) / len(searched))) for r in mine
        ]
        expected = break_even(costs)
        assert expected is not None and item["break_even"] == pytest.approx(expected)
        assert item["recommended_threshold"] == round(expected / THRESHOLD_STEP) * THRESHOLD_STEP
        assert {mode: figures["sessions"] for mode, figures in item["by_mode"].items()} == {"full": 3, "search": 3}
        assert f"equal at a catalog of {expected:,.0f} tokens" in item["threshold_reason"]
    # Steady agents call for many rounds: full mode would pay the catalog each time, so search mode stays.
    steady_, flailing_ = agents["steady"], agents["flailing"]
    assert steady_["recommended_threshold"] < catalog_tokens and steady_["mode_recommended"] == "search"
    # Flailing agents spend most rounds finding tools: full mode is cheaper for them at this catalog.
    assert flailing_["recommended_threshold"] >= catalog_tokens and flailing_["mode_recommended"] == "full"
    assert flailing_["by_mode"]["search"]["misses"] == 3 and flailing_["by_mode"]["search"]["expands"] == 3
    # Pins: tool_00 is needed by every steady session and its schema is small; flailing agents share none.
    [pin] = [pin for pin in steady_["pins"] if pin["recommended"]]
    assert (pin["tool"], pin["sessions"], pin["share"]) == (PINNED_BY_HABIT, 6, 1.0)
    assert pin["saving_per_session"] > pin["cost_per_session"] and "needed in 6 of 6 sessions" in pin["reason"]
    assert flailing_["pins"] == []


def test_tune_for_people_prints_figures_recommendations_and_reasons(
    recorded: tuple[Path, Path, list[SpawnRecord]],
) -> None:
    config, snapshot, _ = recorded
    code, out, _ = run(config, "tune", "--catalog", str(snapshot), "--agent", "steady")
    assert code == 0
    assert "agent steady: 6 sessions (3 full, 3 search)" in out and "agent flailing" not in out
    assert "rounds / session" in out and "tokens / session (measured)" in out
    assert "recommended threshold_tokens: " in out and "(agents.steady.tool_search.threshold_tokens)" in out
    assert f"recommended pins: {PINNED_BY_HABIT}" in out


def test_too_few_sessions_is_a_clear_message_and_exit_zero(tmp_path: Path) -> None:
    log = tmp_path / "spawns.jsonl"
    config = write_config(tmp_path, log)
    snapshot = big_snapshot(tmp_path / "catalog.json")
    code, out, _ = run(config, "tune", "--catalog", str(snapshot))
    assert code == 0 and "too little data: no finished spawns in" in out  # no log file yet
    plan = bases(config, snapshot)["steady"]
    basis = SessionBasis("search", plan["full"], plan["search"])
    few = [
        record("steady", index, basis, steady(plan["schemas"], "search", index)) for index in range(MIN_SESSIONS - 1)
    ]
    write_log(log, few)
    with log.open("a", encoding="utf-8") as file:
        file.write("{broken\n")
    code, out, _ = run(config, "tune", "--catalog", str(snapshot), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["message"].startswith(f"too little data: {MIN_SESSIONS - 1} finished spawns")
    [steady_] = report["agents"]
    assert steady_["recommended_threshold"] is None and steady_["message"].startswith(f"{MIN_SESSIONS - 1} sessions")
    assert steady_["by_mode"]["search"]["sessions"] == MIN_SESSIONS - 1  # the figures are still there
    assert report["skipped_lines"] == 1 and report["first_problem"].startswith(f"{log}:{MIN_SESSIONS}: ")


def test_tune_without_a_spawn_log_says_which_setting_is_missing(tmp_path: Path) -> None:
    code, _, err = run(write_config(tmp_path), "tune")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: gateway.spawn_log: not set, so there are no recorded sessions to read; set it (and run spawns), "
        "or pass --spawn-log PATH or --prometheus URL"
    ]


def test_tune_from_a_prometheus_that_is_not_there_fails_in_one_line(tmp_path: Path) -> None:
    code, _, err = run(write_config(tmp_path), "tune", "--prometheus", "http://127.0.0.1:9")
    assert (
        code == 1 and err.startswith("error: prometheus http://127.0.0.1:9: cannot query it") and err.count("\n") == 1
    )


def test_the_sweep_shows_each_profiles_mode_and_tokens_at_each_threshold(tmp_path: Path) -> None:
    config = tmp_path / "bernstein.yaml"
    config.write_text(
        yaml.safe_dump(
            {"mcp": {"cache_dir": str(tmp_path / "cache")}, "agents": {"narrow": {"allow": ["big__tool_0*"]}}}
        )
    )
    snapshot = big_snapshot(tmp_path / "catalog.json")
    code, out, _ = run(
        config, "tools", "plan", "--catalog", str(snapshot), "--sweep", "--thresholds", "0,2000,100000", "--json"
    )
    assert code == 0
    sweep = json.loads(out)
    assert sweep["thresholds"] == [0, 2000, 100_000] and list(sweep["agents"]) == ["default", "narrow"]
    default, narrow = sweep["agents"]["default"], sweep["agents"]["narrow"]
    assert (default["tools"], narrow["tools"]) == (BIG_TOOLS, 10)
    assert [row["mode"] for row in default["sweep"]] == ["search", "search", "full"]
    assert [row["mode"] for row in narrow["sweep"]] == ["search", "full", "full"]  # 10 tools fit under 2,000
    assert default["sweep"][2]["tokens"] == default["full_tokens"] > default["sweep"][0]["tokens"]
    assert narrow["sweep"][1]["tokens"] == narrow["full_tokens"] <= 2000
    code, out, _ = run(config, "tools", "plan", "--catalog", str(snapshot), "--sweep")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["threshold_tokens", "default", "narrow"]
    assert any(line.startswith("6,000") and "(now)" in line for line in lines)
    assert f"default: {BIG_TOOLS} tools, {default['full_tokens']:,} tokens in full" in out


def test_sweep_thresholds_must_be_whole_numbers(tmp_path: Path) -> None:
    snapshot = big_snapshot(tmp_path / "catalog.json")
    code, _, err = run(
        write_config(tmp_path), "tools", "plan", "--catalog", str(snapshot), "--sweep", "--thresholds", "100,ten"
    )
    assert code == 2 and "'ten' is not a whole number of tokens >= 0" in err


@pytest.mark.parametrize(
    "bad",
    [
        {"batches": [[1]]},  # an action that is not an object
        {"threshold_tokens": 1e999},  # JSON's 1e999 is infinity
        {"batches": [[{"kind": "search", "result_tokens": 10**400, "hits": 3}]]},
        {"basis": {"mode": "search", "full_tokens": 10**400, "search_tokens": 1, "pinned": []}},
        "deep",
        "latin-1",
    ],
)
def test_one_bad_spawn_log_line_is_skipped_and_counted_not_fatal(
    recorded: tuple[Path, Path, list[SpawnRecord]], bad: Any
) -> None:
    """Found by red-teaming: each of these lines, written by another process, ended `tune` in a traceback
    (or, for one byte of bad UTF-8, refused the whole log), losing every good session."""
    config, snapshot, records = recorded
    log = config.parent / "spawns.jsonl"
    if bad == "deep":
        line = b'{"v": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    elif bad == "latin-1":
        line = b'{"junk": "\xff"}'
    else:
        line = json.dumps({**records[0].to_json(), **bad}).encode()
    with log.open("ab") as file:
        file.write(line + b"\n")
    code, out, err = run(config, "tune", "--catalog", str(snapshot))
    assert code == 0 and "Traceback" not in err, err
    assert f"({len(records)} finished sessions); 1 unreadable line skipped" in out


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (b"[1, 2]", "not a Prometheus API answer"),
        (b'{"status": "success", "data": {}}', "the answer has no data.result list"),
        (b'{"status": "success", "data": {"result": [{"metric": {}, "value": [0, "NaN"]}]}}', "is not finite"),
        (b'{"status": "success", "data": {"result": [{"metric": {}, "value": [0, "abc"]}]}}', "is not a number"),
    ],
)
def test_tune_from_a_peer_that_is_not_prometheus_fails_in_one_line(
    tmp_path: Path, scripted_peer: Any, answer: bytes, problem: str
) -> None:
    """Found by red-teaming: answers of another shape, or NaN and infinite values, ended `tune` in a
    traceback."""
    scripted_peer.answer = answer
    code, _, err = run(write_config(tmp_path), "tune", "--prometheus", f"http://127.0.0.1:{scripted_peer.server_port}")
    assert code == 1 and err.count("\n") == 1 and problem in err and "Traceback" not in err, err


def test_names_from_a_spawn_log_cannot_drive_the_terminal(recorded: tuple[Path, Path, list[SpawnRecord]]) -> None:
    config, snapshot, records = recorded
    hostile = "steady\x1b[2J\x1b]0;owned\x07\u202e"
    with (config.parent / "spawns.jsonl").open("a", encoding="utf-8") as file:
        for item in records[:6]:
            file.write(json.dumps({**item.to_json(), "agent": hostile}) + "\n")
    code, out, _ = run(config, "tune", "--catalog", str(snapshot))
    assert code == 0 and "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "steady\\u001b[2J\\u001b]0;owned\\u0007\\u202e" in out
