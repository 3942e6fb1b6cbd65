"""The MCP layer (internal; import from `orchestrator`).

_manager, _connection, _transports   live connections to the configured servers
_normalization, _catalog             unique, stable, provider-safe names; the catalog value
_ranking, _search, _embedding        BM25 and hybrid ranking, tool_search and expand_tools
_tokens, _directory                  token counts; the compact directory of search mode
_cache, _evaluation                  the warm-start tool-list cache; ranking evaluation
"""
