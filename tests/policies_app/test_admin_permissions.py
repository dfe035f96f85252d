"""What admin lets even a superuser do with rows that services write (admin_display.WrittenElsewhereAdmin)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from changes_app.models import Change
from connections_app.models import Connection, ConnectionEvent, ExecutionGrant
from gateway.upstream.models import McpTool
from policies_app.models import ApprovalRequest, Delegation
from signin.models import SigninClient
from tools_app.models import Tool, ToolInvocation

pytestmark = pytest.mark.django_db

# model: (add, change at the model level, delete) for a superuser
EXPECTED = {
    Change: (False, False, False),
    ConnectionEvent: (False, False, False),
    ToolInvocation: (False, False, False),
    Connection: (False, True, False),  # the change permission is the revoke action's
    ExecutionGrant: (False, True, False),
    ApprovalRequest: (False, True, False),
    Delegation: (False, True, False),
    Tool: (False, True, False),
    McpTool: (False, True, False),
    SigninClient: (False, True, True),
}


@pytest.mark.parametrize("model", list(EXPECTED), ids=lambda model: model.__name__)
def test_a_superuser_may_only_what_the_admin_gives_back(model):
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    model_admin = admin.site._registry[model]

    granted = (
        model_admin.has_add_permission(request),
        model_admin.has_change_permission(request),
        model_admin.has_delete_permission(request),
    )

    assert granted == EXPECTED[model]


def test_a_permission_given_back_still_needs_the_users_model_permission():
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.create_user("staff", "staff@example.com", "pw", is_staff=True)

    assert admin.site._registry[SigninClient].has_delete_permission(request) is False
    assert admin.site._registry[Tool].has_change_permission(request) is False
