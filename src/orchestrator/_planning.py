"""The tool-search decision and per-spawn plans: what one short-lived agent is sent, in one place.

    plan_tools(catalog, settings, counter) -> ToolPlan
        full    every definition is sent: `enabled` is false, or they cost <= `threshold_tokens`
        search  the fixed header + a compact directory (_directory.py), the three meta-tool
                definitions (`tool_search`, `expand_tools`, `call_tool`) and the pinned tools in full

    A catalog of more than `max_tools` tools goes to search mode whatever its tokens: a provider
    refuses more tools than that in one request (OpenAI: 128), so "every tool" is not an option there.

    SpawnPlanner(settings).plan(task, agent, catalog) -> SpawnPlan
        the profile filters the catalog (servers, allow and deny globs over qualified names), the
        profile's pins and the task's recently called tools are pinned, then `plan_tools` decides.

A plan carries a fingerprint of the exact bytes the model will see: the same catalog, profile and task
history give the same prompt and tools byte for byte, so provider prompt caches keep hitting. The
planner owns the token counts and a small plan cache, so `tools plan`, `spawn --dry-run`, the gateway
and the benchmarks report the same tokens for the same spawn. Pure apart from one telemetry event per
planned spawn.
"""

from __future__ import annotations

import fnmatch
import hashlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ._clients import ClientKind, client_kind, client_rules
from ._config import AgentProfile, Settings, ToolSearchSettings
from ._directory import DIRECTORY_HEADER, Directory, Listings, build_directory
from ._meta_tools import META_TOOL_DEFINITIONS
from ._telemetry import Telemetry
from ._tokens import TokenCounter, compact_json
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .protocols.mcp._normalization import SEPARATOR, qualified_name

__all__ = [
    "RECENT_TOOLS_LIMIT",
    "ProfileFilter",
    "SpawnPlan",
    "SpawnPlanner",
    "ToolPlan",
    "effective_tool_search",
    "fingerprint",
    "matches_any",
    "matches_item",
    "plan_tools",
    "task_key",
]

RECENT_TOOLS_LIMIT = 8
"""Recently called tools pinned for a task's later spawns. Pins cost full schemas in every prompt; a few
cover a retried or continued step without undoing what search mode saves."""
TASK_KEY_LENGTH = 16
"""Hex digits of sha256(task text) used as the task id when the caller gives none (64 bits)."""
PLAN_CACHE_SIZE = 64
"""Plans a planner keeps (catalog version x settings); a gateway serves a handful of profiles."""


def matches_any(name: str, patterns: Sequence[str]) -> bool:
    """True when `name` matches one of the globs (case-sensitive): pins, agent allow/deny and server lists."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def matches_item(name: str, server: str, item: str, patterns: Sequence[str]) -> bool:
    """`matches_any` for a tool, prompt or resource: its qualified name, or `server__item` as configured
    and listed. A name that is not provider-safe is rewritten and hashed in the qualified name, which a glob
    written from the configuration would miss (`Airbnb listings__*` against
    `Airbnb_listings__search-5785f56bfeac`)."""
    if matches_any(name, patterns):
        return True
    plain = f"{server}{SEPARATOR}{item}"
    return plain != name and matches_any(plain, patterns)


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class ToolPlan:
    """What one spawn is sent: the tools section of its prompt and its tool definitions."""

    mode: Literal["full", "search"]
    full_tokens: int
    """Tokens of every tool definition as it would be sent (the counting rule is in _tokens.py)."""
    prompt_tokens: int
    """Tokens actually sent in this mode: `prompt` plus every definition in `tools`."""
    reason: str
    directory_level: Literal["none", "lines", "names", "servers"]
    """"none" in full mode."""
    prompt: str
    """The tools section of the system prompt: empty in full mode, header + directory in search mode."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Definitions sent: every tool (full), or the three meta-tools then the pinned tools (search)."""
    pinned: list[str] = field(default_factory=list)
    """Qualified names matched by the `pinned` globs, sorted."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `orchestrator tools plan --json` prints it."""
        return {
            "mode": self.mode,
            "full_tokens": self.full_tokens,
            "prompt_tokens": self.prompt_tokens,
            "directory_level": self.directory_level,
            "reason": self.reason,
            "pinned": list(self.pinned),
            "prompt": self.prompt,
            "tools": [dict(tool) for tool in self.tools],
        }

    def copy(self) -> ToolPlan:
        """Fresh lists, so a caller that edits its plan cannot change a cached one."""
        return replace(self, tools=[dict(tool) for tool in self.tools], pinned=list(self.pinned))


def plan_tools(
    catalog: ToolCatalog,
    settings: ToolSearchSettings,
    counter: TokenCounter | None = None,
    listings: Listings | None = None,
) -> ToolPlan:
    """Full or search mode for one spawn, with the prompt section and definitions to send.

    Full when `settings.enabled` is false or every definition together costs at most
    `threshold_tokens`; search mode otherwise, and always when the catalog has more than
    `settings.max_tools` tools. Pure: the same catalog and settings give the same plan,
    byte for byte. `counter` (for `settings.tokenizer`) remembers per-tool counts across calls, and
    `listings` what each server adds to the directory.

    Raises:
        TokenizerError: `settings.tokenizer` cannot be loaded.
    """
    counter = (
        counter if counter is not None and counter.encoding == settings.tokenizer else TokenCounter(settings.tokenizer)
    )
    full_tokens = sum(counter.entry(entry) for entry in catalog)
    pinned = [entry for entry in catalog if matches_item(entry.name, entry.server, entry.tool, settings.pinned)]
    pinned_names = [entry.name for entry in pinned]
    threshold = settings.threshold_tokens
    too_many = settings.max_tools is not None and len(catalog) > settings.max_tools
    if not too_many and (not settings.enabled or full_tokens <= threshold):
        reason = (
            "tool search disabled (mcp.tool_search.enabled: false): every tool is sent"
            if not settings.enabled
            else f"full catalog {full_tokens:,} tokens <= threshold_tokens {threshold:,}: every tool is sent"
        )
        return ToolPlan(
            mode="full",
            full_tokens=full_tokens,
            prompt_tokens=full_tokens,
            reason=reason,
            directory_level="none",
            prompt="",
            tools=[entry.definition() for entry in catalog],
            pinned=pinned_names,
        )
    directory = build_directory(catalog, settings.directory_budget_tokens, settings.tokenizer, listings)
    prompt = f"{DIRECTORY_HEADER}\n\n{_directory_title(directory)}\n{directory.text}"
    tools = [dict(definition) for definition in META_TOOL_DEFINITIONS] + [entry.definition() for entry in pinned]
    prompt_tokens = (
        counter.text(prompt)
        + sum(counter.definition(definition) for definition in META_TOOL_DEFINITIONS)
        + sum(counter.entry(entry) for entry in pinned)
    )
    cause = (
        f"{len(catalog)} tools > max_tools {settings.max_tools} (the most the client's model API takes)"
        if too_many
        else f"full catalog {full_tokens:,} tokens > threshold_tokens {threshold:,}"
    )
    reason = _search_reason(cause, directory, settings.directory_budget_tokens, len(pinned))
    return ToolPlan(
        mode="search",
        full_tokens=full_tokens,
        prompt_tokens=prompt_tokens,
        reason=reason,
        directory_level=directory.level,
        prompt=prompt,
        tools=tools,
        pinned=pinned_names,
    )


def _directory_title(directory: Directory) -> str:
    return {
        "lines": "### Directory (name - summary)",
        "names": "### Directory (server (tool count): tool names)",
        "servers": "### Directory (server (tool count): what its tools are about; use tool_search for names)",
    }[directory.level]


def _search_reason(cause: str, directory: Directory, budget: int, pinned: int) -> str:
    reason = f"{cause}: search mode, directory level {directory.level}"
    if directory.tried:
        needed = ", ".join(f"{level} {tokens:,}" for level, tokens in directory.tried)
        reason += f" ({needed} tokens > directory_budget_tokens {budget:,})"
    if directory.over_budget:
        reason += f"; even one line per server needs {directory.tokens:,} tokens, over budget, every server kept"
    if pinned:
        reason += f"; {pinned} pinned tool{'s' if pinned != 1 else ''} sent with full schemas"
    return reason


# --------------------------------------------------------------------------- per-spawn plans


@dataclass(frozen=True)
class ProfileFilter:
    """An agent profile's visibility rules: server globs, then allow and deny globs over qualified names."""

    servers: tuple[str, ...] = ("*",)
    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()

    @classmethod
    def from_profile(cls, profile: AgentProfile) -> ProfileFilter:
        return cls(tuple(profile.servers), tuple(profile.allow), tuple(profile.deny))

    def allows_server(self, server: str) -> bool:
        return matches_any(server, self.servers)

    def admits(self, name: str, server: str, item: str) -> bool:
        """A tool, prompt or resource (its qualified name, its server and its own name there) matched by
        `allow`, not by `deny` (deny wins), under either of its names (`matches_item`)."""
        return matches_item(name, server, item, self.allow) and not matches_item(name, server, item, self.deny)

    def opens(self, server: str) -> bool:
        """Whether the profile may use all of an allowed server, not some of its tools: only then are its
        resources and prompts offered (`allow: ["github__*"]` opens github; `["github__get_issue"]` does not).
        Asked with a name no server gives (NUL after `server__`), which only a glob over the whole
        namespace matches."""
        readable = qualified_name(server, "x").partition(SEPARATOR)[0]  # the server part tools are named with
        return self.allows_server(server) and self.admits(f"{readable}{SEPARATOR}\x00", server, "\x00")

    def visible(self, entry: ToolEntry) -> bool:
        """Offered by an allowed server, matched by `allow`, not matched by `deny` (deny wins)."""
        return any(self.allows_server(server) for server in entry.servers) and self.admits(
            entry.name, entry.server, entry.tool
        )

    def routes(self, entry: ToolEntry) -> tuple[str, ...]:
        """The servers offering this tool that the profile allows, in catalog order (first = preferred)."""
        return tuple(server for server in entry.servers if self.allows_server(server))

    def apply(self, catalog: ToolCatalog) -> ToolCatalog:
        """The catalog this agent may see."""
        if self.servers == ("*",) and self.allow == ("*",) and not self.deny:
            return catalog
        return catalog.filtered(self.visible)


@dataclass(frozen=True)
class SpawnPlan:
    """Everything one spawn sends to its model, with the token accounting."""

    task: str
    task_id: str
    agent: str
    mode: Literal["full", "search"]
    full_tokens: int
    """Tokens of every visible tool definition, as full mode would send them."""
    prompt_tokens: int
    """Tokens actually sent: the prompt section plus `tools`."""
    directory_level: str
    reason: str
    prompt: str
    """The tools section of the system prompt (empty in full mode)."""
    tools: list[dict[str, Any]] = field(hash=False)
    """Definitions sent (`name`, `description`, `input_schema`): every visible tool, or meta-tools + pinned."""
    pinned: list[str]
    visible_tools: int
    catalog_version: str
    fingerprint: str

    @property
    def tokens_saved(self) -> int:
        return max(0, self.full_tokens - self.prompt_tokens)

    def to_json(self, *, tools: bool = True) -> dict[str, Any]:
        """JSON-ready; `tools=False` lists only the tool names (what a launcher needs, without schemas)."""
        data = asdict(self)
        data["tokens_saved"] = self.tokens_saved
        if not tools:
            data["tools"] = [tool.get("name") for tool in self.tools]
        return data


class SpawnPlanner:
    """Plans spawns over catalogs for one configuration; the one place a spawn's tools are decided.

    Args:
        settings: agent profiles and `mcp.tool_search`.
        telemetry: where each planned spawn is counted (default: OpenTelemetry's global providers).

    Keeps the token counts per tool and the last PLAN_CACHE_SIZE plans, so planning an unchanged
    catalog costs microseconds. Thread-safe.
    """

    def __init__(self, settings: Settings, *, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self._counters: dict[str, TokenCounter] = {}
        self._listings: dict[str, Listings] = {}
        self._plans: dict[tuple[str, str], ToolPlan] = {}
        self._lock = threading.Lock()

    def counter(self, encoding: str) -> TokenCounter:
        """The token counter for `encoding`, shared by every plan of this planner."""
        with self._lock:
            counter = self._counters.get(encoding)
            if counter is None:
                counter = self._counters[encoding] = TokenCounter(encoding)
            return counter

    def plan_tools(self, catalog: ToolCatalog, settings: ToolSearchSettings) -> ToolPlan:
        """`plan_tools` for this catalog version and settings, from the cache when planned before."""
        key = (catalog.version, settings.model_dump_json())
        cached = self._plans.get(key)
        if cached is None:
            encoding = settings.tokenizer
            with self._lock:
                listings = self._listings.setdefault(encoding, Listings(encoding))
            cached = plan_tools(catalog, settings, self.counter(encoding), listings)
            with self._lock:
                if len(self._plans) >= PLAN_CACHE_SIZE:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[key] = cached
        return cached.copy()

    def plan(
        self,
        task: str,
        agent: str,
        catalog: ToolCatalog,
        *,
        recent_tools: Sequence[str] = (),
        task_id: str | None = None,
        record: bool = True,
        client: ClientKind | None = None,
    ) -> SpawnPlan:
        """Plan one spawn of `agent` for `task` over `catalog` (counts one spawn in telemetry when `record`);
        `client` is the kind the agent's MCP handshake announced, whose tool limit then applies too.

        Raises:
            ConfigError: `agent` names no profile.
            TokenizerError: the tokenizer setting cannot be loaded.
        """
        profile = self.settings.agent(agent)
        visible = ProfileFilter.from_profile(profile).apply(catalog)
        recent = _current_names(visible, recent_tools)[:RECENT_TOOLS_LIMIT]
        search_settings = effective_tool_search(self.settings.mcp.tool_search, profile, recent, client)
        with self.telemetry.span("orchestrator.spawn", agent=agent) as span:
            tool_plan = self.plan_tools(visible, search_settings)
            span.set_attribute("mode", tool_plan.mode)
        plan = SpawnPlan(
            task=task,
            task_id=task_id or task_key(task),
            agent=agent,
            mode=tool_plan.mode,
            full_tokens=tool_plan.full_tokens,
            prompt_tokens=tool_plan.prompt_tokens,
            directory_level=tool_plan.directory_level,
            reason=tool_plan.reason,
            prompt=tool_plan.prompt,
            tools=tool_plan.tools,
            pinned=tool_plan.pinned,
            visible_tools=len(visible),
            catalog_version=visible.version,
            fingerprint=fingerprint(tool_plan.prompt, tool_plan.tools),
        )
        if record:
            self.telemetry.record_spawn(plan.mode, agent, plan.prompt_tokens, plan.tokens_saved)
        return plan


def effective_tool_search(
    base: ToolSearchSettings,
    profile: AgentProfile,
    recent_tools: Sequence[str] = (),
    client: ClientKind | None = None,
) -> ToolSearchSettings:
    """`mcp.tool_search` with the profile's overrides, its pins and the task's recent tools pinned, and
    the tool-count limit of the profile's client (`_clients`) where neither sets `max_tools`; a `client`
    announced by the agent's handshake lowers it to that client's limit."""
    extra = [*profile.pinned, *(name for name in recent_tools if name not in profile.pinned)]
    settings = profile.tool_search.apply(base, extra_pinned=extra)
    if settings.max_tools is None:
        limit = client_rules(client_kind(profile)).max_tools
        if limit is not None:
            settings = settings.model_copy(update={"max_tools": limit})
    if client is not None:
        limit = client_rules(client).max_tools
        if limit is not None and (settings.max_tools is None or limit < settings.max_tools):
            settings = settings.model_copy(update={"max_tools": limit})
    return settings


def fingerprint(prompt: str, tools: Sequence[dict[str, Any]]) -> str:
    """sha256 of the exact prompt bytes and the tools as compact JSON (what a provider cache keys on)."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(compact_json(list(tools)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def task_key(task: str) -> str:
    """A stable id for a task given only its text: later spawns of the same task share its history."""
    return hashlib.sha256(task.encode("utf-8", "surrogatepass")).hexdigest()[:TASK_KEY_LENGTH]


def _current_names(catalog: ToolCatalog, names: Iterable[str]) -> list[str]:
    """Names as the catalog calls them now (an old name of a since-collapsed duplicate resolves), visible only."""
    current: dict[str, None] = {}
    for name in names:
        entry = catalog.lookup(name)
        if entry is not None:
            current.setdefault(entry.name)
    return list(current)
