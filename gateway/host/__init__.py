"""Toolgate's MCP host: the one process that runs stdio MCP servers (`manage.py mcp_host`).

Web and Celery workers never fork tool servers. The host starts each registered
stdio server as a child (scrubbed environment, resource limits, bubblewrap when
installed), holds it through the SDK's stdio client, and serves it to the rest of
Toolgate as a streamable-HTTP endpoint on loopback, so pooling, pinning,
discovery and the pipeline are the same code path as for HTTP upstreams.
"""
