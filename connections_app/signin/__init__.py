"""MCP clients that sign in: Toolgate as the OAuth 2.1 authorization server of its own /mcp (docs/api.md)."""
