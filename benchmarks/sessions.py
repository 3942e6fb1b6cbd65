"""Scripted agent sessions through a real gateway, recorded in a spawn log, then `orchestrator tune` on it.

    .venv/bin/python benchmarks/sessions.py [--sessions 30] [--think 0.25] [--concurrency 5] [--keep DIR]
    .venv/bin/python benchmarks/sessions.py --learning     plans that learn: the same sessions before and after

What runs: `orchestrator serve --transport http` (a subprocess) over four real stdio servers: the published
mcp-server-git (on a scratch repository) and mcp-server-time, and two benchmarks/catalog_server.py
processes serving published tool lists of ../shared/data/catalogs: `dev` (filesystem) and `web`
(brave-search, fetch, firecrawl, context7). `gateway.spawn_log` is set. Two agent profiles:

    coder       servers git + dev (~3k tokens of definitions). Sessions of 3-5 rounds over eight git
                and file tools (git_status in most sessions). Search habit: trial and error; for each tool
                it has not loaded yet, a vague search (a miss), a precise one, then an expand of that one
                tool, each a round of its own.
    researcher  servers time + web (~17k tokens). Short sessions (1-3 rounds of one or two calls), most of
                them starting with brave_web_search. Search habit: plans ahead; one round of searches for
                every tool the task needs, one expand round for all of them, then the calls.

Each session is a real MCP client (the SDK's streamable HTTP client) on its own spawn endpoint: `POST
/spawns`, `tools/list`, then its rounds (THINK seconds before each, standing in for the model's turn;
the calls of one round run concurrently), then `DELETE /spawns/<id>`. The first half of the sessions
runs with threshold_tokens 2,000 (both profiles in search mode), then the gateway is stopped and started
again with threshold_tokens 100,000 (both in full mode), appending to the same spawn log: every profile
is measured in both modes, and the log outlives the restart. Finally `orchestrator tune` reads the log
(with the first half's thresholds as the current configuration) and its output is printed, then the
break-even per profile from `tune --json`.

Session scripts are drawn from a seeded generator, so two runs make the same requests; token figures
repeat exactly, round counts do unless the machine stalls a request past the batch gap (0.15 s).

With --learning: both profiles in search mode (threshold_tokens 2,000), learning from use on, one store.
Each session's task says what it will do, in words (`TASK_PHRASES`), with a ticket number. The sessions
run four times: with learning off (the baseline); then on, from an empty store (the first pass learns as
it goes); then the same tasks again (the task's own history and similar tasks pin their tools); then the
same kind of tasks with new ticket numbers (new task ids: only similar-task pins apply); and last reworded
(other phrases for each step). Per pass: searches, expands, rounds and tool tokens per session.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _common import CATALOGS, add_results_flag, run_recorded, table

HERE = Path(__file__).resolve().parent
ORCHESTRATOR = str(Path(sys.executable).with_name("orchestrator"))
SEED = 17
THRESHOLD_SEARCH = 2_000
"""First half: under both profiles' catalogs, so both run in search mode."""
THRESHOLD_FULL = 100_000
"""Second half: above both, so both run in full mode."""
GATEWAY_TOKEN = "sessions-benchmark-admin-token-0123456789"
"""The gateway's admin token (POST /spawns); each spawn's MCP endpoint takes the spawn's own token."""
SERVE_START_S = 120.0
"""Bound on the gateway and its four servers starting (importing the mcp SDK takes ~2 s of CPU each)."""
SESSION_TIMEOUT_S = 120.0
HTTP_TIMEOUT_S = 30.0
MISS_QUERY = "zzqx florble wub"
"""Shares no word with any tool and means nothing: a miss under lexical ranking."""

DEV = ("filesystem",)
WEB = ("brave-search", "fetch", "firecrawl", "context7")


@dataclass(frozen=True)
class Tool:
    name: str
    """Qualified name at the gateway."""
    arguments: dict[str, Any]
    query: str
    """Words a careful agent would search with."""


def coder_tools(repo: str) -> dict[str, Tool]:
    git = {"repo_path": repo}
    return {
        tool.name: tool
        for tool in (
            Tool("git__git_status", git, "git working tree status"),
            Tool("git__git_log", {**git, "max_count": 5}, "git commit log"),
            Tool("git__git_diff_unstaged", git, "git diff unstaged changes"),
            Tool("git__git_show", {**git, "revision": "HEAD"}, "git show commit"),
            Tool("dev__filesystem__read_text_file", {"path": f"{repo}/a.txt"}, "read text file contents"),
            Tool("dev__filesystem__list_directory", {"path": repo}, "list directory files"),
            Tool("dev__filesystem__search_files", {"path": repo, "pattern": "*.txt"}, "search files pattern"),
            Tool("git__git_branch", {**git, "branch_type": "local"}, "list git branches"),
        )
    }


def researcher_tools() -> dict[str, Tool]:
    return {
        tool.name: tool
        for tool in (
            Tool("web__brave-search__brave_web_search", {"query": "mcp gateway"}, "brave web search"),
            Tool("web__fetch__fetch", {"url": "https://example.com"}, "fetch url contents"),
            Tool("web__firecrawl__firecrawl_scrape", {"url": "https://example.com"}, "scrape web page url"),
            Tool("web__firecrawl__firecrawl_search", {"query": "mcp"}, "firecrawl search web"),
            Tool("web__context7__resolve-library-id", {"query": "mcp", "libraryName": "mcp"}, "resolve library id"),
            Tool("time__get_current_time", {"timezone": "UTC"}, "current time timezone"),
        )
    }


@dataclass
class Script:
    """One scripted session: its profile and the tool calls of each round."""

    agent: str
    task: str
    rounds: list[list[str]]


def coder_script(rng: random.Random, index: int, tools: dict[str, Tool]) -> Script:
    names = list(tools)
    rounds = [["git__git_status"] if rng.random() < 0.8 else [rng.choice(names)]]
    for _ in range(rng.randint(2, 4)):
        batch = [rng.choice(names)]
        if rng.random() < 0.25:
            batch.append(rng.choice([name for name in names if name != batch[0]]))
        rounds.append(batch)
    return Script("coder", f"coder task {index}", rounds)


def researcher_script(rng: random.Random, index: int, tools: dict[str, Tool]) -> Script:
    names = [name for name in tools if name != "web__brave-search__brave_web_search"]
    rounds = [["web__brave-search__brave_web_search"] if rng.random() < 0.8 else [rng.choice(names)]]
    for _ in range(rng.randint(0, 2)):
        rounds.append(rng.sample(names, rng.randint(1, 2)))
    return Script("researcher", f"research task {index}", rounds)


def scripts(count: int, repo: str) -> list[Script]:
    """`count` sessions, alternating profiles, in a seeded order."""
    rng = random.Random(SEED)
    coder, researcher = coder_tools(repo), researcher_tools()
    made = []
    for index in range(count):
        if index % 2 == 0:
            made.append(coder_script(rng, index, coder))
        else:
            made.append(researcher_script(rng, index, researcher))
    return made


# --------------------------------------------------------------------------- one session over MCP


@dataclass
class Outcome:
    agent: str
    mode: str
    session: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


async def run_session(base: str, script: Script, tools: dict[str, Tool], think: float) -> Outcome:
    """Open a spawn, act the script out as its search habit says, close it; the gateway's final stats."""
    admin_headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
    async with httpx2.AsyncClient(base_url=base, headers=admin_headers, timeout=HTTP_TIMEOUT_S) as admin:
        opened = await admin.post("/spawns", json={"task": script.task, "agent": script.agent})
        if opened.status_code != 201:
            raise SystemExit(f"POST /spawns failed: {opened.status_code} {opened.text}")
        spawn = opened.json()
        outcome = Outcome(script.agent, spawn["plan"]["mode"])
        headers = {"Authorization": f"Bearer {spawn['token']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT_S) as http,
            Client(streamable_http_client(spawn["url"], http_client=http)) as client,
        ):
            listed = {tool.name for tool in (await client.list_tools()).tools}
            search = outcome.mode == "search"
            loaded = {name for name in listed if name in tools}  # pinned tools need no search

            async def act(batch: list[tuple[str, dict[str, Any]]]) -> None:
                await anyio.sleep(think)  # the model's turn
                async with anyio.create_task_group() as group:
                    for name, arguments in batch:
                        group.start_soon(call, name, arguments)

            async def call(name: str, arguments: dict[str, Any]) -> None:
                result = await client.call_tool(name, arguments)
                if result.is_error and name != "tool_search":
                    text = " ".join(getattr(block, "text", "") for block in result.content)
                    outcome.errors.append(f"{name}: {text[:120]}")

            for batch in script.rounds:
                new = [name for name in dict.fromkeys(batch) if search and name not in loaded]
                if new and script.agent == "coder":  # trial and error, one tool at a time
                    for name in new:
                        await act([("tool_search", {"query": MISS_QUERY})])
                        await act([("tool_search", {"query": tools[name].query})])
                        await act([("expand_tools", {"names": [name]})])
                elif new:  # plans ahead: every search at once, then one expand
                    await act([("tool_search", {"query": tools[name].query}) for name in new])
                    await act([("expand_tools", {"names": new})])
                loaded.update(new)
                if search:
                    calls = [("call_tool", {"name": name, "arguments": tools[name].arguments}) for name in batch]
                else:
                    calls = [(name, tools[name].arguments) for name in batch]
                await act(calls)
        closed = await admin.delete(f"/spawns/{spawn['id']}")
        closed.raise_for_status()
        outcome.session = closed.json()["session"]
    return outcome


async def run_half(
    base: str, half: list[Script], tools: dict[str, dict[str, Tool]], think: float, concurrency: int
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(script: Script) -> None:
        async with limiter:
            with anyio.fail_after(SESSION_TIMEOUT_S):
                outcomes.append(await run_session(base, script, tools[script.agent], think))

    async with anyio.create_task_group() as group:
        for script in half:
            group.start_soon(one, script)
    return outcomes


# --------------------------------------------------------------------------- the gateway process


async def wait_ready(base: str) -> int:
    """Wait until every server is ready (the gateway answers at once and adds servers as they come up);
    the number of tools then."""
    headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
    async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=HTTP_TIMEOUT_S) as admin:
        with anyio.fail_after(SERVE_START_S):
            while True:
                health = (await admin.get("/health")).json()
                if health["servers"] and all(server["state"] == "ready" for server in health["servers"]):
                    return int(health["tools"])
                await anyio.sleep(0.2)


def write_config(folder: Path, repo: Path, spawn_log: Path, threshold: int) -> Path:
    dev, web = folder / "dev", folder / "web"
    for target, names in ((dev, DEV), (web, WEB)):
        target.mkdir(exist_ok=True)
        for name in names:
            shutil.copy(CATALOGS / f"{name}.json", target / f"{name}.json")
    catalog_server = str(HERE / "catalog_server.py")
    config = {
        "mcp": {
            "servers": {
                "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
                "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
                "dev": {"command": sys.executable, "args": [catalog_server, "--catalogs", str(dev)]},
                "web": {"command": sys.executable, "args": [catalog_server, "--catalogs", str(web)]},
            },
            "cache_dir": str(folder / "cache"),
            "tool_search": {"ranking": "lexical", "threshold_tokens": threshold},
        },
        "agents": {
            "coder": {"servers": ["git", "dev"]},
            "researcher": {"servers": ["time", "web"]},
        },
        "gateway": {"spawn_log": str(spawn_log), "token": GATEWAY_TOKEN},
    }
    path = folder / f"bernstein-{threshold}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@contextlib.contextmanager
def serving(config: Path, log: Path) -> Iterator[str]:
    """`orchestrator serve --transport http` on a free port; yields its base URL; SIGTERM at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [ORCHESTRATOR, "--config", str(config), "serve", "--transport", "http", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + SERVE_START_S
        while True:
            found = re.search(r"gateway: agent '\w+' at (http://[\d.]+:\d+)/mcp", log.read_text())
            if found:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"orchestrator serve did not start: {log.read_text()}")
            time.sleep(0.2)
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.returncode != 0:
        raise SystemExit(f"orchestrator serve exited {process.returncode}: {log.read_text()}")


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("hello\n")
    git = ["git", "-C", str(repo), "-c", "user.email=bench@example.com", "-c", "user.name=bench"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    (repo / "a.txt").write_text("hello\nworld\n")  # something for git_diff_unstaged to show
    return repo


TASK_PHRASES: dict[str, tuple[str, str]] = {
    "git__git_status": ("check what changed in the working tree", "see which files were modified"),
    "git__git_log": ("look at the recent commits", "go through the latest commit history"),
    "git__git_diff_unstaged": ("show the unstaged changes", "inspect the diff that is not staged yet"),
    "git__git_show": ("show the last commit", "display the HEAD commit"),
    "dev__filesystem__read_text_file": ("read a.txt", "open the file a.txt"),
    "dev__filesystem__list_directory": ("list the repository folder", "see what the folder holds"),
    "dev__filesystem__search_files": ("find the text files", "look for files matching *.txt"),
    "git__git_branch": ("list the local branches", "see which branches exist"),
    "web__brave-search__brave_web_search": ("search the web for MCP gateways", "look up MCP gateways online"),
    "web__fetch__fetch": ("fetch example.com", "download the page at example.com"),
    "web__firecrawl__firecrawl_scrape": ("scrape example.com", "extract the content of example.com"),
    "web__firecrawl__firecrawl_search": ("search and crawl for MCP", "crawl search results about MCP"),
    "web__context7__resolve-library-id": ("find the library id of mcp", "work out which library mcp is"),
    "time__get_current_time": ("note the current UTC time", "tell the time in UTC"),
}
"""Each tool's step in words, as a task would ask for it (two phrasings)."""


def described(script: Script, ticket: int, phrasing: int = 0) -> Script:
    """The script with a task that says what it will do: its tools' steps in first-use order, and a ticket."""
    steps = [TASK_PHRASES[name][phrasing] for name in dict.fromkeys(n for batch in script.rounds for n in batch)]
    return Script(script.agent, f"{'; then '.join(steps)} (ticket {ticket})", script.rounds)


def learning_config(folder: Path, repo: Path, spawn_log: Path, enabled: bool) -> Path:
    path = write_config(folder, repo, spawn_log, THRESHOLD_SEARCH)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["mcp"]["tool_search"]["traces"] = {"enabled": enabled, "refresh_s": 0}
    # Its own store each: the baseline's task histories must not pin anything for the passes after it.
    config["mcp"]["cache_dir"] = str(folder / f"cache-learning-{'on' if enabled else 'off'}")
    learned = folder / f"bernstein-learning-{'on' if enabled else 'off'}.yaml"
    learned.write_text(yaml.safe_dump(config), encoding="utf-8")
    return learned


def per_session(outcomes: list[Outcome]) -> dict[str, float]:
    n = max(len(outcomes), 1)
    return {
        key: sum(float(o.session[key]) for o in outcomes) / n for key in ("searches", "expands", "rounds", "tokens")
    }


def learning_benchmark(count: int, think: float, concurrency: int) -> int:
    """`--learning`: the same sessions with learning off, then on over one store, four passes."""
    folder = Path(tempfile.mkdtemp(prefix="orchestrator-learning-"))
    try:
        repo = make_repo(folder)
        made = scripts(count, str(repo))
        tools = {"coder": coder_tools(str(repo)), "researcher": researcher_tools()}
        passes = [
            ("learning off (the baseline)", False, [described(script, i) for i, script in enumerate(made)]),
            ("learning on, first pass (empty store)", True, [described(script, i) for i, script in enumerate(made)]),
            ("the same tasks again", True, [described(script, i) for i, script in enumerate(made)]),
            ("same kind, new tickets", True, [described(script, 1000 + i) for i, script in enumerate(made)]),
            ("reworded, new tickets", True, [described(script, 2000 + i, 1) for i, script in enumerate(made)]),
        ]
        rows = []
        for label, enabled, batch in passes:
            config = learning_config(folder, repo, folder / "spawns.jsonl", enabled)
            with serving(config, folder / f"serve-{len(rows)}.log") as base:
                anyio.run(wait_ready, base)
                done = anyio.run(run_half, base, batch, tools, think, concurrency)
            errors = [error for outcome in done for error in outcome.errors]
            if errors:
                print(f"{label}: {len(errors)} calls answered with an error, e.g. {errors[0]}")
            for agent in (None, "coder", "researcher"):
                chosen = [o for o in done if agent is None or o.agent == agent]
                figures = per_session(chosen)
                rows.append(
                    [
                        label if agent is None else f"  {agent}",
                        str(len(chosen)),
                        f"{figures['searches']:.2f}",
                        f"{figures['expands']:.2f}",
                        f"{figures['rounds']:.2f}",
                        f"{figures['tokens']:,.0f}",
                    ]
                )
        print(f"\nPlans that learn: {count} scripted sessions (search mode), passes over one store")
        table(
            ["pass", "sessions", "searches / session", "expands / session", "rounds / session", "tokens / session"],
            rows,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--think", type=float, default=0.25, help="seconds before each round (the model's turn)")
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the spawn log and configs in this folder")
    parser.add_argument("--learning", action="store_true", help="only plans that learn: passes over one store")
    add_results_flag(parser)
    args = parser.parse_args()
    if args.learning:
        return learning_benchmark(args.sessions, args.think, args.concurrency)

    folder = Path(tempfile.mkdtemp(prefix="orchestrator-sessions-"))
    try:
        repo = make_repo(folder)
        spawn_log = folder / "spawns.jsonl"
        made = scripts(args.sessions, str(repo))
        tools = {"coder": coder_tools(str(repo)), "researcher": researcher_tools()}
        halves = (made[: len(made) // 2], made[len(made) // 2 :])
        outcomes: list[Outcome] = []
        started = time.monotonic()
        for threshold, half in zip((THRESHOLD_SEARCH, THRESHOLD_FULL), halves, strict=True):
            config = write_config(folder, repo, spawn_log, threshold)
            with serving(config, folder / f"serve-{threshold}.log") as base:
                anyio.run(wait_ready, base)
                done = anyio.run(run_half, base, half, tools, args.think, args.concurrency)
            outcomes.extend(done)
            modes = sorted({(o.agent, o.mode) for o in done})
            print(f"threshold_tokens {threshold:,}: {len(done)} sessions ({', '.join(f'{a} {m}' for a, m in modes)})")
        print(f"{len(outcomes)} sessions in {time.monotonic() - started:.1f} s")
        errors = [error for outcome in outcomes for error in outcome.errors]
        if errors:
            print(f"{len(errors)} tool calls answered with an error, e.g. {errors[0]}")
        lines = spawn_log.read_text().splitlines()
        print(f"spawn log: {len(lines)} lines ({spawn_log.stat().st_size:,} bytes)")
        searched = [
            action["result_tokens"]
            for line in lines
            for batch in json.loads(line)["batches"]
            for action in batch
            if action["kind"] == "search" and "hits" in action
        ]
        if searched:
            print(f"tool_search results: {len(searched)}, mean {sum(searched) / len(searched):.0f} tokens")

        tune_config = write_config(folder, repo, spawn_log, THRESHOLD_SEARCH)
        print(f"\n$ orchestrator --config {tune_config.name} tune\n")
        shown = subprocess.run([ORCHESTRATOR, "--config", str(tune_config), "tune"], capture_output=True, text=True)
        print(shown.stdout, end="")
        if shown.returncode != 0:
            print(shown.stderr)
            return 1
        report = json.loads(
            subprocess.run(
                [ORCHESTRATOR, "--config", str(tune_config), "tune", "--json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        print("\nBreak-even found")
        for item in report["agents"]:
            print(
                f"  {item['agent']:<11} {item['sessions']} sessions: break-even {item['break_even']:,.0f} tokens -> "
                f"threshold_tokens {item['recommended_threshold']:,}; catalog {item['catalog_tokens']:,} tokens "
                f"-> {item['mode_recommended']} mode; pins: "
                f"{', '.join(pin['tool'] for pin in item['pins'] if pin['recommended']) or 'none'}"
            )
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in [spawn_log, *folder.glob("bernstein-*.yaml")]:
                shutil.copy(path, args.keep / path.name)
            print(f"\nkept {spawn_log.name} and the configs in {args.keep}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_recorded(main))
