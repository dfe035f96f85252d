"""Routes of the tenant web UI, mounted at the site root by config/urls.py."""

from django.contrib.auth.views import LogoutView
from django.urls import path

from portal import calls, delegations, oauth, rules, toolsets, views

app_name = "web"

urlpatterns = [
    path("accounts/login/", views.TenantLoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),  # POST only (Django 5)
    path("", views.home, name="home"),
    path("tenant/switch/", views.switch_tenant, name="tenant-switch"),
    path("connections/", views.connections, name="connection-list"),
    path("connections/new/", views.connection_new, name="connection-new"),
    path("connections/<uuid:connection_id>/", views.connection_detail, name="connection-detail"),
    path("connections/<uuid:connection_id>/revoke/", views.connection_revoke_confirm, name="connection-revoke"),
    path("connections/oauth/<slug:provider>/start", oauth.oauth_start, name="oauth-start"),
    path("connections/oauth/callback", oauth.oauth_callback, name="oauth-callback"),
    path("grants/", views.grants, name="grant-list"),
    path("grants/new/", views.grant_new, name="grant-new"),
    path("grants/<uuid:grant_id>/revoke/", views.grant_revoke_confirm, name="grant-revoke"),
    path("service-accounts/", views.service_accounts, name="service-account-list"),
    path("service-accounts/new/", views.service_account_new, name="service-account-new"),
    path(
        "service-accounts/<uuid:account_id>/revoke/",
        views.service_account_revoke_confirm,
        name="service-account-revoke",
    ),
    path(
        "service-accounts/<uuid:account_id>/redirect-uris/",
        delegations.service_account_redirect_uris,
        name="service-account-redirect-uris",
    ),
    path("delegations/", delegations.delegations, name="delegation-list"),
    path("delegations/new/", delegations.delegation_new, name="delegation-new"),
    path("delegations/consent", delegations.consent, name="delegation-consent"),
    path("delegations/<uuid:delegation_id>/revoke/", delegations.delegation_revoke_confirm, name="delegation-revoke"),
    path(
        "delegations/<uuid:delegation_id>/connections/",
        delegations.delegation_connections,
        name="delegation-connections",
    ),
    path(
        "delegations/signed-in/<uuid:grant_id>/revoke/",
        delegations.signin_grant_revoke_confirm,
        name="signin-grant-revoke",
    ),
    path("approvals/", views.approvals, name="approval-list"),
    path("approvals/<uuid:approval_id>/", views.approval_detail, name="approval-detail"),
    path("approvals/webhook/", views.webhook, name="webhook"),
    # Where an MCP client sends a person whose call needs them (gateway/elicitation.py PAGE_OF_KIND).
    path("calls/<uuid:approval_id>/", calls.call_status, name="call-status"),
    path("calls/<uuid:approval_id>/confirm/", calls.call_confirm, name="call-confirm"),
    path("calls/connect/<uuid:ask_id>/", calls.call_connect, name="call-connect"),
    path("calls/connect/<uuid:ask_id>/oauth/", calls.call_connect_oauth, name="call-connect-oauth"),
    path("toolsets/", toolsets.toolsets, name="toolset-list"),
    path("toolsets/new/", toolsets.toolset_edit, name="toolset-new"),
    path("toolsets/<int:toolset_id>/", toolsets.toolset_edit, name="toolset-edit"),
    path("toolsets/<int:toolset_id>/delete/", toolsets.toolset_delete_confirm, name="toolset-delete"),
    path("rules/", rules.rules, name="rule-list"),
    path("activity/", views.activity, name="activity"),
    path("changes/", views.changes, name="change-list"),
]
