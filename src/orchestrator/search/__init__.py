"""Tool search (internal; import from `orchestrator`): how a request becomes a ranked list of tools.

    _engine.py      ToolSearchEngine: exact names and `select:`, long requests, the hybrid blend, expand
    _lexical.py     the analyzer (words, stems, exact forms) and the BM25 index (rank-bm25's scoring)
    _embedding/     hybrid ranking: two local sentence models, tool vectors and their cache, the blend
    _evaluation.py  hit@k and MRR of a ranking over a query file (`orchestrator eval`)

Nothing here speaks MCP: the engine ranks a `ToolCatalog` (protocols/mcp/) and is CPU-bound and
synchronous; the gateway runs it off its event loop. Whether a spawn searches at all is decided in
`orchestrator._planning`.
"""
