"""The MCP layer (internal; import from `orchestrator`).

_manager, _connection, _session      live connections: the manager, each server's supervisor, one session
_transports                          how a session reaches its server (stdio, HTTP, SSE) and watches it
_status                              what a connection reports: state, circuit, dropped tools, status
_schemas                             what a usable tool schema is (depth, size, `$ref` cycles)
_normalization, _catalog             unique, stable, provider-safe names; the catalog value
_cache                               the warm-start tool-list cache
_pins, _poisoning(_rules)            pinned tool definitions, held-back tools; the tool-text detector

Ranking lives in `orchestrator.search`; token counts and the directory next to planning.
"""
