"""Per-spawn plans: what one short-lived agent sees, decided from the catalog, its profile and its task.

`plan_spawn(task, agent, settings=..., catalog=...)` is the one place a spawn's tools are decided:
the profile filters the catalog (servers, allow and deny globs over qualified names), the profile's
pins and the task's recently called tools are pinned, and `plan_tools` picks full or search mode.
The result carries a fingerprint of the exact bytes the model will see: the same catalog, profile and
task history give the same prompt and tools byte for byte, so provider prompt caches keep hitting.
Pure apart from `TaskHistory` (a small JSON file per task) and one telemetry event per planned spawn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import platformdirs

from . import _telemetry as telemetry
from ._config import AgentProfile, Settings, ToolSearchSettings
from ._meta_tools import CALL_TOOL, CALL_TOOL_DEFINITION, META_TOOL_NAMES
from .protocols.mcp._catalog import ToolCatalog, ToolEntry
from .protocols.mcp._tokens import compact_json, count_definition_tokens
from .protocols.mcp._cache import atomic_write_text
from .protocols.mcp._tool_search import matches_any, plan_tools

__all__ = [
    "RECENT_TOOLS_LIMIT",
    "ProfileFilter",
    "SpawnPlan",
    "TaskHistory",
    "effective_tool_search",
    "fingerprint",
    "plan_spawn",
    "task_key",
    "task_history_dir",
]

RECENT_TOOLS_LIMIT = 8
# Recently called tools pinned for a task's later spawns. Pins cost full schemas in every prompt; a few
# cover a retried or continued step without undoing what search mode saves.
TASK_KEY_LENGTH = 16
# Hex digits of sha256(task text) used as the task id when the caller gives none (64 bits).


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

    def visible(self, entry: ToolEntry) -> bool:
        """Offered by an allowed server, matched by `allow`, not matched by `deny` (deny wins)."""
        return (
            any(self.allows_server(server) for server in entry.servers)
            and matches_any(entry.name, self.allow)
            and not matches_any(entry.name, self.deny)
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
    """Definitions sent (`name`, `description`, `input_schema`): every visible tool, or pinned + meta-tools."""
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


def plan_spawn(
    task: str,
    agent: str,
    *,
    settings: Settings,
    catalog: ToolCatalog,
    recent_tools: Sequence[str] = (),
    task_id: str | None = None,
    record: bool = True,
) -> SpawnPlan:
    """Plan one spawn of `agent` for `task` over `catalog` (counts one spawn in telemetry when `record`).

    Raises:
        ConfigError: `agent` names no profile.
        TokenizerError: the tokenizer setting cannot be loaded.
    """
    profile = settings.agent(agent)
    rules = ProfileFilter.from_profile(profile)
    visible = rules.apply(catalog)
    recent = _current_names(visible, recent_tools)[:RECENT_TOOLS_LIMIT]
    search_settings = effective_tool_search(settings.mcp.tool_search, profile, recent)
    with telemetry.span("orchestrator.spawn", agent=agent) as span:
        tool_plan = plan_tools(visible, search_settings)
        span.set_attribute("mode", tool_plan.mode)
        prompt, tools, prompt_tokens = tool_plan.prompt, list(tool_plan.tools), tool_plan.prompt_tokens
        if tool_plan.mode == "search" and not any(tool.get("name") == CALL_TOOL for tool in tools):
            # The directory header already tells the agent to run found tools through call_tool.
            prompt_tokens += count_definition_tokens(CALL_TOOL_DEFINITION, search_settings.tokenizer)
            after = max((i + 1 for i, tool in enumerate(tools) if tool.get("name") in META_TOOL_NAMES), default=0)
            tools.insert(after, dict(CALL_TOOL_DEFINITION))  # meta-tools first, then the pinned tools
    plan = SpawnPlan(
        task=task,
        task_id=task_id or task_key(task),
        agent=agent,
        mode=tool_plan.mode,
        full_tokens=tool_plan.full_tokens,
        prompt_tokens=prompt_tokens,
        directory_level=tool_plan.directory_level,
        reason=tool_plan.reason,
        prompt=prompt,
        tools=tools,
        pinned=list(tool_plan.pinned),
        visible_tools=len(visible),
        catalog_version=visible.version,
        fingerprint=fingerprint(prompt, tools),
    )
    if record:
        telemetry.record_spawn(plan.mode, agent, plan.prompt_tokens, plan.tokens_saved)
    return plan


def effective_tool_search(
    base: ToolSearchSettings, profile: AgentProfile, recent_tools: Sequence[str] = ()
) -> ToolSearchSettings:
    """`mcp.tool_search` with the profile's overrides, its pins and the task's recent tools pinned."""
    extra = [*profile.pinned, *(name for name in recent_tools if name not in profile.pinned)]
    return profile.tool_search.apply(base, extra_pinned=extra)


def fingerprint(prompt: str, tools: Sequence[dict[str, Any]]) -> str:
    """sha256 of the exact prompt bytes and the tools as compact JSON (what a provider cache keys on)."""
    digest = hashlib.sha256(prompt.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(compact_json(list(tools)).encode("utf-8"))
    return digest.hexdigest()


def task_key(task: str) -> str:
    """A stable id for a task given only its text: later spawns of the same task share its history."""
    return hashlib.sha256(task.encode("utf-8")).hexdigest()[:TASK_KEY_LENGTH]


def task_history_dir(settings: Settings) -> Path:
    """Where task histories live: beside the tool-list cache, else under the user cache dir."""
    if settings.mcp.cache_dir is not None:
        return Path(settings.mcp.cache_dir).expanduser() / "tasks"
    return Path(platformdirs.user_cache_dir("orchestrator")) / "tasks"


class TaskHistory:
    """The tools each task called, most recent first, so its later spawns get them pinned.

    Kept in memory and, when `folder` is given, in one small JSON file per task, so a spawn in another
    process (the cold path) sees what earlier spawns of the task called. Last writer wins.
    """

    def __init__(self, folder: Path | None = None, *, limit: int = RECENT_TOOLS_LIMIT) -> None:
        self._folder = folder
        self._limit = limit
        self._memory: dict[str, list[str]] = {}

    def recent(self, task_id: str) -> list[str]:
        """Most recently called first."""
        if task_id in self._memory:
            return list(self._memory[task_id])
        names = self._read(task_id)
        self._memory[task_id] = names
        return list(names)

    def record(self, task_id: str, called: Iterable[str]) -> list[str]:
        """Add tools called (oldest first, as `MetaStats.called` lists them); returns the new history."""
        names = list(self.recent(task_id))
        for name in called:
            if name in names:
                names.remove(name)
            names.insert(0, name)
        names = names[: self._limit]
        self._memory[task_id] = names
        self._write(task_id, names)
        return list(names)

    def _path(self, task_id: str) -> Path | None:
        if self._folder is None:
            return None
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in task_id)[:100] or "_"
        return self._folder / f"{safe}.json"

    def _read(self, task_id: str) -> list[str]:
        path = self._path(task_id)
        if path is None:
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # no history yet, or a damaged file: start afresh
            return []
        names = data.get("recent") if isinstance(data, dict) else None
        return [name for name in names if isinstance(name, str)][: self._limit] if isinstance(names, list) else []

    def _write(self, task_id: str, names: list[str]) -> None:
        path = self._path(task_id)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"task_id": task_id, "recent": names}))
        except OSError:  # boundary: history is an optimisation; a read-only cache must not fail a spawn
            pass


def _current_names(catalog: ToolCatalog, names: Iterable[str]) -> list[str]:
    """Names as the catalog calls them now (an old name of a since-collapsed duplicate resolves), visible only."""
    current: dict[str, None] = {}
    for name in names:
        entry = catalog.lookup(name)
        if entry is not None:
            current.setdefault(entry.name)
    return list(current)

