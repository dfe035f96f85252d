"""Routes of MCP sign-in, mounted at the site root by config/urls.py (the well-known paths are fixed there)."""

from django.urls import path

from signin import views

urlpatterns = [
    path(
        ".well-known/oauth-protected-resource/mcp",
        views.protected_resource_metadata,
        name="signin-protected-resource",
    ),
    path(
        ".well-known/oauth-protected-resource/mcp/t/<str:toolset>",
        views.toolset_resource_metadata,
        name="signin-protected-resource-toolset",
    ),
    path(".well-known/oauth-authorization-server", views.authorization_server_metadata, name="signin-metadata"),
    path("oauth/authorize", views.authorize, name="signin-authorize"),
    path("oauth/token", views.token, name="signin-token"),
    path("oauth/register", views.register, name="signin-register"),
    path("oauth/revoke", views.revoke, name="signin-revoke"),
]
