"""Tokens sent: the full catalog against search mode, per spawn and over a 25-round session.

    .venv/bin/python benchmarks/tokens.py

Catalog: ../shared/data/catalogs (29 real servers, 590 tools), then growing subsets of its servers in name
order. Tokens are cl100k_base counts of exactly what is sent (the rule in
src/orchestrator/_tokens.py: each definition as compact JSON `{name, description,
input_schema}`, summed; the prompt section as text), with the default `mcp.tool_search` settings.

- per spawn: the baseline sends every definition (`full_tokens`); search mode sends the header, the
  directory, the three meta-tool definitions and any pinned tools (`prompt_tokens`, exactly what
  `orchestrator spawn --dry-run` reports: the benchmark plans through the same `SpawnPlanner`). Subsets under
  `threshold_tokens` are planned in full mode, as the project would.
- session: a model request every round for 25 rounds. The baseline re-sends the catalog each round. Search
  mode re-sends its plan each round, and everything search mode adds to the conversation stays in it for
  every later round: five `tool_search` calls (rounds 1, 6, 11, 16, 21) and an `expand_tools` of the top
  two hits of each, each call as compact JSON and its result as the text `MetaTools` returns (what the
  gateway sends). Work shared by both modes (the task, the
  tool calls' own results) is left out of both.

Target: search mode sends at most 2% of the full catalog's tokens at 590 tools, per spawn and per session.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from _common import CATALOGS, add_results_flag, report_targets, run_recorded, table
from orchestrator import MetaTools, Settings, SpawnPlan, SpawnPlanner, ToolCatalog, ToolSearchEngine, ToolSearchSettings
from orchestrator._tokens import compact_json, count_tokens
from orchestrator.protocols.mcp._catalog import read_snapshot

ROUNDS = 25
SEARCH_ROUNDS = (1, 6, 11, 16, 21)
SESSION_QUERIES = (
    "create an issue in a GitHub repository",
    "read the contents of a file",
    "run a SQL query on the database",
    "take a screenshot of the web page",
    "list the pods in a Kubernetes namespace",
)
EXPAND_PER_SEARCH = 2
TARGET_SHARE = 0.02


def spawn_plan(catalog: ToolCatalog, settings: ToolSearchSettings) -> SpawnPlan:
    """What `orchestrator spawn --dry-run` sends the default agent: the same planner, the same tokens."""
    return SpawnPlanner(Settings(mcp={"tool_search": settings})).plan("benchmark", "default", catalog, record=False)


def session(catalog: ToolCatalog, settings: ToolSearchSettings) -> tuple[int, int]:
    """(baseline, project) tokens over ROUNDS rounds, as the module docstring describes."""
    plan = spawn_plan(catalog, settings)
    if plan.mode == "full":
        return plan.full_tokens * ROUNDS, plan.prompt_tokens * ROUNDS
    meta = MetaTools(ToolSearchEngine(catalog, settings, ranking="lexical"))
    carried = 0  # tokens added to the conversation so far by search mode
    total = 0
    queries = iter(SESSION_QUERIES)

    def sent(call: dict[str, Any], result: CallToolResult) -> int:
        """The call as the model writes it, and the result's text as the gateway sends it."""
        text = "".join(block.text for block in result.content if isinstance(block, TextContent))
        return count_tokens(compact_json(call), settings.tokenizer) + count_tokens(text, settings.tokenizer)

    for round_number in range(1, ROUNDS + 1):
        if round_number in SEARCH_ROUNDS:
            query = next(queries)
            found = meta.tool_search(query)
            carried += sent({"name": "tool_search", "arguments": {"query": query}}, found)
            hits = (found.structured_content or {}).get("hits", [])
            names = [hit["name"] for hit in hits[:EXPAND_PER_SEARCH]]
            if names:
                carried += sent({"name": "expand_tools", "arguments": {"names": names}}, meta.expand_tools(names))
        total += plan.prompt_tokens + carried
    return plan.full_tokens * ROUNDS, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_results_flag(parser)
    parser.parse_args()
    settings = ToolSearchSettings()
    lists = read_snapshot(CATALOGS)
    servers = sorted(lists)
    rows = []
    checks: list[tuple[str, bool]] = []
    for count in (1, 2, 4, 8, 16, len(servers)):
        catalog = ToolCatalog.from_lists({server: lists[server] for server in servers[:count]})
        plan = spawn_plan(catalog, settings)
        full_session, project_session = session(catalog, settings)
        rows.append(
            [
                count,
                len(catalog),
                f"{plan.full_tokens:,}",
                plan.mode,
                plan.directory_level,
                f"{plan.prompt_tokens:,}",
                f"{plan.prompt_tokens / plan.full_tokens:.2%}",
                f"{full_session:,}",
                f"{project_session:,}",
                f"{project_session / full_session:.2%}",
            ]
        )
        if count == len(servers):
            per_spawn = plan.prompt_tokens / plan.full_tokens
            per_session = project_session / full_session
            checks = [
                (
                    f"per spawn at {len(catalog)} tools: {per_spawn:.2%} of the full catalog (<= 2%)",
                    per_spawn <= TARGET_SHARE,
                ),
                (f"25-round session at {len(catalog)} tools: {per_session:.2%} (<= 2%)", per_session <= TARGET_SHARE),
            ]
            final = plan
    print(
        f"settings: threshold_tokens {settings.threshold_tokens:,}, directory_budget_tokens "
        f"{settings.directory_budget_tokens:,}, tokenizer {settings.tokenizer}\n"
    )
    table(
        [
            "servers",
            "tools",
            "full/spawn",
            "mode",
            "directory",
            "sent/spawn",
            "share",
            "full/session",
            "sent/session",
            "share",
        ],
        rows,
    )
    print(f"\nreason at 590 tools: {final.reason}")
    print(f"search-mode tools sent: {json.dumps([tool['name'] for tool in final.tools])}")
    return report_targets(checks)


if __name__ == "__main__":
    raise SystemExit(run_recorded(main))
