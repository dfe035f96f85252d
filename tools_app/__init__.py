"""The catalog: what can run, and the record of what ran.

Tool modules and the code registry, one Tool row per tool id whatever its
source (code, or an upstream MCP server the gateway registered), toolsets,
search, the audit log, and the tools REST API (catalog, exec, calls,
invocations). Tool sources above it (the MCP gateway) write their rows through
its services and answer its questions through `sources`.
"""
