"""The operators' approval screen: what is approved is shown, Approve / Deny post with a reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from policies_app.models import ApprovalRequest
from tests.factories import ConnectionFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval

pytestmark = pytest.mark.django_db

CANARY = "canary-admin-0c9d"
ARGS = {"owner": "octo", "repo": "hello", "title": "<b>bold</b>", "body": CANARY}


@pytest.fixture
def account():
    return service_account_with_key(TenantFactory(slug="acme"), name="agent")[0]


@pytest.fixture
def approval(account):
    connection = ConnectionFactory(tenant=account.tenant, label="Work GitHub")
    return pending_approval(account, ARGS, connection_id=str(connection.pk))


def _change(approval):
    return reverse("admin:policies_app_approvalrequest_change", args=[approval.pk])


def _decide(approval):
    return reverse("admin:policies_app_approvalrequest_decide", args=[approval.pk])


def test_the_detail_page_names_what_is_approved_and_offers_approve_and_deny(admin_client, approval):
    response = admin_client.get(_change(approval))

    html = response.content.decode()
    assert response.status_code == 200
    for shown in (
        "acme",
        "acme/agent",
        "github__create_issue",
        "external_side_effect",
        "medium",
        "Work GitHub (github)",
    ):
        assert shown in html
    assert CANARY in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert 'id="approve-button"' in html
    assert 'id="deny-button"' in html
    assert 'name="_save"' not in html
    title = response.context["title"]
    assert "github__create_issue" in str(response.context["original"])
    assert str(approval.pk) not in title


def test_approve_with_a_reason_records_who_when_why_and_erases_the_args(admin_client, admin_user, approval):
    response = admin_client.post(_decide(approval), {"decision": "approve", "reason": "looks right"}, follow=True)

    approval.refresh_from_db()
    assert response.status_code == 200
    assert (approval.status, approval.decided_by, approval.reason) == ("approved", admin_user, "looks right")
    assert approval.decided_at is not None
    assert approval.args_sealed is None
    assert LogEntry.objects.filter(object_id=str(approval.pk), change_message__contains="Approved").exists()
    assert CANARY not in response.content.decode()


def test_deny_from_the_detail_page(admin_client, approval):
    admin_client.post(_decide(approval), {"decision": "deny"})

    approval.refresh_from_db()
    assert (approval.status, approval.reason) == ("denied", "")


def test_a_decision_without_the_csrf_token_is_refused(admin_user, approval):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(_decide(approval), {"decision": "approve"})

    approval.refresh_from_db()
    assert response.status_code == 403
    assert approval.status == "pending"


def test_staff_who_may_only_view_cannot_decide(approval):
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_approvalrequest"))
    client = Client()
    client.force_login(viewer)

    page = client.get(_change(approval))
    response = client.post(_decide(approval), {"decision": "approve"})

    approval.refresh_from_db()
    assert page.status_code == 200
    assert 'id="approve-button"' not in page.content.decode()
    assert response.status_code == 302
    assert approval.status == "pending"


@pytest.mark.parametrize("data", [{}, {"decision": "yes"}, {"decision": "approve", "reason": "r" * 501}])
def test_bad_input_decides_nothing(admin_client, approval, data):
    response = admin_client.post(_decide(approval), data, follow=True)

    approval.refresh_from_db()
    assert response.status_code == 200
    assert "Nothing was decided" in response.content.decode()
    assert approval.status == "pending"


def test_a_get_on_the_decide_url_is_refused(admin_client, approval):
    assert admin_client.get(_decide(approval)).status_code == 405


def test_an_expired_request_offers_no_buttons_and_cannot_be_decided(admin_client, approval):
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    page = admin_client.get(_change(approval))
    response = admin_client.post(_decide(approval), {"decision": "approve"}, follow=True)

    approval.refresh_from_db()
    assert 'id="approve-button"' not in page.content.decode()
    assert "no longer pending" in response.content.decode()
    assert approval.status == "pending"


def test_the_index_counts_pending_requests(admin_client, account, approval):
    pending_approval(account, ARGS, tool_call_id="call-2")

    html = admin_client.get(reverse("admin:index")).content.decode()

    assert "2 approval requests waiting for a decision" in html


def test_the_list_filters_by_status_shows_the_columns_and_never_the_args(admin_client, account, approval):
    expired = pending_approval(account, ARGS, tool_call_id="call-old")
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    url = reverse("admin:policies_app_approvalrequest_changelist")

    pending = admin_client.get(url, {"state": "pending"})
    old = admin_client.get(url, {"state": "expired"})
    by_expiry = admin_client.get(url, {"o": "5"})

    assert [row.pk for row in pending.context["cl"].result_list] == [approval.pk]
    assert [row.pk for row in old.context["cl"].result_list] == [expired.pk]
    assert by_expiry.status_code == 200
    html = pending.content.decode()
    for column in ("column-status_now", "column-expires_at", "column-decided_by_name"):
        assert column in html
    assert CANARY not in html + old.content.decode()
