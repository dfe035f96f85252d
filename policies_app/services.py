"""Writes of policies_app: tenants, service accounts, policies, approvals, delegations.

Every write that changes what a call may do bumps the governance generation in
the same transaction (see governance.py), so caches everywhere drop it.
"""

from __future__ import annotations

import enum
import hmac
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Model, Q
from django.utils import timezone

from changes_app.services import change_record, change_snapshot
from core.crypto import CredentialError, KeyRing
from core.errors import FORBIDDEN, AppError, full_clean_or_refuse
from core.key_rotation import RewrapOutcome
from core.models import Revocable
from policies_app.approval_args import approval_args_reseal
from policies_app.keys import consent_code_generate, key_digest, key_generate, pkce_s256, subject_token_generate
from policies_app.metrics import APPROVALS_REQUESTED
from policies_app.models import (
    ApprovalRequest,
    Approver,
    ArgumentRule,
    ConsentCode,
    Delegation,
    ResultGuard,
    ScopedRule,
    ServiceAccount,
    Tenant,
    TenantMembership,
    ToolPolicy,
)
from policies_app.rules import guard_problems, rule_problems
from policies_app.selectors import subject_id_of, tenant_owner_may_decide
from policies_app.signals import row_changed
from runner.types import ConsequenceLevel, FieldError, ToolEffect

LAST_USED_RESOLUTION = timedelta(minutes=1)
# Accounts whose use this process remembers recording (the oldest are forgotten first).
MAX_USE_NOTES = 10_000
logger = logging.getLogger(__name__)
VALID_SCOPES = frozenset(ServiceAccount.Scope.values)
SERVICE_ACCOUNT_NAME_TAKEN = "A service account with this name already exists in this tenant."
RevocableT = TypeVar("RevocableT", bound=Revocable)


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant = Tenant(slug=slug, name=name or slug)
    full_clean_or_refuse(tenant)
    tenant.save()
    return tenant


@transaction.atomic
def service_account_create(
    *, tenant: Tenant, name: str, scopes: Iterable[str] = ("tools:exec",), created_by: AbstractBaseUser | None = None
) -> tuple[ServiceAccount, str]:
    """Create an account and return it with its key: the only time the key exists in clear."""
    scopes = sorted(set(scopes))
    unknown = set(scopes) - VALID_SCOPES
    if unknown:
        raise AppError(f"unknown scopes: {', '.join(sorted(unknown))}")
    new_key = key_generate()
    account = ServiceAccount(
        tenant=tenant,
        name=name,
        scopes=scopes,
        key_prefix=new_key.prefix,
        key_digest=new_key.digest,
        created_by=created_by,
    )
    _refuse_invalid(account)
    account.save()  # the save signal bumps the governance generation
    change_record(action="service_account.create", obj=account, after=change_snapshot(account))
    return account, new_key.key


@transaction.atomic
def service_account_delete(*, account: ServiceAccount) -> None:
    """Delete an account (its grants and approvals go with it; its audit rows stay, unattributed); logged."""
    change_record(action="service_account.delete", obj=account, before=change_snapshot(account))
    account.delete()  # the delete signal bumps the governance generation


def _refuse_invalid(account: ServiceAccount) -> None:
    """The model's validation as an AppError; a name the tenant already uses is said on the name."""
    try:
        account.full_clean()
    except ValidationError as error:
        errors = [
            FieldError(path="name", message=SERVICE_ACCOUNT_NAME_TAKEN)
            if one.code == "unique_together"
            else FieldError(path="" if field == NON_FIELD_ERRORS else field, message=message)
            for field, found in error.update_error_dict({}).items()
            for one in found
            for message in one.messages
        ]
        raise AppError(" ".join(one.message for one in errors), field_errors=errors) from None


@transaction.atomic
def service_account_update(*, account: ServiceAccount) -> ServiceAccount:
    """Save an edited account's name and scopes (its tenant and key never change), remembering the change."""
    unknown = set(account.scopes) - VALID_SCOPES
    if unknown:
        raise AppError(f"unknown scopes: {', '.join(sorted(unknown))}")
    stored = ServiceAccount.objects.select_for_update().get(pk=account.pk)
    before = change_snapshot(stored)
    stored.name = account.name
    stored.scopes = sorted(set(account.scopes))
    _refuse_invalid(stored)
    stored.save(update_fields=["name", "scopes"])  # the save signal bumps the governance generation
    change_record(action="service_account.update", obj=stored, before=before, after=change_snapshot(stored))
    account.refresh_from_db()
    return account


@transaction.atomic
def service_account_revoke(*, account: ServiceAccount, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke once; the key stops working on the next call. False if it was already revoked."""
    return revoke_once(row=account, action="service_account.revoke", revoked_by=revoked_by)


@transaction.atomic
def revoke_once(
    *,
    row: RevocableT,
    action: str,
    revoked_by: AbstractBaseUser | None = None,
    also: Mapping[str, Any] | None = None,
    record: Callable[[RevocableT], Mapping[str, Any]] | None = None,
    now: datetime | None = None,
) -> bool:
    """Revoke `row` once: True if this call revoked it, False (nothing written) if it already was revoked.

    The one revocation every revocable row goes through (each model's service
    adds only what is its own). One conditional UPDATE (`revoked_at IS NULL`)
    decides between concurrent revocations; `also` are columns that change in
    that same UPDATE (a connection's status, which a constraint ties to
    revoked_at). The row is re-read either way. When this call revoked it:
    processes that serve such rows from memory are told (`signals.row_changed`:
    a queryset update sends no save signal), `record` leaves what else the service keeps (an event) and
    returns the change entry's links, and one change-log entry says who.
    """
    now = now or timezone.now()
    also = dict(also or {})
    changing = ["revoked_at", *also]
    before = {name: _field_value(row, name) for name in changing} | {"revoked_at": None}
    updated = (
        type(row)
        ._default_manager.filter(pk=row.pk, revoked_at__isnull=True)
        .update(revoked_at=now, revoked_by=revoked_by, **also)
    )
    row.refresh_from_db()
    if not updated:
        return False
    row_changed(row)  # processes that serve the row from memory drop it (a queryset update sends no signal)
    links = record(row) if record is not None else None
    after = {name: _field_value(row, name) for name in changing}
    change_record(action=action, obj=row, before=before, after=after, links=links)
    return True


def _field_value(row: Model, name: str) -> Any:
    return row._meta.get_field(name).value_from_object(row)  # type: ignore[union-attr]


class _UseNotes:
    """When this process last recorded each account's use, for at most MAX_USE_NOTES accounts.

    The governance cache keeps an account as it was loaded, last_used_at
    included; without these notes every call after the first minute would send
    the (then no-op) UPDATE again. Forgetting an account costs one such UPDATE.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: OrderedDict[str, datetime] = OrderedDict()

    def get(self, service_account_id: str) -> datetime | None:
        with self._lock:
            return self._notes.get(service_account_id)

    def put(self, service_account_id: str, when: datetime) -> None:
        with self._lock:
            self._notes[service_account_id] = when
            self._notes.move_to_end(service_account_id)
            while len(self._notes) > MAX_USE_NOTES:
                self._notes.popitem(last=False)

    def __len__(self) -> int:
        return len(self._notes)


_use_notes = _UseNotes()


def service_account_note_use(*, service_account_id: str, loaded_last_used_at: datetime | None) -> None:
    """An authenticated request used this account: record it, at most once a minute per account."""
    now = timezone.now()
    known = max(filter(None, (loaded_last_used_at, _use_notes.get(service_account_id))), default=None)
    service_account_touch(service_account_id=service_account_id, last_used_at=known, now=now)
    if known is None or now - known >= LAST_USED_RESOLUTION:
        _use_notes.put(service_account_id, now)


def service_account_touch(*, service_account_id: str, last_used_at: datetime | None, now: datetime) -> None:
    """Record use at most once a minute per account: a hot-path write we keep rare."""
    if last_used_at is not None and now - last_used_at < LAST_USED_RESOLUTION:
        return
    ServiceAccount.objects.filter(pk=service_account_id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)


# --- policies --------------------------------------------------------------------------


@transaction.atomic
def policy_save(*, policy: ToolPolicy, updated_by: AbstractBaseUser | None = None) -> ToolPolicy:
    """Create or edit a policy as validated by its form, remembering what changed."""
    stored = ToolPolicy.objects.select_for_update().filter(pk=policy.pk).first() if policy.pk else None
    before = change_snapshot(stored) if stored is not None else None
    policy.updated_by = updated_by
    policy.save()  # the save signal bumps the governance generation
    change_record(
        action="policy.update" if stored is not None else "policy.create",
        obj=policy,
        before=before,
        after=change_snapshot(policy),
    )
    return policy


@transaction.atomic
def policy_delete(*, policy: ToolPolicy) -> None:
    """Delete a policy; the log keeps what it allowed."""
    before = change_snapshot(policy)
    change_record(action="policy.delete", obj=policy, before=before)
    policy.delete()  # the delete signal bumps the governance generation


# --- approvals -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApprovalTerms:
    """What the policy and the tool say about a call that needs a person (copied onto the request)."""

    effect: ToolEffect
    consequence_level: ConsequenceLevel
    required_because: str
    approver: str
    ttl_s: int


# How a refusal names who must act on a pending request (the text a caller or a model reads).
APPROVER_WORDS: dict[str, str] = {
    Approver.OPERATOR: "an operator",
    Approver.TENANT_OWNER: "an owner of your tenant or an operator",
    Approver.SUBJECT: "the person this call is made for",
}


def approver_for_call(*, policy_approver: str, requires_confirmation: bool, subject_id: str | None) -> str:
    """Who decides a call that needs a person: the call's own person when there is one and the rule is theirs.

    A `requires_confirmation` tool asks for confirmation of the call; when the
    call is made for a person and nothing else in the policy asks (the caller
    passes `requires_confirmation` only then), that person is the one who can
    confirm what they asked for. A policy naming `subject` as approver means the same. A
    call made for no one has no person to ask: operators decide it (and a
    `subject` policy without a person falls back to them too).
    """
    if subject_id and (requires_confirmation or policy_approver == Approver.SUBJECT):
        return Approver.SUBJECT
    if policy_approver == Approver.SUBJECT:
        return Approver.OPERATOR
    return policy_approver


# Seals the call's args for the approver, given the new request's id and tenant: (blob or None, size in bytes).
ArgsSealer = Callable[[str, str], tuple[bytes | None, int]]


class ApprovalOutcome(enum.Enum):
    """Where a call that needs a person stands: it may run, it waits, or it is refused."""

    ALLOW = "allow"
    PENDING = "pending"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class ApprovalVerdict:
    """What `approval_check` found for one exact call: the outcome, the request it rests on, and why a denial.

    A type rather than a string such as `"deny:<reason>"`, so no caller parses
    prefixes and a denial cannot lose its reason: `reason` is the caller-safe
    sentence for DENY and empty otherwise.
    """

    outcome: ApprovalOutcome
    approval: ApprovalRequest
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.outcome is ApprovalOutcome.DENY) != bool(self.reason):
            raise ValueError("a denial says why, and only a denial does")

    @classmethod
    def deny(cls, approval: ApprovalRequest, reason: str) -> ApprovalVerdict:
        return cls(ApprovalOutcome.DENY, approval, reason)


def approval_check(
    *,
    tenant_id: int | str,
    service_account_id: str,
    tool_id: str,
    connection_id: str | None,
    args_sha256: str,
    tool_call_id: str,
    terms: ApprovalTerms,
    seal_args: ArgsSealer | None = None,
    subject_id: str | None = None,
) -> ApprovalVerdict:
    """Where this exact call stands: allowed, pending or denied (with the reason), and its approval request.

    Opens a pending approval on first sight (keeping the sealed args for the
    approver). An approved request allows the call but is not spent here: the
    runner reports it used once the tool has run (`approval_used`), so a call
    refused further down leaves it usable. The runner's claim on the
    tool_call_id lets an approved call execute at most once.
    """
    now = timezone.now()
    approval = (
        ApprovalRequest.objects.filter(tenant_id=tenant_id, tool_call_id=tool_call_id).order_by("-created_at").first()
    )
    if approval is None:
        approval = _approval_open(
            tenant_id=tenant_id,
            service_account_id=service_account_id,
            tool_id=tool_id,
            connection_id=connection_id,
            args_sha256=args_sha256,
            tool_call_id=tool_call_id,
            terms=terms,
            seal_args=seal_args,
            subject_id=subject_id,
        )
        return ApprovalVerdict(ApprovalOutcome.PENDING, approval)
    bound = (
        str(approval.service_account_id) == service_account_id
        and approval.subject_id == (subject_id or "")  # approved for one person's call, not another's
        and approval.tool_id == tool_id
        and approval.connection_id == (connection_id or "")
        and approval.args_sha256 == args_sha256
    )
    if not bound:
        return ApprovalVerdict.deny(approval, "this tool_call_id awaits approval for a different request")
    if approval.status == ApprovalRequest.Status.DENIED:
        reason = f" ({approval.reason})" if approval.reason else ""
        return ApprovalVerdict.deny(approval, f"the approval was denied{reason}")
    if approval.status == ApprovalRequest.Status.CONSUMED:  # it ran; the claim answers the repeat
        return ApprovalVerdict(ApprovalOutcome.ALLOW, approval)
    if approval.expires_at <= now:
        return ApprovalVerdict.deny(
            approval, "the approval expired; repeat the call with a new tool_call_id to ask again"
        )
    if approval.status == ApprovalRequest.Status.PENDING:
        return ApprovalVerdict(ApprovalOutcome.PENDING, approval)
    return ApprovalVerdict(ApprovalOutcome.ALLOW, approval)


def _approval_open(
    *,
    tenant_id: int | str,
    service_account_id: str,
    tool_id: str,
    connection_id: str | None,
    args_sha256: str,
    tool_call_id: str,
    terms: ApprovalTerms,
    seal_args: ArgsSealer | None,
    subject_id: str | None = None,
) -> ApprovalRequest:
    approval_id = uuid.uuid4()  # known before the INSERT: the sealed args are bound to it
    sealed, args_bytes = seal_args(str(approval_id), str(tenant_id)) if seal_args else (None, 0)
    try:
        with transaction.atomic():
            approval = ApprovalRequest.objects.create(
                id=approval_id,
                tenant_id=tenant_id,
                service_account_id=service_account_id,
                tool_id=tool_id,
                effect=terms.effect.value,
                consequence_level=terms.consequence_level.value,
                required_because=terms.required_because[:200],
                approver=terms.approver,
                connection_id=connection_id or "",
                subject_id=subject_id or "",
                args_sha256=args_sha256,
                args_sealed=sealed,
                args_bytes=args_bytes,
                tool_call_id=tool_call_id,
                expires_at=timezone.now() + timedelta(seconds=terms.ttl_s),
            )
        transaction.on_commit(APPROVALS_REQUESTED.inc)  # counted once it is really open
        _announce(approval)
        return approval
    except IntegrityError:  # a concurrent identical call opened it first
        return ApprovalRequest.objects.get(
            tenant_id=tenant_id,
            tool_call_id=tool_call_id,
            status__in=[ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED],
        )


def approval_used(*, approval_id: str) -> bool:
    """The approved call ran: spend its approval. False if it was not approved (or already spent)."""
    return bool(
        ApprovalRequest.objects.filter(pk=approval_id, status=ApprovalRequest.Status.APPROVED).update(
            status=ApprovalRequest.Status.CONSUMED, consumed_at=timezone.now()
        )
    )


def approval_expired_erase() -> int:
    """Null the kept args of every request past its expiry (the beat sweep); returns how many were erased.

    A decided request's args are erased by the decision itself; this catches
    the ones nobody decided in time.
    """
    return ApprovalRequest.objects.filter(args_sealed__isnull=False, expires_at__lte=timezone.now()).update(
        args_sealed=None
    )


def approval_args_rewrap(*, approval: ApprovalRequest, ring: KeyRing) -> RewrapOutcome:
    """Re-encrypt a pending request's kept args under the ring's primary key (`rotate_encryption_keys`).

    Without it, dropping the old key leaves approvers unable to see what they
    approve. Compare-and-swap on the envelope read, like connection_rewrap: a
    request decided (or erased on expiry) meanwhile has a NULL column, which
    matches no envelope, so its args are never written back.
    """
    old_blob = bytes(approval.args_sealed)
    try:
        sealed = approval_args_reseal(str(approval.pk), str(approval.tenant_id), old_blob, ring=ring)
    except CredentialError as exc:
        return RewrapOutcome(False, str(exc), error=exc)
    updated = ApprovalRequest.objects.filter(pk=approval.pk, args_sealed=old_blob).update(args_sealed=sealed.blob)
    if not updated:
        return RewrapOutcome(False, "changed concurrently")
    return RewrapOutcome(True)


@transaction.atomic
def approval_decide(
    *,
    approval: ApprovalRequest,
    approve: bool,
    decided_by: AbstractBaseUser | None,
    decided_by_name: str = "",
    reason: str = "",
) -> bool:
    """Approve or deny a pending, unexpired request, recording who, when and why. False if not pending.

    `decided_by_name` names a decider without a Django account (`os:<user>` from the command line);
    an admin decision records the user's name there too, so the record outlives the account.
    """
    now = timezone.now()
    before = change_snapshot(approval)
    updated = ApprovalRequest.objects.filter(
        pk=approval.pk, status=ApprovalRequest.Status.PENDING, expires_at__gt=now
    ).update(
        status=ApprovalRequest.Status.APPROVED if approve else ApprovalRequest.Status.DENIED,
        decided_at=now,
        decided_by=decided_by,
        decided_by_name=(decided_by.get_username() if decided_by is not None else decided_by_name)[:150],
        reason=reason[:500],
        args_sealed=None,  # kept only for the decision: it has been made
    )
    approval.refresh_from_db()
    if updated:
        change_record(
            action=f"approval.{approval.status}", obj=approval, before=before, after=change_snapshot(approval)
        )
        _announce(approval)
    return bool(updated)


def approval_decide_as_tenant_owner(
    *, approval: ApprovalRequest, user: AbstractBaseUser, approve: bool, reason: str = ""
) -> bool:
    """A tenant owner's decision, when the request's policy lets owners decide; else a `forbidden` AppError.

    Returns False, like approval_decide, when the request is no longer pending.
    """
    if not tenant_owner_may_decide(approval=approval, user_id=user.pk):
        raise AppError(
            "only an owner of this tenant may decide this request, and only when its policy says so", code=FORBIDDEN
        )
    return approval_decide(approval=approval, approve=approve, decided_by=user, reason=reason)


def approval_decide_as_subject(*, approval: ApprovalRequest, user: AbstractBaseUser, approve: bool) -> bool:
    """The person's own confirmation (or refusal) of a call made for them; else a `forbidden` AppError.

    Only the request's own person decides it, and only when it asks for their
    confirmation (approver `subject`): the spec's URL-elicitation rule that the
    one who completes the page is the one the request was for. The decision is
    recorded under their name like any other. False when no longer pending.
    """
    if approval.approver != Approver.SUBJECT or approval.subject_id != subject_id_of(user.pk):
        raise AppError("only the person this call is made for may confirm it", code=FORBIDDEN)
    reason = "" if approve else "the person declined"
    return approval_decide(approval=approval, approve=approve, decided_by=user, reason=reason)


# --- who hears of approvals --------------------------------------------------------------

# Receivers of approval events (a request opened, a decision made), registered by the layers above
# (the tenant webhooks) at start-up. They are called inside the writing transaction and must only
# enqueue work with `transaction.on_commit`: nothing here may block or fail the call that asked.
ApprovalListener = Callable[[ApprovalRequest], None]
_approval_listeners: list[ApprovalListener] = []


def approval_listener_add(listener: ApprovalListener) -> None:
    if listener not in _approval_listeners:
        _approval_listeners.append(listener)


def _announce(approval: ApprovalRequest) -> None:
    """Tell the listeners; one that fails is logged and skipped, never the call's or the decision's failure."""
    for listener in _approval_listeners:
        try:
            with transaction.atomic():  # a failed write of the listener leaves the caller's transaction usable
                listener(approval)
        except Exception as exc:  # the approval itself stands; its notification is what was lost
            logger.error("approval %s: a listener failed (%s); nobody was notified", approval.pk, type(exc).__name__)


# --- delegations: a person lets a service account act on their behalf --------------------

MAX_DELEGATED_TOOLS = 200
MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_LENGTH = 500
CONSENT_CODE_TTL = timedelta(seconds=60)
PKCE_VERIFIER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
CONSENT_CODE_REFUSED = "the code is unknown, expired, already used, or was issued for another redirect_uri or caller"


@transaction.atomic
def delegation_create(
    *,
    tenant: Tenant,
    user: AbstractBaseUser,
    service_account: ServiceAccount,
    tools: Iterable[str] = (),
    expires_at: datetime | None = None,
    origin: str = Delegation.Origin.PORTAL,
    issue_token: bool = True,
) -> tuple[Delegation, str | None]:
    """Record that `user` lets `service_account` act for them; returns the subject token when issued.

    The token exists in clear only in this return value (shown once). A person
    has at most one live delegation per service account: a new one revokes the
    older, so an old token never keeps working beside the new one.
    """
    tools = sorted(set(tools))
    if not TenantMembership.objects.filter(tenant=tenant, user=user).exists():
        raise AppError("only a member of the tenant can delegate")
    if service_account.tenant_id != tenant.pk:
        raise AppError("the service account belongs to another tenant")
    if service_account.revoked_at is not None:
        raise AppError("the service account is revoked")
    if len(tools) > MAX_DELEGATED_TOOLS or any(not isinstance(t, str) or not t or len(t) > 64 for t in tools):
        raise AppError(f"tools: at most {MAX_DELEGATED_TOOLS} tool ids")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise AppError("expires_at is in the past")
    for older in Delegation.objects.select_for_update().filter(
        tenant=tenant, user=user, service_account=service_account, revoked_at__isnull=True
    ):
        delegation_revoke(delegation=older, revoked_by=user)
    try:
        with transaction.atomic():  # a savepoint: the constraint decides a race between two new delegations
            delegation = Delegation.objects.create(
                tenant=tenant,
                user=user,
                service_account=service_account,
                tools=tools,
                expires_at=expires_at,
                origin=origin,
            )
    except IntegrityError:
        raise AppError("another delegation to this service account was just made; try again") from None
    change_record(action="delegation.create", obj=delegation, after=change_snapshot(delegation))
    token = delegation_issue_token(delegation=delegation) if issue_token else None
    return delegation, token


@transaction.atomic
def delegation_issue_token(*, delegation: Delegation) -> str:
    """A new subject token for this delegation, replacing any earlier one; the clear token is returned once."""
    if delegation.revoked_at is not None:
        raise AppError("the delegation is revoked")
    before = change_snapshot(delegation)
    new = subject_token_generate()
    delegation.token_prefix = new.prefix
    delegation.token_digest = new.digest
    delegation.token_issued_at = timezone.now()
    delegation.save(update_fields=["token_prefix", "token_digest", "token_issued_at"])  # bumps the generation
    change_record(action="delegation.token_issue", obj=delegation, before=before, after=change_snapshot(delegation))
    return new.key


@transaction.atomic
def delegation_revoke(*, delegation: Delegation, revoked_by: AbstractBaseUser | None = None) -> bool:
    """Revoke once; its token is refused from the next call on. False if it was already revoked."""
    return revoke_once(row=delegation, action="delegation.revoke", revoked_by=revoked_by)


def redirect_uri_problem(uri: str) -> str | None:
    """Why `uri` cannot be a consent redirect URI (None when it can): absolute https, or http on loopback."""
    if not uri or len(uri) > MAX_REDIRECT_URI_LENGTH or any(ch.isspace() for ch in uri):
        return "a redirect URI is an absolute URL of at most 500 characters"
    parts = urlsplit(uri)
    if parts.fragment or not parts.hostname:
        return "a redirect URI is an absolute URL without a #fragment"
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return None
    return "a redirect URI uses https (http only on 127.0.0.1 or localhost)"


@transaction.atomic
def service_account_set_redirect_uris(*, account: ServiceAccount, uris: Iterable[str]) -> ServiceAccount:
    """Register where consent redirects may return to for this account (exact match, replaces the list)."""
    cleaned = list(dict.fromkeys(uri.strip() for uri in uris if uri.strip()))
    if len(cleaned) > MAX_REDIRECT_URIS:
        raise AppError(f"at most {MAX_REDIRECT_URIS} redirect URIs")
    for uri in cleaned:
        problem = redirect_uri_problem(uri)
        if problem is not None:
            raise AppError(problem)
    stored = ServiceAccount.objects.select_for_update().get(pk=account.pk)
    before = change_snapshot(stored)
    stored.consent_redirect_uris = cleaned
    stored.save(update_fields=["consent_redirect_uris"])
    change_record(action="service_account.update", obj=stored, before=before, after=change_snapshot(stored))
    account.consent_redirect_uris = cleaned
    return account


@transaction.atomic
def consent_approve(
    *,
    user: AbstractBaseUser,
    service_account: ServiceAccount,
    redirect_uri: str,
    code_challenge: str,
    tools: Iterable[str] = (),
    expires_at: datetime | None = None,
) -> str:
    """The person approved a service's consent request: a delegation (no token yet) and a one-time code.

    The service exchanges the code (with its API key, the PKCE verifier and the
    same redirect_uri) for the subject token; only the code's digest is stored.
    """
    if redirect_uri not in service_account.consent_redirect_uris:
        raise AppError("redirect_uri is not registered for this service account")
    delegation, _ = delegation_create(
        tenant=service_account.tenant,
        user=user,
        service_account=service_account,
        tools=tools,
        expires_at=expires_at,
        origin=Delegation.Origin.CONSENT,
        issue_token=False,
    )
    code, digest = consent_code_generate()
    ConsentCode.objects.create(
        delegation=delegation,
        code_digest=digest,
        redirect_uri=redirect_uri,
        code_challenge=code_challenge,
        expires_at=timezone.now() + CONSENT_CODE_TTL,
    )
    return code


def consent_exchange(
    *, service_account_id: str, code: str, code_verifier: str, redirect_uri: str
) -> tuple[Delegation, str]:
    """The service trades a consent code for the person's subject token (shown to it once).

    The code must be this caller's, unexpired, unused, for this redirect_uri, and
    the verifier must match its S256 challenge. A code used a second time
    revokes the delegation it created: a leaked code is worth nothing.
    """
    with transaction.atomic():
        row = (
            ConsentCode.objects.select_for_update()
            .select_related("delegation")
            .filter(code_digest=key_digest(code))
            .first()
        )
        if row is None or str(row.delegation.service_account_id) != service_account_id:
            raise AppError(CONSENT_CODE_REFUSED, field_errors=[("code", CONSENT_CODE_REFUSED)])
        if row.used_at is not None:
            delegation_revoke(delegation=row.delegation)
            reused = True
        else:
            reused = False
            now = timezone.now()
            valid = (
                row.expires_at > now
                and row.redirect_uri == redirect_uri
                and 43 <= len(code_verifier) <= 128
                and set(code_verifier) <= PKCE_VERIFIER_CHARS
                and hmac.compare_digest(pkce_s256(code_verifier), row.code_challenge)
            )
            row.used_at = now
            row.save(update_fields=["used_at"])  # one attempt per code, right or wrong
            if valid and row.delegation.revoked_at is None:
                token = delegation_issue_token(delegation=row.delegation)
                return row.delegation, token
    if reused:
        logger.warning("consent code %s used twice; its delegation %s is revoked", row.pk, row.delegation_id)
    raise AppError(CONSENT_CODE_REFUSED, field_errors=[("code", CONSENT_CODE_REFUSED)])


# --- argument rules and result guards ------------------------------------------------------


class RuleInvalid(ValueError):
    """A rule or guard that cannot be saved: `problems` maps each field to what is wrong with it."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {problem}" for name, problem in problems.items()))
        self.problems = problems


def _scoped_save(row: ScopedRule, problems: dict[str, str], kind: str, updated_by: AbstractBaseUser | None) -> None:
    if problems:
        raise RuleInvalid(problems)
    model = type(row)
    stored = model.objects.select_for_update().filter(pk=row.pk).first() if row.pk else None
    before = change_snapshot(stored) if stored is not None else None
    row.updated_by = updated_by
    row.save()  # the save signal bumps the governance generation: every process recompiles its rules
    change_record(
        action=f"{kind}.update" if stored is not None else f"{kind}.create",
        obj=row,
        before=before,
        after=change_snapshot(row),
    )


@transaction.atomic
def argument_rule_save(*, rule: ArgumentRule, updated_by: AbstractBaseUser | None = None) -> ArgumentRule:
    """Create or edit an argument rule, refused unless its condition compiles within bounds and it covers a tool."""
    _scoped_save(rule, rule_problems(rule), "argument_rule", updated_by)
    return rule


@transaction.atomic
def result_guard_save(*, guard: ResultGuard, updated_by: AbstractBaseUser | None = None) -> ResultGuard:
    """Create or edit a result guard, refused unless its patterns are valid RE2 and it covers a tool."""
    _scoped_save(guard, guard_problems(guard), "result_guard", updated_by)
    return guard


@transaction.atomic
def scoped_rule_delete(*, row: ArgumentRule | ResultGuard) -> None:
    """Delete a rule or guard; the log keeps what it said."""
    kind = "argument_rule" if isinstance(row, ArgumentRule) else "result_guard"
    change_record(action=f"{kind}.delete", obj=row, before=change_snapshot(row))
    row.delete()
