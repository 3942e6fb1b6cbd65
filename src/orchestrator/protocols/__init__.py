"""Protocol integrations (internal): MCP lives in `orchestrator.protocols.mcp`. Import from `orchestrator`."""
