"""One error tree for the whole project.

    OrchestratorError                 every error this project raises on purpose
    ├── ConfigError                   bernstein.yaml or environment is wrong (CLI exit 2)
    ├── ServerError                   an MCP server is unknown, not ready or failed
    ├── ToolNotFoundError             a tool name that is not in the catalog
    ├── ToolCallError                 a call that did not produce a result
    │   ├── ToolCallTimeout           the server did not answer within call_timeout_s
    │   ├── ToolExecutionError        the server ran the tool and it reported an error
    │   └── TransportError            the connection broke (process died, socket closed)
    ├── SearchQueryError              a tool_search query that cannot be run (empty, too long; CLI exit 2)
    ├── ExpandError                   expand_tools refused (too many names; CLI exit 2)
    ├── CatalogError                  a catalog snapshot or eval query file cannot be read (CLI exit 2)
    ├── TokenizerError                the tokenizer encoding cannot be loaded
    └── SemanticUnavailable           hybrid ranking cannot run; search stays lexical

Every message names the thing that is wrong and where (config key path, server, tool).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CatalogError",
    "ConfigError",
    "ExpandError",
    "OrchestratorError",
    "SearchQueryError",
    "SemanticUnavailable",
    "ServerError",
    "TokenizerError",
    "ToolCallError",
    "ToolCallTimeout",
    "ToolExecutionError",
    "ToolNotFoundError",
    "TransportError",
]


class OrchestratorError(Exception):
    """Base of every error the project raises on purpose."""


class ConfigError(OrchestratorError):
    """The configuration is invalid: the message names the file, key path and line when known."""


class ServerError(OrchestratorError):
    """An MCP server is unknown, not ready, or failed."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"server {server!r}: {message}")
        self.server = server


class ToolNotFoundError(OrchestratorError, KeyError):
    """A tool name that the catalog does not hold; `suggestions` are the closest known names."""

    def __init__(self, name: str, suggestions: list[str] | tuple[str, ...] = ()) -> None:
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"unknown tool {name!r}{hint}")
        self.name = name
        self.suggestions = list(suggestions)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class ToolCallError(OrchestratorError):
    """A tool call that did not produce a usable result."""

    def __init__(self, server: str, tool: str, message: str) -> None:
        super().__init__(f"tool {tool!r} on server {server!r}: {message}")
        self.server = server
        self.tool = tool


class ToolCallTimeout(ToolCallError):
    """The server did not answer within its `call_timeout_s`."""


class ToolExecutionError(ToolCallError):
    """The server ran the tool and reported an error (`isError: true`); the result is on `.result`."""

    def __init__(self, server: str, tool: str, message: str, result: Any = None) -> None:
        super().__init__(server, tool, message)
        self.result = result
        """The `mcp.types.CallToolResult` with `is_error=True` (synthesised for a JSON-RPC error)."""


class TransportError(ToolCallError):
    """The connection to the server broke during the call."""


class SearchQueryError(OrchestratorError, ValueError):
    """A search query that cannot be run: empty or longer than the limit."""


class ExpandError(OrchestratorError, ValueError):
    """An expand_tools request that is refused, for example over the configured maximum."""


class CatalogError(OrchestratorError, ValueError):
    """A catalog snapshot or eval query file that cannot be read: the message names the file and the problem."""


class TokenizerError(OrchestratorError):
    """The configured tokenizer encoding cannot be loaded."""


class SemanticUnavailable(OrchestratorError):
    """The embedding model cannot serve hybrid ranking; tool search falls back to lexical ranking.

    `kind` is a short code for the search metric: `missing_extra`, `hash_mismatch`, `load_failed`,
    `embed_failed` or `slow_query`; `reason` is the one-line explanation that is logged once.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"semantic ranking unavailable ({kind}): {reason}")
        self.kind = kind
        self.reason = reason
