"""The gateway's models, defined beside their services in gateway/upstream/models.py."""

from __future__ import annotations

from gateway.upstream.models import McpFeature, McpFeatureRead, McpServer, McpTool

__all__ = ["McpFeature", "McpFeatureRead", "McpServer", "McpTool"]
