"""The MCP gateway: Toolgate speaking MCP on both sides of the catalog.

`inbound` is the `/mcp` server agents call; `upstream` holds the registered MCP
servers whose tools, resources and prompts the catalog offers (discovery,
pinning, review, the tool source the runner binds); `host` is the stdio MCP host,
the separate process (`manage.py mcp_host`) that runs stdio servers as children.
`elicitation` is the door from a waiting call to the person it needs. The
catalog itself (tools, toolsets, search, audit, the REST API) is tools_app's;
the gateway reaches it only through tools_app's selectors and services.
"""
