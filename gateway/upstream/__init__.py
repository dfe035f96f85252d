"""Upstream MCP servers as governed tool sources.

Operators register streamable-HTTP MCP servers; discovery pins what each one
offers, operators approve definitions, and only approved, enabled definitions
are bound into the runner (`source.McpToolSource`). Nothing an upstream sends is
trusted: descriptions, schemas, errors and results are bounded, checked and
never logged whole.
"""
