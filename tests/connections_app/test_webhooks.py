"""Approval webhooks against a loopback receiver: signed, retried on 5xx, never carrying args or secrets."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import logging
import tracemalloc

import pytest
from django.urls import reverse

from connections_app.models import TenantWebhook, WebhookDelivery
from connections_app.tasks import deliver_webhook
from connections_app.webhooks import webhook_set
from core.errors import AppError
from policies_app.models import ApprovalRequest, TenantMembership
from policies_app.services import approval_decide, delegation_create
from tests.factories import ConnectionFactory, GrantFactory, MembershipFactory, UserFactory
from tests.support.api import api_client
from tests.support.loopback import LoopbackServer, json_answer
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

CANARY = "canary-webhook-a41f"
ISSUE = {"owner": "octo", "repo": "hello", "title": "Bug", "body": CANARY}


@pytest.fixture
def receiver(settings):
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def asked(github, caller, call_tool, receiver, django_capture_on_commit_callbacks):
    """A webhook set on the tenant, then a call that waits for approval; the tasks are captured, not sent."""
    account, _key = caller
    secret = webhook_set(tenant=account.tenant, url=f"{receiver.url}/hooks", user=None)
    connection = ConnectionFactory(tenant=account.tenant, credentials={"api_key": "ghp_" + "k" * 36})
    grant = GrantFactory(service_account=account, connections=[connection])
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = call_tool(connection, grant, tool_id="github__create_issue", args=ISSUE, tool_call_id="c1")
    return secret, response, callbacks


def _verify(secret: str, request) -> bool:
    timestamp, signature = (part.split("=", 1)[1] for part in request.headers["toolgate-signature"].split(","))
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def test_a_requested_approval_is_delivered_signed_and_without_the_args(asked, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    secret, response, callbacks = asked
    receiver.route("POST", "/hooks", status=204)
    delivery = WebhookDelivery.objects.get()

    assert response.status_code == 202
    assert WebhookDelivery.objects.count() == 1  # the exec path only wrote the row; nothing was sent yet
    assert receiver.requests == []
    assert len(callbacks) >= 1
    result = deliver_webhook.apply(args=[str(delivery.pk)])

    [request] = receiver.requests
    assert result.get() == "delivered"
    assert _verify(secret, request)
    assert not _verify("whsec_wrong", request)
    body = request.json()
    approval = ApprovalRequest.objects.get()
    assert body["event"] == "approval.requested"
    assert body["approval"]["id"] == str(approval.pk)
    assert body["approval"]["tool_id"] == "github__create_issue"
    assert (body["approval"]["private"], body["approval"]["subject_id"]) == (False, None)  # made for nobody
    assert approval.connection_id not in request.body.decode()
    assert (request.headers["toolgate-event"], request.headers["toolgate-delivery"]) == (
        "approval.requested",
        str(delivery.pk),
    )
    for leak in (CANARY, secret, "ghp_"):
        assert leak not in request.body.decode()
        assert leak not in caplog.text
    assert secret.encode() not in bytes(TenantWebhook.objects.get().secret_sealed)


def test_a_500_is_retried_until_the_receiver_takes_it(asked, receiver):
    answers = iter([500, 503, 200])
    receiver.handle("POST", "/hooks", lambda request: json_answer(next(answers), {}))
    delivery = WebhookDelivery.objects.get()

    result = deliver_webhook.apply(args=[str(delivery.pk)])

    delivery.refresh_from_db()
    assert result.get() == "delivered"
    assert len(receiver.requests) == 3
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 3, "")
    # a redelivered task posts nothing more
    assert deliver_webhook.apply(args=[str(delivery.pk)]).get() == "delivered"
    assert len(receiver.requests) == 3


def test_the_receivers_answer_is_never_read_so_a_compressed_bomb_costs_nothing(asked, receiver):
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB once decoded, about 64 KiB on the wire
    receiver.route(
        "POST", "/hooks", body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    delivery = WebhookDelivery.objects.get()
    tracemalloc.start()

    result = deliver_webhook.apply(args=[str(delivery.pk)])

    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.get() == "delivered"
    assert peak < 16 * 1024 * 1024


def test_a_4xx_is_final_and_recorded(asked, receiver):
    receiver.route("POST", "/hooks", status=410)
    delivery = WebhookDelivery.objects.get()

    deliver_webhook.apply(args=[str(delivery.pk)])

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 1, "the receiver answered HTTP 410")


def test_a_decision_is_announced_too(asked, receiver, django_capture_on_commit_callbacks):
    receiver.route("POST", "/hooks", status=200)
    with django_capture_on_commit_callbacks(execute=False):
        approval_decide(approval=ApprovalRequest.objects.get(), approve=False, decided_by=None, decided_by_name="os:x")
    decided = WebhookDelivery.objects.get(event="approval.decided")

    deliver_webhook.apply(args=[str(decided.pk)])

    body = receiver.requests[-1].json()
    assert (body["event"], body["approval"]["status"]) == ("approval.decided", "denied")
    assert body["approval"]["decided_at"] is not None
    assert "os:x" not in receiver.requests[-1].body.decode()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hooks",
        "http://10.1.2.3/hooks",
        "http://[::1]/hooks",
        "http://100.100.100.200/latest/meta-data/",
        "http://192.0.0.1/hooks",
        "http://[2002:7f00:1::]/hooks",
        "http://[::ffff:169.254.169.254]/hooks",
        "ftp://example.com/x",
    ],
)
def test_private_and_non_http_urls_are_refused_by_default(caller, url):
    account, _key = caller

    with pytest.raises(AppError) as refused:
        webhook_set(tenant=account.tenant, url=url, user=None)

    assert not TenantWebhook.objects.exists()
    assert "TOOLGATE" not in refused.value.safe_message  # a tenant owner reads it: no operator settings


def test_a_loopback_url_allowed_when_set_is_refused_at_delivery_once_the_setting_is_off(asked, receiver, settings):
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = False
    delivery = WebhookDelivery.objects.get()

    deliver_webhook.apply(args=[str(delivery.pk)])

    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert "loopback" in delivery.last_error or "private" in delivery.last_error
    assert receiver.requests == []


def test_no_webhook_no_delivery(github, caller, call_tool):
    account, _key = caller
    connection = ConnectionFactory(tenant=account.tenant)
    grant = GrantFactory(service_account=account, connections=[connection])

    call_tool(connection, grant, tool_id="github__create_issue", args=ISSUE, tool_call_id="c9")

    assert ApprovalRequest.objects.count() == 1
    assert not WebhookDelivery.objects.exists()


# --- calls made for a person, with their personal connection ----------------------

PERSONAL_LABEL = "canary-personal-label-3c9a"


def _ask_for_alice(caller, *, approver: str, tool_call_id: str):
    """Alice's call, made on her behalf with her personal connection, under a policy whose `approver` decides."""
    account, key = caller
    policy = account.tenant.policies.get()
    policy.approver = approver
    # asked by the policy itself: the tool's own confirmation alone would go to Alice, not to `approver`
    policy.require_approval_for_tools = ["github__create_issue"]
    policy.save()
    alice = MembershipFactory(tenant=account.tenant, user=UserFactory(username="alice"), role="member").user
    connection = ConnectionFactory(
        tenant=account.tenant, owner=alice, label=PERSONAL_LABEL, credentials={"api_key": "ghp_" + "p" * 36}
    )
    grant = GrantFactory(service_account=account, connections=[connection])
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    body = {
        "tool_id": "github__create_issue",
        "args": ISSUE,
        "tool_call_id": tool_call_id,
        "connection_id": str(connection.pk),
        "grant_id": str(grant.pk),
    }
    response = api_client(key).post("/api/v1/tools/exec", body, format="json", HTTP_X_TOOLGATE_SUBJECT=token)
    assert (response.status_code, response.json()["error_code"]) == (202, "approval_required")
    return alice, connection, ApprovalRequest.objects.get(pk=response.json()["approval_id"])


def test_a_persons_approval_that_owners_decide_is_announced_as_private_without_label_or_args(
    github, caller, receiver, django_capture_on_commit_callbacks
):
    account, _key = caller
    secret = webhook_set(tenant=account.tenant, url=f"{receiver.url}/hooks", user=None)
    receiver.route("POST", "/hooks", status=204)
    with django_capture_on_commit_callbacks(execute=False):
        alice, connection, approval = _ask_for_alice(caller, approver="tenant_owner", tool_call_id="p1")
    delivery = WebhookDelivery.objects.get()

    deliver_webhook.apply(args=[str(delivery.pk)])

    [request] = receiver.requests
    assert _verify(secret, request)
    assert request.json()["approval"] == {
        "id": str(approval.pk),
        "tenant": "acme",
        "service_account_id": str(account.pk),
        "tool_id": "github__create_issue",
        "tool_call_id": "p1",
        "effect": "external_side_effect",
        "consequence_level": approval.consequence_level,
        "approver": "tenant_owner",
        "status": "pending",
        "expires_at": approval.expires_at.isoformat(),
        "decided_at": None,
        "private": True,
        "subject_id": f"user:{alice.pk}",
    }
    for leak in (PERSONAL_LABEL, CANARY, str(connection.pk), "ghp_", "alice"):
        assert leak not in request.body.decode()


def test_a_persons_approval_that_operators_decide_is_not_announced(
    github, caller, receiver, django_capture_on_commit_callbacks
):
    # The receiver acts for the tenant's owners, who do not see such a request in the portal either.
    account, _key = caller
    webhook_set(tenant=account.tenant, url=f"{receiver.url}/hooks", user=None)
    with django_capture_on_commit_callbacks(execute=True):
        _alice, _connection, approval = _ask_for_alice(caller, approver="operator", tool_call_id="p2")
        approval_decide(approval=approval, approve=True, decided_by=None, decided_by_name="os:op")

    assert approval.status == "approved"
    assert not WebhookDelivery.objects.exists()
    assert receiver.requests == []


# --- the tenant UI page --------------------------------------------------------------------


def test_an_owner_sets_the_webhook_and_sees_the_secret_once(tenant, receiver):
    owner, _user = member_client(tenant)  # the factory's default role is owner

    created = owner.post(reverse("web:webhook"), {"url": f"{receiver.url}/hooks"})
    later = owner.get(reverse("web:webhook"))

    assert created.status_code == 201
    secret = created.context["secret"]
    assert secret.startswith("whsec_")
    assert secret in created.content.decode()
    assert secret not in later.content.decode()
    assert f"{receiver.url}/hooks" in later.content.decode()


def test_a_member_cannot_set_or_remove_the_webhook(tenant, receiver):
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=TenantMembership.Role.MEMBER)
    member, _ = member_client(tenant, user=user)

    page = member.get(reverse("web:webhook"))
    refused = member.post(reverse("web:webhook"), {"url": f"{receiver.url}/hooks"})

    assert "Only an owner of this tenant" in page.content.decode()
    assert refused.status_code == 403
    assert not TenantWebhook.objects.exists()


@pytest.mark.parametrize("url", ["not a url", "http://127.0.0.1/x", "javascript:alert(1)", "http://" + "a" * 600])
def test_bad_urls_are_form_errors(tenant, settings, url):
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = False
    owner, _ = member_client(tenant)

    response = owner.post(reverse("web:webhook"), {"url": url})

    assert response.status_code == 400
    assert "has-error" in response.content.decode()
    assert not TenantWebhook.objects.exists()


def test_a_broken_webhook_never_breaks_the_call_that_asked(caller, call_tool, receiver, monkeypatch, caplog):
    account, _key = caller
    webhook_set(tenant=account.tenant, url=f"{receiver.url}/hooks", user=None)
    connection = ConnectionFactory(tenant=account.tenant)
    grant = GrantFactory(service_account=account, connections=[connection])

    def broken(*args, **kwargs):
        raise RuntimeError("broker down")

    monkeypatch.setattr("connections_app.tasks.webhook_enqueue_for", broken)

    response = call_tool(connection, grant, tool_id="github__create_issue", args=ISSUE, tool_call_id="c5")

    assert (response.status_code, response.json()["error_code"]) == (202, "approval_required")
    assert ApprovalRequest.objects.count() == 1
    assert "a listener failed (RuntimeError)" in caplog.text
