"""Claude Code and Codex, spawned through `orchestrator spawn`, against a scripted model endpoint (issue 15).

No model API is reachable here, so tests/interop/model_endpoint.py plays the model on 127.0.0.1: it answers
the CLI's turns with scripted tool calls (tool_search, then expand_tools, then call_tool of `basic__add`; or
the tool directly in full mode) and records every request. The CLIs are the pinned npm packages of
tests/interop (Claude Code's and Codex's native binaries), launched the documented way: the agent profiles
are read from docs/spawning.md as written (so its recipes are tested), opened on a running gateway (the warm
path). Each CLI gets a dummy API key and
its model endpoint pointed at the scripted one (`ANTHROPIC_BASE_URL`; a Codex model provider with
`base_url`), its own HOME, and nothing beyond 127.0.0.1.

What the model received on its first turn (tool names, count, token estimate) is printed by each test as one
`received: {...}` line (`pytest -rP` shows it). Provider limits are checked on what the CLIs send and on
the request fragments of `spawn --dry-run --format anthropic|openai` over every real catalog.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator import ToolCatalog, render_tools
from orchestrator._cli import app
from orchestrator._tokens import compact_json, count_tokens

from .conftest import server_entry
from .interop.harness import (
    NODE_BIN,
    ORCHESTRATOR,
    Gateway,
    free_port,
    require_node_packages,
    running_gateway,
    write_config,
)
from .interop.model_endpoint import PROVIDER_NAME_PATTERN, ScriptedModel, Step, flat_name, offered

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SPAWNING_DOC = REPO / "docs" / "spawning.md"


def servers() -> dict[str, dict[str, object]]:
    """The upstream servers (built when a test needs them, so collecting the tests starts no zygote)."""
    return {"basic": server_entry("basic.py"), "features": server_entry("features.py")}


CATALOG_TOOLS = 11
"""basic.py's 5 tools and features.py's 6."""
META_TOOLS = {"tool_search", "expand_tools", "call_tool"}
A, B, SUM = 40000, 2026, "42026"
"""`basic__add(A, B)`: the sum can only be in a tool result if the call reached the upstream server."""
SEARCH_SCRIPT = [
    Step("tool_search", {"query": "add two integers"}),
    Step("expand_tools", {"names": ["basic__add"]}),
    Step("call_tool", {"name": "basic__add", "arguments": {"a": A, "b": B}}),
]
FULL_SCRIPT = [Step("basic__add", {"a": A, "b": B})]
TASK = f"Add {A} and {B} with the tools."
CLAUDE_PREFIX = "mcp__orchestrator__"
CODEX_NAMESPACE = "mcp__orchestrator"
OPENAI_TOOL_LIMIT = 128
"""Most tools one OpenAI request may carry."""
SPAWN_TIMEOUT_S = 100
# A bound on `orchestrator spawn` with its agent: Claude Code's run takes about 2 s here, Codex's about 1 s.
TOKENIZER = "cl100k_base"

FULL = {"tool_search": {"threshold_tokens": 1_000_000}}


def _documented_profile(heading: str) -> dict[str, Any]:
    """The agent profile in the first YAML block under `### <heading>` of docs/spawning.md, as written."""
    text = SPAWNING_DOC.read_text(encoding="utf-8")
    section = text.split(f"\n### {heading}\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None, f"docs/spawning.md: no yaml block under ### {heading}"
    agents = yaml.safe_load(block.group(1))["agents"]
    profile: dict[str, Any] = next(iter(agents.values()))
    return profile


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def node() -> None:
    require_node_packages()
    for cli in ("claude", "codex"):
        done = subprocess.run([str(NODE_BIN / cli), "--version"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{cli} --version failed: {done.stderr.strip()[-500:]}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spawns' working directory (a git repository, as Codex wants one) and their HOME."""
    path = tmp_path_factory.mktemp("agents")
    subprocess.run(["git", "init", "-q", str(path / "work")], check=True, timeout=30)
    (path / "home" / "codex").mkdir(parents=True)
    return path


@pytest.fixture(scope="module")
def config(folder: Path) -> Path:
    timeout = {"timeout_s": 90}
    claude = _documented_profile("Claude Code")
    # Claude Code started by a wrapper script: nothing in the profile says which client it is.
    wrapper = folder / "run-agent.sh"
    wrapper.write_text('#!/bin/sh\nexec claude "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    agents = {
        "claude": {**claude, **timeout},
        "claude-full": {**claude, **FULL, **timeout},
        "claude-wrapped-full": {**claude, "command": [str(wrapper), *claude["command"][1:]], **FULL, **timeout},
        "codex": {**_documented_profile("Codex"), **timeout},
        "full": FULL,
        "codex-full": {"client": "codex", **FULL},
    }
    return write_config(folder / "bernstein.yaml", servers(), agents, gateway={"port": free_port()})


@pytest.fixture(scope="module")
def gateway(node: None, config: Path) -> Iterator[Gateway]:
    """The gateway the spawns find at gateway.port (warm path: they reuse its server connections)."""
    with running_gateway(config) as running:
        yield running


Spawn = Callable[[str, ScriptedModel], dict[str, Any]]


@pytest.fixture
def spawn(gateway: Gateway, config: Path, folder: Path) -> Spawn:
    """`orchestrator spawn --agent NAME` with the CLIs on PATH and their model endpoint at `model`."""

    def run(agent: str, model: ScriptedModel) -> dict[str, Any]:
        home = folder / "home"
        codex_home = home / "codex"
        (codex_home / "config.toml").write_text(_codex_config(model.url), encoding="utf-8")
        env = {
            **os.environ,
            "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted",  # any key: the scripted endpoint checks none
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CODEX_HOME": str(codex_home),
            "SCRIPTED_API_KEY": "scripted",
        }
        env.pop("ENABLE_TOOL_SEARCH", None)  # only a profile decides it
        # Its own task id per profile: a task's later spawns get the tools it called pinned, which would change
        # what the next test's model receives.
        argv = [ORCHESTRATOR, "--config", str(config), "spawn", "--task", TASK, "--task-id", f"interop-{agent}"]
        done = subprocess.run(
            [*argv, "--agent", agent, "--format", "json"],
            cwd=folder / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=SPAWN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        assert done.stdout.strip(), f"spawn printed no summary ({done.returncode}): {done.stderr[-3000:]}"
        summary: dict[str, Any] = json.loads(done.stdout)
        summary["stderr"] = done.stderr[-3000:]
        return summary

    return run


def _codex_config(url: str) -> str:
    """CODEX_HOME/config.toml: the scripted endpoint as the model provider (Responses API), no analytics or
    update checks (nothing leaves 127.0.0.1)."""
    return (
        'model = "scripted-model"\nmodel_provider = "scripted"\ncheck_for_update_on_startup = false\n\n'
        "[analytics]\nenabled = false\n\n"
        f'[model_providers.scripted]\nname = "scripted"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
        'env_key = "SCRIPTED_API_KEY"\n'
    )


def _received(model: ScriptedModel, gateway_tool: Callable[[str | None, str], bool]) -> dict[str, Any]:
    """What the model saw on its first turn: every tool name, and the gateway's tools with a token estimate."""
    first = model.first_tools()
    body = {"tools": first}
    names = [flat_name(namespace, name) for namespace, name in offered(body)]
    mine = [flat_name(ns, name) for ns, name in offered(body) if gateway_tool(ns, name)]
    definitions = _gateway_definitions(first, gateway_tool)
    return {
        "requests": len(model.requests),
        "turns": len(model.turns()),
        "tools": len(names),
        "names": names,
        "gateway_tools": mine,
        "gateway_tokens": sum(count_tokens(compact_json(tool), TOKENIZER) for tool in definitions),
        "answers": [request.answer for request in model.turns()],
    }


def _gateway_definitions(tools: list[dict[str, Any]], gateway_tool: Callable[[str | None, str], bool]) -> list[Any]:
    found: list[Any] = []
    for tool in tools:
        if tool.get("type") == "namespace":
            found += [inner for inner in tool.get("tools", []) if gateway_tool(tool.get("name"), inner.get("name", ""))]
        elif isinstance(tool.get("name"), str) and gateway_tool(None, tool["name"]):
            found.append(tool)
    return found


def _show(received: dict[str, Any], summary: dict[str, Any]) -> None:
    """One `received: {...}` line: what the model got, beside the plan's own count (`pytest -rP` shows it)."""
    planned = {key: summary.get(key) for key in ("mode", "tokens_sent", "searches", "expands", "calls")}
    print("received:", json.dumps({**received, "plan": planned}))


def _claude_tool(namespace: str | None, name: str) -> bool:
    return namespace is None and name.startswith(CLAUDE_PREFIX)


def _codex_tool(namespace: str | None, name: str) -> bool:
    return namespace == CODEX_NAMESPACE


def _bad_names(model: ScriptedModel) -> list[str]:
    """Names in any request outside the provider pattern (each part of a namespaced name on its own)."""
    bad = set()
    for request in model.requests:
        for namespace, name in offered(request.body):
            for part in (namespace, name):
                if part is not None and not PROVIDER_NAME_PATTERN.match(part):
                    bad.add(part)
    return sorted(bad)


def _reached_upstream(model: ScriptedModel) -> bool:
    return any(SUM in result for result in model.tool_results())


# ---------------------------------------------------------------------------------------------- Claude Code


def test_claude_code_gets_the_search_mode_tools_and_its_calls_reach_the_server(spawn: Spawn) -> None:
    """The documented profile sets ENABLE_TOOL_SEARCH=false: left unset, Claude Code 2.1 defers MCP tools
    behind its own tool search, and its first request carried none of the gateway's tools (only `ToolSearch`)."""
    with ScriptedModel(SEARCH_SCRIPT) as model:
        summary = spawn("claude", model)
    received = _received(model, _claude_tool)
    _show(received, summary)
    assert summary["exit_status"] == "ok", summary["stderr"]
    assert sorted(received["gateway_tools"]) == sorted(CLAUDE_PREFIX + name for name in META_TOOLS), received
    assert not _bad_names(model)
    assert (summary["mode"], summary["searches"], summary["expands"], summary["calls"]) == ("search", 1, 1, 1)
    assert _reached_upstream(model), model.tool_results()


def test_claude_code_in_full_mode_sends_every_tool_within_the_model_apis_name_limit(spawn: Spawn) -> None:
    """`mcp__orchestrator__` (19 characters) before `features__summarize_repository_activity_for_the_last_week`
    (57) makes 76: past the 64 characters Anthropic accepts, unless the gateway keeps room for the prefix."""
    with ScriptedModel(FULL_SCRIPT) as model:
        summary = spawn("claude-full", model)
    received = _received(model, _claude_tool)
    _show(received, summary)
    assert summary["exit_status"] == "ok", summary["stderr"]
    assert len(received["gateway_tools"]) == CATALOG_TOOLS, received
    assert not _bad_names(model), "a name past the model API's 64 characters"
    assert any("summarize_repository" in name for name in received["gateway_tools"]), "the long tool was dropped"
    assert _reached_upstream(model), model.tool_results()


def test_claude_code_started_by_a_wrapper_gets_names_within_the_limit_from_its_handshake(spawn: Spawn) -> None:
    """The profile's command is a wrapper script, so the profile alone names no client (an API loop gets
    64-character names); the gateway reads `clientInfo.name` (`claude-code`) from the MCP handshake and
    fits every name after Claude Code's `mcp__orchestrator__` prefix."""
    with ScriptedModel(FULL_SCRIPT) as model:
        summary = spawn("claude-wrapped-full", model)
    received = _received(model, _claude_tool)
    _show(received, summary)
    assert summary["exit_status"] == "ok", summary["stderr"]
    assert len(received["gateway_tools"]) == CATALOG_TOOLS, received
    assert not _bad_names(model), "a name past the model API's 64 characters"
    assert all(len(name) <= 64 for name in received["gateway_tools"])
    assert any("summarize_repository" in name for name in received["gateway_tools"]), "the long tool was dropped"
    assert _reached_upstream(model), model.tool_results()


# ---------------------------------------------------------------------------------------------- Codex


def test_codex_gets_the_search_mode_tools_and_its_calls_reach_the_server(spawn: Spawn) -> None:
    """Codex 0.171 sends an MCP server's tools as one Responses `namespace` (`mcp__orchestrator`) holding
    them under their own names; the model calls `name` within that namespace. The documented profile sets
    `default_tools_approval_mode="approve"`: without it `codex exec` refused every call ("requires approval,
    but approval policy is never")."""
    with ScriptedModel(SEARCH_SCRIPT) as model:
        summary = spawn("codex", model)
    received = _received(model, _codex_tool)
    _show(received, summary)
    assert summary["exit_status"] == "ok", summary["stderr"]
    assert sorted(received["gateway_tools"]) == sorted(f"{CODEX_NAMESPACE}__{name}" for name in META_TOOLS), received
    assert not _bad_names(model)
    assert (summary["mode"], summary["searches"], summary["expands"], summary["calls"]) == ("search", 1, 1, 1)
    assert _reached_upstream(model), model.tool_results()


# ---------------------------------------------------------------------------------------------- provider formats


def _arrays_without_items(schema: Any, path: str = "") -> Iterator[str]:
    if isinstance(schema, dict):
        kind = schema.get("type")
        if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in schema:
            yield path or "/"
        for key, value in schema.items():
            yield from _arrays_without_items(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _arrays_without_items(value, f"{path}/{index}")


def _provider_problems(tools: list[dict[str, Any]], fmt: str) -> list[str]:
    """What a provider would reject: names outside its pattern, non-object schemas; for OpenAI also arrays
    without `items` and more than OPENAI_TOOL_LIMIT tools."""
    problems = []
    if fmt == "openai" and len(tools) > OPENAI_TOOL_LIMIT:
        problems.append(f"{len(tools)} tools (limit {OPENAI_TOOL_LIMIT})")
    for tool in tools:
        name, schema = (
            (tool["name"], tool["input_schema"])
            if fmt == "anthropic"
            else (tool["function"]["name"], tool["function"]["parameters"])
        )
        if not PROVIDER_NAME_PATTERN.match(name):
            problems.append(f"{name}: name")
        if schema.get("type") != "object":
            problems.append(f"{name}: schema type {schema.get('type')!r}")
        if fmt == "openai":
            problems += [f"{name}: array without items at {where}" for where in _arrays_without_items(schema)]
    return problems


def _dry_run(config: Path, agent: str, catalog: Path, fmt: str) -> Any:
    """`orchestrator spawn --dry-run --format FMT` over a snapshot: what a user pastes into a model request."""
    argv = ["--config", str(config), "spawn", "--task", "review the PR", "--agent", agent, "--dry-run"]
    result = CliRunner().invoke(app, [*argv, "--catalog", str(catalog), "--format", fmt])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_anthropic_fragment_of_every_real_catalog_tool_fits_anthropics_rules(
    config: Path, shared_data: Path
) -> None:
    tools = _dry_run(config, "full", shared_data / "catalogs", "anthropic")["tools"]
    assert len(tools) > OPENAI_TOOL_LIMIT  # full mode over every catalog: hundreds of tools
    assert _provider_problems(tools, "anthropic") == []


def test_every_tool_of_every_real_catalog_fits_openais_rules(shared_data: Path) -> None:
    """Names, object schemas and an `items` on every array (hubspot-search-objects has an array without one);
    one catalog per request, each within OpenAI's 128 tools."""
    problems, rendered = [], 0
    for snapshot in sorted((shared_data / "catalogs").glob("*.json")):
        tools = render_tools(ToolCatalog.from_snapshot(snapshot), "openai")
        rendered += len(tools)
        problems += [f"{snapshot.stem}: {problem}" for problem in _provider_problems(tools, "openai")]
    assert rendered > OPENAI_TOOL_LIMIT and problems == []


def test_a_codex_profile_over_openais_tool_limit_goes_to_search_mode(config: Path, shared_data: Path) -> None:
    """A full-mode Codex profile over every real catalog (590 tools) would pass OpenAI's 128 per request."""
    plan = _dry_run(config, "codex-full", shared_data / "catalogs", "json")
    assert plan["mode"] == "search" and "max_tools" in plan["reason"], plan["reason"]
    tools = _dry_run(config, "codex-full", shared_data / "catalogs", "openai")["tools"]
    assert len(tools) <= OPENAI_TOOL_LIMIT and _provider_problems(tools, "openai") == []
