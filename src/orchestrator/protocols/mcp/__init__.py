"""The MCP layer (internal; import from `orchestrator`).

_manager, _connection, _transports   live connections to the configured servers
_status                              what a connection reports: state, circuit, dropped tools, status
_schemas                             what a usable tool schema is (depth, size, `$ref` cycles)
_normalization, _catalog             unique, stable, provider-safe names; the catalog value
_cache                               the warm-start tool-list cache

Ranking lives in `orchestrator.search`; token counts and the directory next to planning.
"""
