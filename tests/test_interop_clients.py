"""Real MCP clients against `orchestrator serve` (issue 15): the official TypeScript SDK v1 and v2 clients and
the MCP Inspector CLI, over streamable HTTP and stdio, with tests/servers/basic.py, changing.py and
features.py behind the gateway.

The Node scripts in tests/interop/ (sdk_v1.mjs, sdk_v2.mjs over scenario.mjs) run the whole scenario once per
client, transport and mode and print a JSON report; these tests assert on it. The npm packages are pinned in
tests/interop/package-lock.json and installed by scripts/install-node-deps.sh (`make test` runs it; the
fixture runs it too, a no-op when installed). Without node/npm the module is skipped.

Issue 15's gateway features (progress and log relay, resources and prompts proxied, error results that
satisfy output schemas, `gateway.server_name`, answering `initialize` at once) are all exercised here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import server_entry, server_script
from .interop.harness import (
    NODE_MODULES,
    ORCHESTRATOR,
    Gateway,
    open_spawn,
    require_node_packages,
    run_node,
    running_gateway,
    write_config,
)

pytestmark = pytest.mark.slow


def servers() -> dict[str, dict[str, object]]:
    """The upstream servers (built when a test needs them, so collecting the tests starts no zygote)."""
    return {
        "basic": server_entry("basic.py"),
        # on_change accept: the tool it adds is offered at once (the default holds it until approved).
        "changing": server_entry("changing.py", on_change="accept"),
        "features": server_entry("features.py"),
    }


FULL = {"full": {"tool_search": {"threshold_tokens": 1_000_000}}}
"""A profile in full mode: every tool listed under its qualified name and called directly."""
META_TOOLS = ["tool_search", "expand_tools", "call_tool"]
SCRIPTS = {"sdk-v1": "sdk_v1.mjs", "sdk-v2": "sdk_v2.mjs"}
NEGOTIATED = {"sdk-v1": "2025-11-25", "sdk-v2": "2026-07-28"}
"""v1 speaks the handshake era; v2 negotiates the 2026-07-28 revision (`versionNegotiation: auto` / pinned)."""
EXPECTED = "Expected: {a: integer (required), b: integer (required)}"
"""The corrective part of the bad-arguments error for `basic__add({"a": "two"})`."""
NOTE_HELLO = "Note hello from the features server."
INSPECTOR_BUILD = NODE_MODULES / "@modelcontextprotocol" / "inspector-cli" / "build"
INSPECTOR_TIMEOUT_S = 60
# One Inspector CLI run connects, does one method and exits: under a second over HTTP, a few seconds when it
# starts a stdio gateway.
BACKGROUND_RUNS = 4
# The two stdio runs and the slow-server run start with the module, beside one HTTP run at a time.
LATE_START_S = 8
# The slow server's start is delayed this long: longer than the gateway takes to start on a loaded machine,
# so "answered before it was up" is a fact about ordering, not a race.

MATRIX = [
    pytest.param(client, transport, id=f"{client}-{transport}") for client in SCRIPTS for transport in ("http", "stdio")
]

PROGRESS_ORDER = pytest.mark.xfail(
    strict=False,
    reason="TypeScript SDK client over stdio: it handles notifications in a microtask but responses at once, so "
    "progress read in the same stdout chunk as the result can be dropped (v1: 1 or 2 of 3 in about 1 run in 4; "
    "v2: seen in about 1 run in 10 under load); the gateway's stdout has all 3 before the result (seen with tee)",
)
"""Not strict: the client's race shows in some runs only, so a strict marker would fail the runs it misses."""


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def node() -> None:
    require_node_packages()


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("interop") / "bernstein.yaml", servers(), FULL)


@pytest.fixture(scope="module")
def gateway(node: None, config: Path) -> Iterator[Gateway]:
    """One HTTP gateway for the module (search mode at /mcp; the `full` profile through a spawn)."""
    with running_gateway(config, "--port", "0") as running:
        yield running


class Reports:
    """Each client's report per (transport, mode), each run once in a worker thread (a failure is kept and
    re-raised by every test that reads it). The stdio runs and the slow-server run are mostly waiting (for
    their own gateway, for a server's delayed start), so the fixture starts them at once, beside the HTTP ones.
    """

    def __init__(self, gateway: Gateway, config: Path, folder: Path, pool: ThreadPoolExecutor) -> None:
        self.gateway = gateway
        self.config = config
        self.folder = folder
        self._pool = pool
        self._runs: dict[tuple[str, str, str], Future[Any]] = {}

    def start(self, client: str, transport: str, mode: str = "search") -> None:
        """Start a run unless it is running: `mode` is search, full, or late (the slow-server scenario)."""
        key = (client, transport, mode)
        if key not in self._runs:
            if mode == "late":
                self._runs[key] = self._pool.submit(self._late)
            else:
                self._runs[key] = self._pool.submit(run_node, SCRIPTS[client], self._args(client, transport, mode))

    def get(self, client: str, transport: str, mode: str = "search") -> dict[str, Any]:
        self.start(client, transport, mode)
        return dict(self._runs[(client, transport, mode)].result())

    def _args(self, client: str, transport: str, mode: str) -> list[str]:
        added = ["--added", f"added_{client}_{transport}".replace("-", "_")]
        if transport == "stdio":
            agent = ["--agent", "full"] if mode == "full" else []
            serve = [ORCHESTRATOR, "--config", str(self.config), "serve", "--transport", "stdio", *agent]
            return ["--mode", mode, *added, "--", *serve]
        if mode == "full":
            spawn = open_spawn(self.gateway, f"interop {client}", "full")
            return ["--url", spawn["url"], "--header", f"Authorization: Bearer {spawn['token']}", "--mode", "full"]
        return ["--url", self.gateway.url, "--header", self.gateway.authorization, *added]

    def _late(self) -> Any:
        """v1 over stdio against a gateway with `basic` and `late` (basic.py started LATE_START_S late)."""
        slow = f"sleep {LATE_START_S} && exec {sys.executable} {server_script('basic.py')} --name late"
        upstream = {
            "basic": servers()["basic"],
            "late": {"command": "sh", "args": ["-c", slow], "startup_timeout_s": 60},
        }
        config = write_config(self.folder / "late.yaml", upstream, FULL)
        serve = [ORCHESTRATOR, "--config", str(config), "serve", "--transport", "stdio", "--agent", "full"]
        return run_node("sdk_v1.mjs", ["--scenario", "late", "--late", "late__", "--mode", "full", "--", *serve])


@pytest.fixture(scope="module")
def reports(gateway: Gateway, config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reports]:
    with ThreadPoolExecutor(max_workers=BACKGROUND_RUNS, thread_name_prefix="interop") as pool:
        runs = Reports(gateway, config, tmp_path_factory.mktemp("late"), pool)
        for client in SCRIPTS:
            runs.start(client, "stdio")
        runs.start("sdk-v1", "stdio", "late")
        yield runs


# ------------------------------------------------------------------------------------------------ the basics


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_client_negotiates_and_lists_the_search_mode_tools(reports: Reports, client: str, transport: str) -> None:
    report = reports.get(client, transport)
    assert report["initialize"]["ok"], report["initialize"]
    assert report["initialize"]["protocolVersion"] == NEGOTIATED[client]
    assert report["initialize"]["serverInfo"]["name"] == "orchestrator"
    assert report["list_tools"]["names"] == META_TOOLS


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_tool_search_expand_tools_and_call_tool_work_from_the_client(
    reports: Reports, client: str, transport: str
) -> None:
    report = reports.get(client, transport)
    assert report["tool_search"]["hits"][0] == "basic__add", report["tool_search"]
    assert (report["expand_tools"]["names"], report["expand_tools"]["properties"]) == (["basic__add"], [["a", "b"]])
    call = report["call_tool"]
    assert call["ok"] and not call["is_error"] and call["structured"] == {"result": 5}, call


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_bad_arguments_come_back_as_a_tool_error_saying_what_is_expected(
    reports: Reports, client: str, transport: str
) -> None:
    bad = reports.get(client, transport)["bad_arguments"]
    assert bad["ok"] and bad["is_error"], bad
    assert EXPECTED in bad["text"] and "two" in bad["text"], bad["text"]


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_an_upstream_tool_list_change_reaches_the_client(reports: Reports, client: str, transport: str) -> None:
    changed = reports.get(client, transport)["list_changed"]
    assert changed["ok"] and not changed["call_is_error"], changed
    assert changed["notified"], f"no list_changed within the wait: {changed}"
    assert changed["searchable"], "the added tool is not found by tool_search after the change"


@pytest.mark.parametrize("client", list(SCRIPTS))
def test_full_mode_lists_every_tool_and_calls_it_directly(reports: Reports, client: str) -> None:
    report = reports.get(client, "http", "full")
    names = report["list_tools"]["names"]
    assert {"basic__add", "changing__base", "features__count", "features__total"} <= set(names)
    assert "tool_search" not in names
    assert report["call_tool"]["structured"] == {"result": 5}


# ------------------------------------------------------------------------------- issue 15's gateway features


@pytest.mark.parametrize("client", list(SCRIPTS))
def test_an_error_result_for_a_tool_with_an_output_schema_reaches_the_client(reports: Reports, client: str) -> None:
    """`basic__add` declares `{"result": integer}` as output; v1 validates even error results against it (it
    threw -32602, so the agent never saw the corrective text, until the gateway's errors satisfied it)."""
    report = reports.get(client, "http", "full")
    assert "basic__add" in report["list_tools"]["output_schemas"]
    bad = report["bad_arguments"]
    assert bad["ok"] and bad["is_error"], bad
    assert EXPECTED in bad["text"]


@pytest.mark.parametrize(
    ("client", "transport"),
    [
        pytest.param(*param.values, id=param.id, marks=PROGRESS_ORDER if param.id.endswith("-stdio") else ())
        for param in MATRIX
    ],
)
def test_progress_notifications_are_relayed_to_the_client(reports: Reports, client: str, transport: str) -> None:
    progress = reports.get(client, transport)["progress"]
    assert progress["ok"] and progress["text"] == "counted 3", progress
    assert [(item["progress"], item.get("total")) for item in progress["progress"]] == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_log_messages_are_relayed_to_a_client_that_asks_for_them(reports: Reports, transport: str) -> None:
    """The handshake-era client (v1) sets a level when the server offers logging; at 2026-07-28 logging is
    deprecated, so v2 is not asked for it."""
    log = reports.get("sdk-v1", transport)["log"]
    assert log["capability"] and log["set_level"] == "ok", log
    assert log["messages"] == ["interop-log-sdk-v1"]


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_a_resource_link_returned_by_a_tool_reads_through_the_gateway(
    reports: Reports, client: str, transport: str
) -> None:
    link = reports.get(client, transport)["resource_link"]
    assert link["ok"], link
    assert link["contents"] == [NOTE_HELLO]


@pytest.mark.parametrize(("client", "transport"), MATRIX)
def test_resources_and_prompts_are_listed_and_fetched_through_the_gateway(
    reports: Reports, client: str, transport: str
) -> None:
    report = reports.get(client, transport)
    resources, prompts = report["resources"], report["prompts"]
    assert resources["ok"] and any("hello" in uri for uri in resources["uris"]), resources
    assert prompts["ok"] and prompts["messages"] == ["Please greet Ada warmly."], prompts


def test_the_gateway_advertises_its_configured_server_name(node: None, tmp_path: Path) -> None:
    """`gateway.server_name` is what clients see as the server's name and what spawn configs call it (so a client's
    tool prefix, e.g. Claude Code's `mcp__<name>__`, can be shortened)."""
    config = write_config(
        tmp_path / "bernstein.yaml", {"basic": servers()["basic"]}, FULL, gateway={"server_name": "tools"}
    )
    with running_gateway(config, "--port", "0") as gateway:
        report = run_node(
            "sdk_v1.mjs", ["--scenario", "connect", "--url", gateway.url, "--header", gateway.authorization]
        )
        spawn = open_spawn(gateway, "named", "default")
    assert report["initialize"]["serverInfo"]["name"] == "tools"
    assert list(spawn["mcp_config"]["mcpServers"]) == ["tools"]


def test_the_stdio_gateway_answers_before_a_slow_server_is_up_and_announces_it_later(reports: Reports) -> None:
    report = reports.get("sdk-v1", "stdio", "late")
    assert report["initialize"]["ok"], report["initialize"]
    first = report["list_tools"]["names"]
    assert not any(name.startswith("late__") for name in first), f"initialize waited for the slow server: {first}"
    late = report["late_change"]
    assert late["announced"] and "late__add" in late["names"], late


# ---------------------------------------------------------------------------------------------- MCP Inspector CLI


def _inspector(target: list[str], *args: str, header: str | None = None) -> Any:
    """One Inspector CLI run (`mcp-inspector --cli`'s code, @modelcontextprotocol/inspector-cli); its JSON
    result, or the error it printed.

    Run from its build folder: inspector-cli 1.0.3 finds its own package.json relative to the working
    directory (a packaging bug), and fails anywhere else.
    """
    done = subprocess.run(
        [
            "node",
            str(INSPECTOR_BUILD / "index.js"),
            target[0],
            *args,
            *(["--header", header] if header else []),
            *(["--", *target[1:]] if target[1:] else []),
        ],
        cwd=INSPECTOR_BUILD,
        capture_output=True,
        text=True,
        timeout=INSPECTOR_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        return {"cli_error": done.stderr.strip()[-1500:]}
    return json.loads(done.stdout)


def _call(target: list[str], tool: str, header: str | None = None, **arguments: Any) -> Any:
    args = [f"{key}={json.dumps(value) if not isinstance(value, str) else value}" for key, value in arguments.items()]
    return _inspector(target, "--method", "tools/call", "--tool-name", tool, "--tool-arg", *args, header=header)


def _payload(result: Any) -> Any:
    return result.get("structuredContent") or json.loads(result["content"][0]["text"])


def test_inspector_cli_lists_searches_expands_and_calls_over_http(gateway: Gateway) -> None:
    target, auth = [gateway.url], gateway.authorization
    listed = _inspector(target, "--method", "tools/list", header=auth)
    assert [tool["name"] for tool in listed["tools"]] == META_TOOLS, listed
    found = _payload(_call(target, "tool_search", auth, query="add two integers"))
    assert found["hits"][0]["name"] == "basic__add"
    expanded = _payload(_call(target, "expand_tools", auth, names=["basic__add"]))
    assert [tool["name"] for tool in expanded["tools"]] == ["basic__add"]
    called = _call(target, "call_tool", auth, name="basic__add", arguments={"a": 2, "b": 3})
    assert not called.get("isError") and called["structuredContent"] == {"result": 5}, called


def test_inspector_cli_sees_bad_arguments_as_a_tool_error(gateway: Gateway) -> None:
    result = _call([gateway.url], "call_tool", gateway.authorization, name="basic__add", arguments={"a": "two"})
    assert result.get("isError") is True, result
    assert EXPECTED in result["content"][0]["text"]


def test_inspector_cli_sees_the_error_result_of_a_tool_with_an_output_schema(gateway: Gateway) -> None:
    spawn = open_spawn(gateway, "interop inspector", "full")
    header = f"Authorization: Bearer {spawn['token']}"
    listed = _inspector([spawn["url"]], "--method", "tools/list", header=header)
    assert any(tool["name"] == "basic__add" and tool.get("outputSchema") for tool in listed["tools"]), listed
    result = _inspector(
        [spawn["url"]], "--method", "tools/call", "--tool-name", "basic__add", "--tool-arg", "a=two", header=header
    )
    assert result.get("isError") is True, result
    assert EXPECTED in result["content"][0]["text"]


def test_inspector_cli_reads_a_resource_link_through_the_gateway(gateway: Gateway) -> None:
    auth = gateway.authorization
    result = _call([gateway.url], "call_tool", auth, name="features__link", arguments={"name": "hello"})
    links = [block for block in result.get("content", []) if block.get("type") == "resource_link"]
    assert links, result
    read = _inspector([gateway.url], "--method", "resources/read", "--uri", links[0]["uri"], header=auth)
    assert [item.get("text") for item in read.get("contents", [])] == [NOTE_HELLO], read


def test_inspector_cli_calls_a_tool_over_stdio(node: None, config: Path) -> None:
    serve = [ORCHESTRATOR, "--config", str(config), "serve", "--transport", "stdio"]
    result = _call(serve, "call_tool", name="basic__add", arguments={"a": 2, "b": 3})
    assert result.get("structuredContent") == {"result": 5}, result
