"""Routes of the connections and grants API, mounted under /api/v1/ by config/urls.py."""

from __future__ import annotations

from django.urls import path

from connections_app.api.views import (
    ConnectionDetailView,
    ConnectionListView,
    ConnectionRevokeView,
    DelegationTokenView,
    GrantDetailView,
    GrantListView,
    GrantRevokeView,
)

urlpatterns = [
    path("connections", ConnectionListView.as_view(), name="connection-list"),
    path("connections/<str:connection_id>", ConnectionDetailView.as_view(), name="connection-detail"),
    path("connections/<str:connection_id>/revoke", ConnectionRevokeView.as_view(), name="connection-revoke"),
    path("grants", GrantListView.as_view(), name="grant-list"),
    path("delegations/token", DelegationTokenView.as_view(), name="delegation-token"),
    path("grants/<str:grant_id>", GrantDetailView.as_view(), name="grant-detail"),
    path("grants/<str:grant_id>/revoke", GrantRevokeView.as_view(), name="grant-revoke"),
]
