"""MCP parts: the manager (connections), normalization (names), tool search (catalog, ranking, plan)."""
