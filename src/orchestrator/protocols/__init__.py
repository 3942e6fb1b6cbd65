"""Protocol integrations; MCP lives in `orchestrator.protocols.mcp`."""
