"""Routes of the tools API, mounted under /api/v1/ by config/urls.py.

A function, not a module-level `urlpatterns`: the views need the runtime, which
only the composition root (config) may hand them.
"""

from __future__ import annotations

from collections.abc import Callable

from django.urls import URLPattern, path

from tools_app.api.calls import ToolCallsView
from tools_app.api.views import (
    ApprovalDetailView,
    InvocationDetailView,
    InvocationListView,
    ToolCatalogView,
    ToolDetailView,
    ToolExecView,
    ToolRuntime,
)


def urlpatterns_for(runtime_provider: Callable[[], ToolRuntime]) -> list[URLPattern]:
    return [
        path("tools", ToolCatalogView.as_view(runtime_provider=runtime_provider), name="tool-list"),
        # before tools/<tool_id>, which would otherwise take "exec" or "calls" for a tool id
        path("tools/exec", ToolExecView.as_view(runtime_provider=runtime_provider), name="tool-exec"),
        path("tools/calls", ToolCallsView.as_view(runtime_provider=runtime_provider), name="tool-calls"),
        path("tools/<str:tool_id>", ToolDetailView.as_view(runtime_provider=runtime_provider), name="tool-detail"),
        path("invocations", InvocationListView.as_view(), name="invocation-list"),
        path("invocations/<str:tool_call_id>", InvocationDetailView.as_view(), name="invocation-detail"),
        path("approvals/<str:approval_id>", ApprovalDetailView.as_view(), name="approval-detail"),
    ]
