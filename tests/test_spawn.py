"""Spawn planning: profile filtering, pins, the task's recent tools, byte-stable plans, one telemetry event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from orchestrator import (
    AgentProfile,
    ConfigError,
    ProfileFilter,
    Settings,
    SpawnPlan,
    SpawnPlanner,
    TaskHistory,
    Telemetry,
    ToolCatalog,
)
from orchestrator._config import ToolSearchOverrides, ToolSearchSettings
from orchestrator._meta_tools import CALL_TOOL
from orchestrator._planning import fingerprint, plan_tools, task_key
from orchestrator._telemetry import SPAWNS


def plan_spawn(task: str, agent: str, *, settings: Settings, catalog: ToolCatalog, **options: Any) -> SpawnPlan:
    return SpawnPlanner(settings).plan(task, agent, catalog, **options)


def _tool(name: str, description: str = "", **properties: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {key: {"type": kind} for key, kind in properties.items()}}
    return {"name": name, "description": description or f"{name} does something useful", "inputSchema": schema}


LISTS = {
    "time": [_tool("get_current_time", "Current time in a timezone", timezone="string"), _tool("convert_time")],
    "git": [_tool("git_status", "Working tree status", repo_path="string"), _tool("git_commit"), _tool("git_reset")],
    "mirror": [_tool("get_current_time", "Current time in a timezone", timezone="string")],
}
REPLICAS = {"mirror": "time"}
"""mirror is declared a replica of time (`replica_of`), so their identical tool is one entry."""


def _settings(**agents: AgentProfile) -> Settings:
    return Settings(agents=agents)


@pytest.fixture
def catalog() -> ToolCatalog:
    return ToolCatalog.from_lists(LISTS, REPLICAS)


def test_profile_globs_choose_servers_and_tools_and_deny_wins(catalog: ToolCatalog) -> None:
    rules = ProfileFilter(servers=("git",), allow=("git__git_*",), deny=("*reset",))
    assert [entry.name for entry in rules.apply(catalog)] == ["git__git_commit", "git__git_status"]
    everything = ProfileFilter()
    assert everything.apply(catalog) is catalog


def test_a_duplicate_tool_routes_only_to_servers_the_profile_allows(catalog: ToolCatalog) -> None:
    entry = catalog.lookup("get_current_time")
    assert entry is not None and entry.servers == ("mirror", "time")
    rules = ProfileFilter(servers=("time",))
    assert rules.visible(entry) and rules.routes(entry) == ("time",)
    assert not ProfileFilter(servers=("git",)).visible(entry)


def test_full_mode_below_the_threshold_sends_every_visible_tool(catalog: ToolCatalog) -> None:
    plan = plan_spawn("read the time", "default", settings=_settings(), catalog=catalog, record=False)
    assert plan.mode == "full" and plan.prompt_tokens == plan.full_tokens and plan.tokens_saved == 0
    assert sorted(tool["name"] for tool in plan.tools) == sorted(entry.name for entry in catalog)
    assert plan.visible_tools == len(catalog) and plan.task_id == task_key("read the time")


def test_search_mode_above_a_profiles_lower_threshold_adds_call_tool(catalog: ToolCatalog) -> None:
    small = AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))
    plan = plan_spawn("read the time", "small", settings=_settings(small=small), catalog=catalog, record=False)
    names = [tool["name"] for tool in plan.tools]
    assert plan.mode == "search"
    assert {"tool_search", "expand_tools", CALL_TOOL} <= set(names)
    assert names.count(CALL_TOOL) == 1 and CALL_TOOL in plan.prompt
    assert plan.prompt_tokens < plan.full_tokens or plan.full_tokens < 200


def test_same_catalog_and_profile_give_byte_identical_plans(catalog: ToolCatalog) -> None:
    small = AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))
    settings = _settings(small=small)
    first = plan_spawn(
        "task", "small", settings=settings, catalog=ToolCatalog.from_lists(LISTS, REPLICAS), record=False
    )
    second = plan_spawn(
        "task",
        "small",
        settings=settings,
        catalog=ToolCatalog.from_lists(dict(reversed(LISTS.items())), REPLICAS),
        record=False,
    )
    assert first.fingerprint == second.fingerprint
    assert (first.prompt, json.dumps(first.tools)) == (second.prompt, json.dumps(second.tools))
    assert first.fingerprint == fingerprint(first.prompt, first.tools)
    changed = {**LISTS, "time": [_tool("get_current_time", "Now in a timezone", timezone="string")]}
    third = plan_spawn(
        "task", "small", settings=settings, catalog=ToolCatalog.from_lists(changed, REPLICAS), record=False
    )
    assert third.fingerprint != first.fingerprint


def test_profile_pins_and_the_tasks_recent_tools_are_sent_in_full(catalog: ToolCatalog) -> None:
    profile = AgentProfile(
        pinned=["git__git_status"], deny=["git__git_reset"], tool_search=ToolSearchOverrides(threshold_tokens=0)
    )
    plan = plan_spawn(
        "task",
        "coder",
        settings=_settings(coder=profile),
        catalog=catalog,
        recent_tools=["time__get_current_time", "git__git_reset", "no__such_tool"],
        record=False,
    )
    names = [tool["name"] for tool in plan.tools]
    assert names[:3] == ["tool_search", "expand_tools", CALL_TOOL]
    # time__get_current_time is now one entry with mirror's copy, named after mirror: its old name resolves.
    assert "git__git_status" in names and "mirror__get_current_time" in names
    assert "git__git_reset" not in names  # hidden by the profile: never pinned
    assert set(plan.pinned) == {"git__git_status", "mirror__get_current_time"}


def test_an_unknown_agent_profile_is_a_config_error(catalog: ToolCatalog) -> None:
    with pytest.raises(ConfigError, match="unknown agent profile 'ghost'"):
        plan_spawn("task", "ghost", settings=_settings(), catalog=catalog)


def test_each_planned_spawn_is_counted_once_by_mode(
    catalog: ToolCatalog, telemetry: Telemetry, reader: InMemoryMetricReader
) -> None:
    small = AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))
    planner = SpawnPlanner(_settings(small=small), telemetry=telemetry)
    planner.plan("a", "default", catalog)
    planner.plan("b", "small", catalog)
    planner.plan("c", "small", catalog, record=False)
    assert _spawn_counts(reader) == {"full": 1, "search": 1}


def test_tools_plan_and_a_spawn_report_the_same_tokens(catalog: ToolCatalog) -> None:
    settings = Settings(mcp={"tool_search": {"threshold_tokens": 0}})
    planner = SpawnPlanner(settings)
    spawn = planner.plan("task", "default", catalog, record=False)
    tools_plan = planner.plan_tools(catalog, settings.mcp.tool_search)
    assert spawn.prompt_tokens == tools_plan.prompt_tokens
    assert [tool["name"] for tool in spawn.tools] == [tool["name"] for tool in tools_plan.tools]


def test_task_history_keeps_recent_tools_newest_first_across_instances(tmp_path: Path) -> None:
    history = TaskHistory(tmp_path, limit=3)
    history.record("t1", ["a", "b"])
    history.record("t1", ["c", "a", "d"])
    assert TaskHistory(tmp_path, limit=3).recent("t1") == ["d", "a", "c"]
    assert TaskHistory(tmp_path).recent("other") == []
    (tmp_path / "t2.json").write_text("{not json")
    assert TaskHistory(tmp_path).recent("t2") == []


def test_a_search_mode_prompt_tells_the_agent_how_to_run_a_found_tool(catalog: ToolCatalog) -> None:
    small = AgentProfile(tool_search=ToolSearchOverrides(threshold_tokens=0))
    plan = plan_spawn("task", "small", settings=_settings(small=small), catalog=catalog, record=False)
    assert "`tool_search`" in plan.prompt and "`expand_tools`" in plan.prompt and "`call_tool`" in plan.prompt


def _spawn_counts(reader: InMemoryMetricReader) -> dict[str, int]:
    counts: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != SPAWNS:
                    continue
                for point in metric.data.data_points:
                    mode = str(point.attributes.get("mode"))
                    counts[mode] = counts.get(mode, 0) + int(point.value)
    return counts


def test_globs_written_with_configured_names_match_tools_whose_names_were_made_provider_safe() -> None:
    """Found in review: a server named `Airbnb listings` names its tools `Airbnb_listings__search-<hash>`,
    so a profile's `allow: ["Airbnb listings__*"]` or a pin written from bernstein.yaml matched nothing.
    A glob now matches a tool's qualified name or `server__tool` as configured and listed."""
    lists = {"Airbnb listings": [_tool("search"), _tool("book.stay")], "time": [_tool("get_current_time")]}
    catalog = ToolCatalog.from_lists(lists)
    names = {entry.tool: entry.name for entry in catalog}
    assert names["search"].startswith("Airbnb_listings__search-")  # hashed: the server name is not safe
    rules = ProfileFilter(allow=("Airbnb listings__*",), deny=("Airbnb listings__book.stay",))
    assert [entry.tool for entry in rules.apply(catalog)] == ["search"]
    assert rules.opens("Airbnb listings") and not rules.opens("time")
    safe = ProfileFilter(allow=("Airbnb_listings__*",))  # the provider-safe form works as before
    assert sorted(entry.tool for entry in safe.apply(catalog)) == ["book.stay", "search"]
    assert safe.opens("Airbnb listings") and not ProfileFilter(allow=("Airbnb listings__search",)).opens(
        "Airbnb listings"
    )
    pinned = ToolSearchSettings(threshold_tokens=0, pinned=["Airbnb listings__search", "time__get_current_time"])
    plan = plan_tools(catalog, pinned)
    assert plan.mode == "search" and plan.pinned == sorted([names["search"], "time__get_current_time"])
