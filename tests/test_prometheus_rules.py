"""The shipped Prometheus rules and Grafana dashboard: promtool checks, promtool unit tests, dashboard shape.

`make test` installs promtool first (scripts/install-debian-package.sh); the promtool tests skip, saying so,
only where it is absent. tests/test_prometheus_scrape.py runs the same expressions on a real Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "orchestrator-rules.yml"
RULES_TESTS = REPO / "deploy" / "prometheus" / "orchestrator-rules.test.yml"
HOURS_TESTS = REPO / "deploy" / "prometheus" / "orchestrator-rules-hours.test.yml"
"""The groups spanning hours, evaluated every 5 minutes instead of every minute (promtool's cost)."""
DASHBOARD = REPO / "deploy" / "grafana" / "orchestrator-dashboard.json"
METRICS_DOC = REPO / "docs" / "metrics.md"
PROMTOOL = shutil.which("promtool")
PROMTOOL_TIMEOUT_S = 60
# A bound, not an expectation: promtool checks or tests these files in well under a second.
DATASOURCE_UID = "${DS_PROMETHEUS}"
GRID_COLUMNS = 24
"""Grafana's dashboard grid is 24 columns wide."""

DASHBOARD_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$job": ".*", "$agent": ".*"}
"""Values for the Grafana variables the panels use, so Prometheus can run the expressions. The windows
are wide enough to cover the whole of tests/test_prometheus_scrape.py."""

_METRIC_NAME = re.compile(r"(?<![\w:])((?:mcp|orchestrator)_[a-z0-9_]+)(?![\w:])")
_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not on PATH: run `sh scripts/install-debian-package.sh prometheus prometheus promtool` (make test does)",
)


# --------------------------------------------------------------------------- helpers (also used by the scrape test)


def load_rules() -> list[dict[str, Any]]:
    """Every rule of the shipped rules file (recording and alerting), in file order."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def dashboard_panels() -> list[dict[str, Any]]:
    """The dashboard's panels that query (rows excluded)."""
    return [panel for panel in load_dashboard()["panels"] if panel["type"] != "row"]


def dashboard_expressions() -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL with the Grafana variables replaced) for every panel query."""
    found = []
    for panel in dashboard_panels():
        for target in panel["targets"]:
            found.append((panel["title"], target["refId"], substitute(target["expr"])))
    return found


def substitute(expr: str) -> str:
    """Replace Grafana's variables with DASHBOARD_VARIABLES; an unknown one is a test failure."""
    for name, value in sorted(DASHBOARD_VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def metric_names(expressions: list[str]) -> set[str]:
    """Exported metric names the expressions read (recording-rule names with colons are not counted)."""
    return {name for expr in expressions for name in _METRIC_NAME.findall(expr)}


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S, cwd=cwd, check=False
    )


def _documented_metrics() -> set[str]:
    """The Prometheus-name column of docs/metrics.md's instrument table."""
    names = set()
    for line in METRICS_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) > 3 and cells[2].startswith("`") and cells[2].endswith("`"):
            names.add(cells[2].strip("`"))
    return names


# --------------------------------------------------------------------------- the rules file


@needs_promtool
def test_rules_file_passes_promtool_check() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(load_rules())} rules found" in result.stdout


@needs_promtool
def test_rules_unit_tests_pass_in_promtool() -> None:
    result = _promtool("test", "rules", RULES_TESTS.name, HOURS_TESTS.name, cwd=RULES_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 2, result.stdout


def _unit_tests_with_a_wrong_rule(tmp_path: Path, right: str, wrong: str, tests: Path) -> str:
    """What promtool prints for `tests` run against the rules file with `right` replaced by `wrong`, after
    checking that it failed."""
    text = RULES.read_text(encoding="utf-8")
    assert right in text
    (tmp_path / RULES.name).write_text(text.replace(right, wrong))
    shutil.copy(tests, tmp_path / tests.name)
    result = _promtool("test", "rules", tests.name, cwd=tmp_path)
    assert result.returncode != 0
    return result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_fail_when_saved_tokens_lose_their_sign(tmp_path: Path) -> None:
    """The session tests can fail too: saved tokens as sent - counterfactual would alert on the wrong mode."""
    right = (
        "sum by (job, agent, mode) (increase(orchestrator_session_tokens_counterfactual_sum[1h]))\n"
        "            - sum by (job, agent, mode) (increase(orchestrator_session_tokens_sent_sum[1h]))"
    )
    swapped = (
        "sum by (job, agent, mode) (increase(orchestrator_session_tokens_sent_sum[1h]))\n"
        "            - sum by (job, agent, mode) (increase(orchestrator_session_tokens_counterfactual_sum[1h]))"
    )
    assert "OrchestratorToolModeCostsMore" in _unit_tests_with_a_wrong_rule(tmp_path, right, swapped, RULES_TESTS)


@needs_promtool
def test_promtool_unit_tests_fail_when_a_rule_is_wrong(tmp_path: Path) -> None:
    """The unit tests can fail: a miss threshold of 0.5 must not let the 40 % miss alert fire."""
    right = "job:mcp_tool_search_miss_ratio:rate15m > 0.2"
    wrong = "job:mcp_tool_search_miss_ratio:rate15m > 0.5"
    assert "OrchestratorToolSearchMissRateHigh" in _unit_tests_with_a_wrong_rule(tmp_path, right, wrong, RULES_TESTS)


@needs_promtool
def test_the_tests_spanning_hours_fail_when_their_rule_is_wrong(tmp_path: Path) -> None:
    """The hours file can fail too: a 50-point margin must not let the 90 % -> 50 % top-5 fall alert."""
    right = "job:mcp_tool_search_call_top5_ratio:rate1h < job:mcp_tool_search_call_top5_ratio:rate6h - 0.1"
    wrong = right.replace("- 0.1", "- 0.5")
    assert "OrchestratorToolSearchTop5ShareFalling" in _unit_tests_with_a_wrong_rule(
        tmp_path, right, wrong, HOURS_TESTS
    )


def test_every_alert_has_a_hold_time_a_severity_and_both_annotations() -> None:
    alerts = [rule for rule in load_rules() if "alert" in rule]
    assert {rule["alert"] for rule in alerts} == {
        "OrchestratorToolSearchMissRateHigh",
        "OrchestratorToolSearchTop5ShareFalling",
        "OrchestratorHybridRankingFallingBack",
        "OrchestratorToolCallErrorRatioHigh",
        "OrchestratorToolModeCostsMore",
        "OrchestratorServerDown",
        "OrchestratorServerRestarting",
        "OrchestratorToolsHeldBack",
    }
    for rule in alerts:
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"].strip(), rule["alert"]


def test_every_rule_is_exercised_by_the_unit_tests() -> None:
    tests = [
        test
        for path in (RULES_TESTS, HOURS_TESTS)
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]
    ]
    checked_exprs = " ".join(case["expr"] for test in tests for case in test.get("promql_expr_test", []))
    checked_alerts = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case["exp_alerts"]}
    for rule in load_rules():
        if "record" in rule:
            assert rule["record"] in checked_exprs, f"no promql_expr_test reads {rule['record']}"
        else:
            assert rule["alert"] in checked_alerts & fired, f"no alert_rule_test sees {rule['alert']} fire"


# --------------------------------------------------------------------------- the dashboard


def test_dashboard_takes_its_datasource_as_an_import_input() -> None:
    dashboard = load_dashboard()
    assert [item["name"] for item in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["uid"] and dashboard["id"] is None
    for panel in dashboard_panels():
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        assert all(target["datasource"]["uid"] == DATASOURCE_UID for target in panel["targets"]), panel["title"]
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"]["uid"] == DATASOURCE_UID, variable["name"]


def test_dashboard_panels_have_unique_ids_queries_and_fit_the_grid_without_overlapping() -> None:
    panels = load_dashboard()["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        for row in range(grid["y"], grid["y"] + grid["h"]):
            for column in range(grid["x"], grid["x"] + grid["w"]):
                assert (row, column) not in cells, f"{panel['title']!r} overlaps {cells[(row, column)]!r}"
                cells[(row, column)] = panel["title"]
        if panel["type"] != "row":
            refs = [target["refId"] for target in panel["targets"]]
            assert refs and len(set(refs)) == len(refs), panel["title"]
            assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


@needs_promtool
def test_every_dashboard_expression_parses_in_promtool(tmp_path: Path) -> None:
    """Each panel query becomes a recording rule, so `promtool check rules` parses it (no server needed)."""
    expressions = dashboard_expressions()
    rules = [{"record": f"dashboard:panel_{index}", "expr": expr} for index, (_, _, expr) in enumerate(expressions)]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", str(path))
    output = result.stdout + result.stderr
    failing = [
        f"{title} {ref}" for index, (title, ref, _) in enumerate(expressions) if f'"dashboard:panel_{index}"' in output
    ]
    assert result.returncode == 0, f"panels {failing}: {output}"
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


@needs_promtool
def test_promtool_rejects_a_malformed_panel_expression(tmp_path: Path) -> None:
    """The parse check above can fail: an unbalanced expression is refused."""
    path = tmp_path / "bad.yml"
    bad = "sum(rate(mcp_tool_calls_total[5m])"
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [{"record": "x:y", "expr": bad}]}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode != 0 and "unclosed" in (result.stdout + result.stderr).lower()


def test_dashboard_and_rules_read_only_documented_metrics() -> None:
    expressions = [expr for _, _, expr in dashboard_expressions()] + [rule["expr"] for rule in load_rules()]
    used = {_HISTOGRAM_SUFFIX.sub("", name) for name in metric_names(expressions)}
    documented = _documented_metrics()
    assert "mcp_tool_search_invocations_total" in documented  # the table was found
    # A histogram is documented under its base name (`..._seconds`, `orchestrator_spawn_tokens_sent`).
    assert used - documented == set()
