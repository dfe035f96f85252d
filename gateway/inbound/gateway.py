"""The MCP endpoints as routed: `/mcp` and `/mcp/t/<toolset>`, each also in `?mode=search`.

`McpView` speaks the protocol for one caller's backend; this subclass picks
the backend. A toolset narrows it (`CallerBackend(tool_scope=...)`: the runner
refuses every tool outside the set as unknown), and search mode swaps the
catalog for the two meta-tools (search_mode.py). Same authentication, Origin
check, body limits and fairness throttle as `/mcp`, by inheritance: a search is
a tool call, whose fairness share the runner spends.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.request import Request

from gateway.inbound.protocol import Backend
from gateway.inbound.search_mode import SEARCH_TOOL, SearchModeBackend
from gateway.inbound.views import CallerBackend, McpView
from policies_app.authentication import request_caller, request_subject_token
from tools_app.toolsets import UNKNOWN_TOOLSET, toolset_scope

SEARCH_MODE = "search"


class UnknownMode(exceptions.APIException):
    status_code = 400
    default_detail = "unknown mode: the only mode is `search` (?mode=search)"


@extend_schema(exclude=True)
class McpGatewayView(McpView):
    """`/mcp[/t/<toolset>][?mode=search]`: an unknown toolset (or another tenant's) is 404 on every message."""

    def backend_for(self, request: Request, **kwargs: Any) -> Backend:
        mode = request.query_params.get("mode")
        if mode is not None and mode != SEARCH_MODE:
            raise UnknownMode()
        caller = request_caller(request)
        scope = None
        toolset = kwargs.get("toolset")
        if toolset is not None:
            scope = toolset_scope(tenant_id=caller.tenant_id, name=toolset)
            if scope is None:
                raise exceptions.NotFound(UNKNOWN_TOOLSET)
        subject_token = request_subject_token(request)
        site_url = request.build_absolute_uri("/")

        def backend(tool_scope: frozenset[str] | None) -> CallerBackend:
            return CallerBackend(
                runtime=self.runtime(),
                caller=caller,
                subject_token=subject_token,
                tool_scope=tool_scope,
                site_url=site_url,
            )

        inner = backend(scope)
        if mode == SEARCH_MODE:
            # The search tool is part of every search-mode endpoint; on a toolset it ranks the toolset's tools.
            search = inner if scope is None else backend(scope | {SEARCH_TOOL})
            return SearchModeBackend(inner=inner, search=search)
        return inner
