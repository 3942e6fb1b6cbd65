"""What each kind of agent client does to the gateway's tools before its model sees them.

An agent CLI does not hand the gateway's tool names to its model as they are: Claude Code and Codex both
send `mcp__<server>__<tool>`, where `<server>` is the name the MCP config gives the gateway
(`gateway.server_name`). The model API then holds the whole name to `^[a-zA-Z0-9_-]{1,64}$`, so the
gateway must list names that still fit after the client's prefix (`name_budget`), and a profile whose
client talks to OpenAI must stay within OpenAI's tool count. Pure data and small functions, no heavy
imports (the config module uses them).

    kind          prefix before each tool name     model API    most tools per request
    claude-code   mcp__<server_name>__             Anthropic    no documented limit
    codex         mcp__<server_name>__             OpenAI       128, less Codex's own tools
    api           (none: the loop names tools)     either       (set tool_search.max_tools)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from ._config import AgentProfile

__all__ = [
    "CLIENT_KINDS",
    "HANDSHAKE_NAMES",
    "MODEL_NAME_LIMIT",
    "OPENAI_TOOL_LIMIT",
    "ClientKind",
    "ClientRules",
    "client_from_handshake",
    "client_kind",
    "client_rules",
    "name_budget",
    "session_rules",
    "tool_prefix",
]

ClientKind = Literal["claude-code", "codex", "api"]
CLIENT_KINDS: tuple[str, ...] = get_args(ClientKind)

MODEL_NAME_LIMIT = 64
"""Anthropic `tools[].name` and OpenAI `tools[].function.name`: at most 64 of [a-zA-Z0-9_-]."""
OPENAI_TOOL_LIMIT = 128
"""OpenAI rejects a request with more: "Invalid 'tools': array too long. Expected an array with maximum
length 128" (code array_above_max_length)."""
CODEX_OWN_TOOLS = 28
"""Room left in OpenAI's 128 for the tools Codex adds itself: Codex 0.171 `exec`, with one MCP server
configured, sent 16 tools of its own to a loopback model endpoint: 10 functions (exec_command,
write_stdin, three MCP resource readers, view_image, request_user_input, three goal tools), a namespace
of 5 agent tools (counted one by one, as OpenAI may) and web_search. 28 leaves room for later versions."""
MCP_PREFIX = "mcp__{server}__"
"""Claude Code (`mcp__<server>__<tool>`, docs: "MCP tools follow the naming pattern mcp__<serverName>__<toolName>")
and Codex (codex-rs/codex-mcp/src/tools.rs: namespace `mcp__<server>` + `__` + tool, hashed past 64)."""

_COMMAND_KINDS: dict[str, ClientKind] = {"claude": "claude-code", "claude-code": "claude-code", "codex": "codex"}
"""Program names (argv[0]'s base name, without `.exe`, `.js`, `.cmd`) recognised when a profile does not
say `client:`; a wrapper script or `npx` is recognised by its handshake instead (`client_from_handshake`)."""
HANDSHAKE_NAMES: dict[str, ClientKind] = {"claude-code": "claude-code", "codex-mcp-client": "codex", "codex": "codex"}
"""`clientInfo.name` each CLI sends in MCP `initialize` (Claude Code 2.1: `claude-code`; Codex 0.171:
`codex-mcp-client`), however it was started: the gateway applies that client's rules to the session."""


@dataclass(frozen=True)
class ClientRules:
    """One client kind's naming rule and limits."""

    kind: ClientKind
    prefix: str
    """Put before every gateway tool name by the client, `{server}` standing for `gateway.server_name`."""
    max_tools: int | None
    """Most gateway tools the client can pass to its model in one request (None: no known limit)."""
    reason: str
    """Where `max_tools` comes from, quoted in a plan's reason when it decides the mode."""
    provider: Literal["anthropic", "openai"] | None
    """The model API the client sends tool definitions to (their schemas are repaired for it)."""


_RULES: dict[ClientKind, ClientRules] = {
    "claude-code": ClientRules(
        "claude-code", MCP_PREFIX, None, "the Anthropic API documents no tool-count limit", "anthropic"
    ),
    "codex": ClientRules(
        "codex",
        MCP_PREFIX,
        OPENAI_TOOL_LIMIT - CODEX_OWN_TOOLS,
        f"OpenAI takes at most {OPENAI_TOOL_LIMIT} tools per request and Codex adds up to {CODEX_OWN_TOOLS} of its own",
        "openai",
    ),
    "api": ClientRules("api", "", None, "an API loop sends the names it is given", None),
}


def client_rules(kind: ClientKind) -> ClientRules:
    return _RULES[kind]


def client_kind(profile: AgentProfile) -> ClientKind:
    """The profile's `client`, else the kind its command starts (`claude` -> claude-code, `codex` -> codex),
    else `api` (an in-process loop, or an unknown CLI: set `client` or `tool_prefix` for it)."""
    if profile.client is not None:
        return profile.client
    if profile.command:
        program = os.path.basename(profile.command[0])
        stem, extension = os.path.splitext(program)
        return _COMMAND_KINDS.get(program) or _COMMAND_KINDS.get(
            stem if extension in (".exe", ".js", ".cmd") else program, "api"
        )
    return "api"


def client_from_handshake(name: object) -> ClientKind | None:
    """The client kind a `clientInfo.name` announces (None: a client with no known naming rule)."""
    return HANDSHAKE_NAMES.get(name.strip().lower()) if isinstance(name, str) else None


def session_rules(
    profile: AgentProfile, server_name: str, handshake: ClientKind | None
) -> tuple[str, int | None, Literal["anthropic", "openai"] | None]:
    """(prefix, tool limit, provider) for a profile's session whose client announced `handshake`: the stricter
    of what the profile says and what the client does, since the client prefixes names whatever the profile
    guessed. Without a handshake kind, the profile's own."""
    own = _RULES[client_kind(profile)]
    prefix = tool_prefix(profile, server_name)
    limit, provider = own.max_tools, own.provider
    if handshake is not None:
        rules = _RULES[handshake]
        theirs = rules.prefix.replace("{server}", server_name)
        prefix = theirs if len(theirs) > len(prefix) else prefix
        if rules.max_tools is not None:
            limit = rules.max_tools if limit is None else min(limit, rules.max_tools)
        provider = rules.provider or provider
    return prefix, limit, provider


def tool_prefix(profile: AgentProfile, server_name: str) -> str:
    """What the profile's client puts before each gateway tool name (`tool_prefix` wins over the kind)."""
    template = profile.tool_prefix if profile.tool_prefix is not None else _RULES[client_kind(profile)].prefix
    return template.replace("{server}", server_name)


def name_budget(prefix: str) -> int:
    """Longest tool name the gateway may list for a client with this prefix."""
    return MODEL_NAME_LIMIT - len(prefix)
