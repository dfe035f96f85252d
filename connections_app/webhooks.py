"""Tenant webhooks for approvals: set by an owner, signed with HMAC-SHA256, delivered by Celery.

Events: `approval.requested` (a call waits for a person) and
`approval.decided` (approved or denied). The payload names ids and the tool,
never the call's arguments, the reason, the connection or any secret. The
receiver acts for the tenant's owners: a private request (made on behalf of a
person or with a personal connection) is announced only when the owners
decide it, and then names its person (`subject_id`). A delivery row is written
in the transaction that opened or decided the approval and its task is sent on
commit, so the call that asked never waits for (or fails with) the receiver.

Signature: header `Toolgate-Signature: t=<unix seconds>,v1=<hex>`, where hex is
HMAC-SHA256 of `<t>.<raw body>` under the webhook's secret. Receivers check it
in constant time and refuse old timestamps.

The URL must be http(s) and globally routable: loopback, private and other special-purpose addresses are refused
when it is set and again at every delivery (the host is resolved, checked, and
the request goes to the checked address), unless
TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS is true.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from connections_app.models import TenantWebhook, WebhookDelivery
from connections_app.selectors import approval_audience
from core.crypto import CredentialError, KeyRing, open_sealed, reseal, seal
from core.errors import AppError
from core.key_rotation import RewrapOutcome
from core.netguard import UpstreamAddressRefused, check_url_now, parse_endpoint, resolve_checked_now
from policies_app.models import ApprovalRequest, Tenant
from policies_app.tracing import trace_context_injected

SIGNATURE_HEADER = "Toolgate-Signature"
DELIVERY_TIMEOUT_S = 10.0
MAX_ERROR_LENGTH = 300


class TransientDeliveryError(Exception):
    """The receiver could not be reached or answered 5xx/429: the task retries with backoff."""


def _binding(tenant_id: int) -> dict[str, str]:
    return {"webhook_secret": str(tenant_id)}


def webhook_url_check(url: str) -> None:
    """http(s), no user info, and (unless allowed) no loopback or private address; else an AppError."""
    try:
        check_url_now(url, allow_private=settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    except UpstreamAddressRefused as refused:
        raise AppError(f"webhook URL refused: {refused}") from None


@transaction.atomic
def webhook_set(*, tenant: Tenant, url: str, user: AbstractBaseUser | None) -> str:
    """Set (or replace) the tenant's webhook with a new secret; returns the secret, shown once."""
    webhook_url_check(url)
    secret = "whsec_" + secrets.token_urlsafe(32)
    sealed = seal(secret.encode(), binding=_binding(tenant.pk), ring=KeyRing.from_settings()).blob
    TenantWebhook.objects.update_or_create(
        tenant=tenant, defaults={"url": url, "secret_sealed": sealed, "created_by": user}
    )
    return secret


def webhook_remove(*, tenant: Tenant) -> bool:
    return bool(TenantWebhook.objects.filter(tenant=tenant).delete()[0])


def webhook_secret_rewrap(*, webhook: TenantWebhook, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt a webhook's signing secret under the ring's primary key (`rotate_encryption_keys`).

    Deliveries open the secret with the ring of the moment, so without this an
    old key dropped from the ring makes every delivery fail. Compare-and-swap on
    the envelope read, like connection_rewrap: an owner who sets a new secret
    meanwhile keeps it (the row is skipped).
    """
    old_blob = bytes(webhook.secret_sealed)
    try:
        sealed = reseal(old_blob, binding=_binding(webhook.tenant_id), ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    updated = TenantWebhook.objects.filter(pk=webhook.pk, secret_sealed=old_blob).update(secret_sealed=sealed.blob)
    if not updated:
        return RewrapOutcome(False, "changed concurrently")
    return RewrapOutcome(True)


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value for `body` sent at `timestamp` (what receivers recompute)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


# --- events --------------------------------------------------------------------------------

Enqueue = Callable[[str], object]


def approval_event_payload(approval: ApprovalRequest, event: str, delivery_id: str, *, private: bool) -> dict[str, Any]:
    """Ids, the tool and the outcome; never the call's arguments, the reason, the connection or any secret.

    `private` (a call made on behalf of a person or with a personal connection) adds who the
    call is for, so a receiver can tell that person and the owners, not every member.
    """
    return {
        "event": event,
        "delivery_id": delivery_id,
        "approval": {
            "id": str(approval.pk),
            "tenant": approval.tenant.slug,
            "service_account_id": str(approval.service_account_id),
            "tool_id": approval.tool_id,
            "tool_call_id": approval.tool_call_id,
            "effect": approval.effect,
            "consequence_level": approval.consequence_level,
            "approver": approval.approver,
            "status": approval.status,
            "expires_at": approval.expires_at.isoformat(),
            "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
            "private": private,
            "subject_id": approval.subject_id or None,
        },
    }


def webhook_enqueue_for(approval: ApprovalRequest, *, enqueue: Enqueue) -> WebhookDelivery | None:
    """Record a delivery if the tenant has a webhook, and send its task once the transaction commits.

    The webhook's receiver acts for the tenant's owners (an owner set it), so it hears of a
    request only when the owners may see it (connections_app.selectors.approvals_visible): a
    private request that operators decide is not announced.
    """
    if not TenantWebhook.objects.filter(tenant_id=approval.tenant_id).exists():
        return None
    audience = approval_audience(approval=approval)
    if not audience.owners_may_see:
        return None
    event = "approval.requested" if approval.status == ApprovalRequest.Status.PENDING else "approval.decided"
    delivery = WebhookDelivery(tenant_id=approval.tenant_id, event=event, payload={})
    delivery.payload = approval_event_payload(approval, event, str(delivery.pk), private=audience.private)
    delivery.save()
    transaction.on_commit(lambda: enqueue(str(delivery.pk)))
    return delivery


# --- delivery ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    status: str
    detail: str = ""


def webhook_deliver(*, delivery_id: str, final_attempt: bool) -> DeliveryOutcome:
    """Post one delivery, signed; idempotent (a delivered row returns at once).

    Raises TransientDeliveryError for a timeout, a connection failure, 429 or
    5xx (unless `final_attempt`, when the row is marked failed instead). Any
    other answer is final: 2xx delivered, else failed with the status recorded.
    """
    delivery = WebhookDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
        return DeliveryOutcome(delivery.status if delivery else "missing")
    webhook = TenantWebhook.objects.filter(tenant_id=delivery.tenant_id).first()
    if webhook is None:
        return _finish(delivery, WebhookDelivery.Status.FAILED, "the tenant removed its webhook")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=delivery.attempts + 1)
    secret = open_sealed(
        bytes(webhook.secret_sealed), binding=_binding(delivery.tenant_id), ring=KeyRing.from_settings()
    ).decode()
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    try:
        status = _post(webhook.url, body, secret=secret, event=delivery.event, delivery_id=str(delivery.pk))
    except AppError as refused:
        return _finish(delivery, WebhookDelivery.Status.FAILED, str(refused))
    except httpx2.HTTPError as error:
        return _transient(delivery, f"could not reach the receiver ({type(error).__name__})", final_attempt)
    if 200 <= status < 300:
        return _finish(delivery, WebhookDelivery.Status.DELIVERED, f"HTTP {status}")
    if status == 429 or status >= 500:
        return _transient(delivery, f"the receiver answered HTTP {status}", final_attempt)
    return _finish(delivery, WebhookDelivery.Status.FAILED, f"the receiver answered HTTP {status}")


def _transient(delivery: WebhookDelivery, detail: str, final_attempt: bool) -> DeliveryOutcome:
    if final_attempt:
        return _finish(delivery, WebhookDelivery.Status.FAILED, f"{detail}; gave up after retries")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(last_error=detail[:MAX_ERROR_LENGTH])
    raise TransientDeliveryError(detail)


def _finish(delivery: WebhookDelivery, status: str, detail: str) -> DeliveryOutcome:
    WebhookDelivery.objects.filter(pk=delivery.pk, status=WebhookDelivery.Status.PENDING).update(
        status=status,
        last_error="" if status == WebhookDelivery.Status.DELIVERED else detail[:MAX_ERROR_LENGTH],
        delivered_at=timezone.now() if status == WebhookDelivery.Status.DELIVERED else None,
    )
    return DeliveryOutcome(status, detail)


def _post(url: str, body: bytes, *, secret: str, event: str, delivery_id: str) -> int:
    """POST to the address checked now (never one a second DNS answer could swap in)."""
    endpoint = parse_endpoint(url)
    try:
        address = resolve_checked_now(endpoint, allow_private=settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    except UpstreamAddressRefused as refused:
        raise AppError(f"webhook URL refused: {refused}") from None
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{host}:{endpoint.port}", parts.path or "/", parts.query, ""))
    timestamp = int(time.time())
    headers = {
        "Host": parts.netloc,
        "Content-Type": "application/json",
        "User-Agent": "Toolgate-Webhooks/1",
        "Toolgate-Event": event,
        "Toolgate-Delivery": delivery_id,
        SIGNATURE_HEADER: webhook_signature(secret, timestamp, body),
    }
    # Only the status counts: the receiver's body is never read, so a large or compressed one costs nothing.
    with (
        httpx2.Client(
            timeout=DELIVERY_TIMEOUT_S,
            follow_redirects=False,
            event_hooks={"request": [trace_context_injected]},
        ) as client,
        client.stream(
            "POST", pinned, content=body, headers=headers, extensions={"sni_hostname": endpoint.host}
        ) as response,
    ):
        return response.status_code
