"""Who may run what: tenants, their callers, policies, approvals and delegations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import Revocable
from runner.types import ConsequenceLevel, ToolEffect

EFFECT_CHOICES = [(effect.value, effect.value) for effect in ToolEffect]
CONSEQUENCE_CHOICES = [(level.value, level.value) for level in ConsequenceLevel]
DEFAULT_APPROVAL_TTL_S = 3600
MIN_APPROVAL_TTL_S = 60
MAX_APPROVAL_TTL_S = 7 * 24 * 3600


class Approver(models.TextChoices):
    """Who may decide the approvals a policy asks for."""

    OPERATOR = "operator", "Operators (admin, manage.py approvals)"
    TENANT_OWNER = "tenant_owner", "The tenant's owners (tenant UI), and operators"
    # The person a call is made for confirms it themselves (the confirm page an MCP client links to).
    # A call made for no one has no such person: operators decide it.
    SUBJECT = "subject", "The person the call is made for (their own confirmation)"


class Tenant(models.Model):
    """The billing account that owns connections, service accounts and audit rows."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class TenantMembership(models.Model):
    """A web-UI user's place in a tenant; a user may belong to several."""

    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ServiceAccount(Revocable):
    """A caller of the REST API. Its key is shown once and stored only as a digest.

    Keys look like `tg_<prefix>_<secret>`: the public prefix finds the row with
    an index, the sha256 digest of the whole key is compared in constant time.
    A random 256-bit secret needs no slow hash; the check runs on every call.
    """

    class Scope(models.TextChoices):
        TOOLS_EXEC = "tools:exec", "tools:exec"
        CONNECTIONS_MANAGE = "connections:manage", "connections:manage"
        # Read every audit row of the tenant (GET /api/v1/invocations); without it, a caller reads its own.
        INVOCATIONS_READ = "invocations:read", "invocations:read"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="service_accounts")
    name = models.CharField(max_length=100)
    scopes = models.JSONField(default=list)
    key_prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_digest = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Where the consent redirect may send a person back to (exact match): the service's own callback URLs.
    consent_redirect_uris = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="serviceaccount_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Delegation(Revocable):
    """A person's "this agent may act for me": a tenant user lets one service account call on their behalf.

    It yields one subject token at a time (`tgs_<prefix>_<secret>`, shown once,
    stored as prefix + sha256 digest like an API key); issuing a new token
    replaces the old one. `tools` empty means every tool the account's policy
    allows; otherwise only those. `connection_ids` are the person's declaration
    of which connections the account may use when a call names none (grant ∩
    declared is still the rule; runner/grants.py chooses). Revoked or expired, the token stops working
    on the next call (a write bumps the governance generation).
    """

    class Origin(models.TextChoices):
        PORTAL = "portal", "Created in the tenant UI"
        CONSENT = "consent", "Approved through a service's consent redirect"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="delegations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="delegations")
    service_account = models.ForeignKey(ServiceAccount, on_delete=models.CASCADE, related_name="delegations")
    tools = models.JSONField(default=list, blank=True)
    # The person's connections (ids, sorted) this account may use for a call that names none: chosen on
    # the consent page and editable on the delegations page (connections_app checks each is the tenant's,
    # and shared or the person's own). Empty: a call must name its connection.
    connection_ids = models.JSONField(default=list, blank=True)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.PORTAL)
    token_prefix = models.CharField(max_length=16, unique=True, null=True, blank=True, editable=False)
    token_digest = models.CharField(max_length=64, blank=True, editable=False)
    token_issued_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "user"], name="delegation_tenant_user")]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "service_account"],
                condition=Q(revoked_at__isnull=True),
                name="delegation_one_live_per_person_and_account",
            )
        ]

    def __str__(self) -> str:
        return f"delegation of user {self.user_id} to {self.service_account_id}"

    def status_at(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    @property
    def status_now(self) -> str:
        return self.status_at(timezone.now())


class ConsentCode(models.Model):
    """A one-time code from the consent redirect, exchanged by the service (with its API key) for a token.

    Stored as a digest, bound to the redirect URI and the PKCE S256 challenge the
    service sent; valid for a minute and usable once (`used_at`). A second use
    revokes the token the first one issued (the code leaked).
    """

    id = models.BigAutoField(primary_key=True)
    delegation = models.ForeignKey(Delegation, on_delete=models.CASCADE, related_name="consent_codes")
    code_digest = models.CharField(max_length=64, unique=True, editable=False)
    redirect_uri = models.CharField(max_length=500)
    code_challenge = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"consent code {self.pk} for {self.delegation_id}"


class GovernedScope:
    """The scope a policy or rule row names (global, a tenant, or one of its service accounts), in words."""

    service_account_id: Any
    tenant_id: Any
    service_account: Any
    tenant: Any

    @property
    def scope_label(self) -> str:
        if self.service_account_id:
            return f"service account {self.service_account}"
        if self.tenant_id:
            return f"tenant {self.tenant}"
        return "global"


class ToolPolicy(GovernedScope, models.Model):
    """Which tools a scope may run, which effects need approval, and the budgets.

    Scope is global (no tenant), a tenant, or one service account of a tenant;
    the most specific active policy applies and no policy means nothing runs.
    At most one active policy per scope, enforced by the database.
    """

    name = models.SlugField(max_length=100, unique=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="policies")
    service_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.CASCADE, related_name="policies"
    )
    allowed_tools = models.JSONField(default=list, blank=True)
    # Upstream resources (`toolgate://<slug>/...`) and prompts (`mcp__<slug>__<name>`) this scope may
    # read and fetch: names or `*` patterns, like allowed_tools; empty allows none (deny by default).
    allowed_resources = models.JSONField(default=list, blank=True)
    allowed_prompts = models.JSONField(default=list, blank=True)
    require_approval_for_effects = models.JSONField(default=list, blank=True)
    # Besides effects: a consequence level and above, or named tools. A tool's own
    # requires_confirmation asks for approval under every policy.
    require_approval_at_or_above = models.CharField(
        max_length=8, choices=CONSEQUENCE_CHOICES, blank=True, help_text="Blank: consequence levels ask for nothing."
    )
    require_approval_for_tools = models.JSONField(default=list, blank=True)
    approver = models.CharField(max_length=16, choices=Approver.choices, default=Approver.OPERATOR)
    approval_ttl_s = models.PositiveIntegerField(
        default=DEFAULT_APPROVAL_TTL_S,
        validators=[MinValueValidator(MIN_APPROVAL_TTL_S), MaxValueValidator(MAX_APPROVAL_TTL_S)],
        help_text="How long an approval request stays open (and an approval usable), in seconds.",
    )
    max_runtime_ms = models.PositiveIntegerField(null=True, blank=True)
    max_result_bytes = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # Sampling requests (an upstream MCP tool asking the client's model) one call may pass on to the
    # client; empty or 0 passes none (deny by default). Elicitation needs no policy field: the tool's
    # operator allows it on the tool itself (the upstream tool's review).
    max_samples_per_call = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Sampling requests an upstream tool may pass to the client's model per call. Empty: none.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "tool policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(service_account__isnull=True) | Q(tenant__isnull=False),
                name="toolpolicy_service_account_needs_tenant",
            ),
            models.UniqueConstraint(
                fields=["is_active"],
                condition=Q(is_active=True, tenant__isnull=True),
                name="toolpolicy_one_active_global",
            ),
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(is_active=True, tenant__isnull=False, service_account__isnull=True),
                name="toolpolicy_one_active_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["service_account"],
                condition=Q(is_active=True, service_account__isnull=False),
                name="toolpolicy_one_active_per_service_account",
            ),
            models.CheckConstraint(
                condition=Q(approval_ttl_s__gte=MIN_APPROVAL_TTL_S, approval_ttl_s__lte=MAX_APPROVAL_TTL_S),
                name="toolpolicy_approval_ttl_in_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApprovalRequest(models.Model):
    """A human decision on one exact call: tenant, caller, tool, connection and args hash.

    Approved requests are consumed by the call they approve, so an approval
    runs the tool at most once. While it is pending the call's arguments are
    kept for the approver, sealed with the key ring and bound to this row and
    tenant (`args_sealed`); the column is nulled when the request is decided or
    expires, so no argument outlives the decision it was kept for.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        CONSUMED = "consumed", "Consumed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals")
    service_account = models.ForeignKey(ServiceAccount, on_delete=models.CASCADE, related_name="approvals")
    tool_id = models.CharField(max_length=64)
    effect = models.CharField(max_length=32, choices=EFFECT_CHOICES)
    consequence_level = models.CharField(max_length=8, choices=CONSEQUENCE_CHOICES, default="low")
    # Why this call needed a person (the policy's rule or the tool's requires_confirmation).
    required_because = models.CharField(max_length=200, blank=True)
    approver = models.CharField(max_length=16, choices=Approver.choices, default=Approver.OPERATOR)
    connection_id = models.CharField(max_length=64, blank=True)
    # The person the call is made for (`user:<id>`, from their subject token); blank: no one.
    subject_id = models.CharField(max_length=64, blank=True)
    args_sha256 = models.CharField(max_length=64)
    args_sealed = models.BinaryField(null=True, blank=True, editable=False)
    args_bytes = models.PositiveIntegerField(default=0, editable=False)
    tool_call_id = models.CharField(max_length=128)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who decided, as text: the admin user's name, or `os:<user>` for `manage.py approvals decide`
    # (operators' runbooks run as operating-system users, who have no Django account).
    decided_by_name = models.CharField(max_length=150, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="approval_status_expires"),
            # An MCP client's repeat of a person's call finds its request by binding (approval_open_for_call).
            models.Index(fields=["service_account", "subject_id", "args_sha256"], name="approval_call_binding"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "tool_call_id"],
                condition=Q(status__in=["pending", "approved"]),
                name="approval_one_open_per_call",
            )
        ]

    def __str__(self) -> str:
        # What an operator reads in titles and breadcrumbs: the call and its caller, not the row's UUID.
        when = f"{self.created_at:%Y-%m-%d %H:%M} UTC" if self.created_at else "new"
        return f"{self.tool_id} for {self.service_account}, {when} ({self.status})"

    @property
    def status_now(self) -> str:
        return self.status_at(timezone.now())

    def status_at(self, now: datetime) -> str:
        """The status a caller sees: a pending or approved request past its expiry is `expired`."""
        if self.status in (self.Status.PENDING, self.Status.APPROVED) and self.expires_at <= now:
            return "expired"
        return str(self.status)


class GovernanceState(models.Model):
    """Two counters processes re-read to keep their caches current (policies_app/governance.py).

    Row 1's `generation` grows with every governance change: processes cache
    service accounts, policies and tool switches, and a changed generation
    drops their caches, so an operator's change applies on the very next call
    in every process. Row 2 counts changes to single cached rows (a
    connection's tokens): a process that missed their pushes drops those rows.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    generation = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id__in=(1, 2)), name="governancestate_two_counters")]

    def __str__(self) -> str:
        return f"generation {self.generation}"


class RuleAction(models.TextChoices):
    """What an argument rule does when its condition holds (runner/rules.py has the precedence)."""

    DENY = "deny", "Deny"
    REQUIRE_APPROVAL = "require_approval", "Require approval (the policy's approvers)"
    REQUIRE_CONFIRMATION = "require_confirmation", "Require confirmation (the person the call is for)"
    ALLOW = "allow", "Allow (an exception to a broader scope's deny)"


class GuardAction(models.TextChoices):
    """What a result guard does with a secret it finds (runner/guardrails.py)."""

    REDACT = "redact", "Redact each match"
    WITHHOLD = "withhold", "Withhold the result (a tool error the model reads)"
    RECORD = "record", "Only record it in the audit"


class ArgumentScan(models.TextChoices):
    """What a guard does with a secret in a call's arguments (runner/guardrails.py); never a rewrite of them."""

    IGNORE = "ignore", "Results only"
    REFUSE = "refuse", "Refuse the call"
    RECORD = "record", "Only record it in the audit"


class ScopedRule(GovernedScope, models.Model):
    """What argument rules and result guards share: a scope as policies have, the tools covered, a message.

    Scope is global (no tenant), a tenant, or one service account of a tenant.
    Tools are ids or `*` patterns (policies_app/toolpatterns.py) and tags; a
    rule that covers no tool is refused at save.
    """

    name = models.SlugField(max_length=100, unique=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    service_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tools = models.JSONField(default=list, blank=True, help_text="Tool ids or patterns with *, e.g. github__*.")
    tags = models.JSONField(default=list, blank=True, help_text="Tool tags: the rule covers every tool with one.")
    message = models.CharField(
        max_length=500, blank=True, help_text="What the model reads when this rule acts. Never put a secret here."
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ArgumentRule(ScopedRule):
    """A rule on what a call does: a CEL condition over its arguments and context, and an action.

    Checked when saved (policies_app/cel.py compiles it, bounds its size and
    nesting), compiled once per governance generation, evaluated after input
    validation and before the broker; the audit row names the rule that decided.
    """

    condition = models.TextField(help_text="CEL, true when the rule applies, e.g. !args.repo.startsWith('acme/').")
    action = models.CharField(max_length=24, choices=RuleAction.choices)

    class Meta(ScopedRule.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(service_account__isnull=True) | Q(tenant__isnull=False),
                name="argumentrule_service_account_needs_tenant",
            ),
            models.CheckConstraint(
                condition=Q(action__in=[choice.value for choice in RuleAction]), name="argumentrule_action_known"
            ),
        ]


class ResultGuard(ScopedRule):
    """A guard on what a call answers: built-in secret detectors and an operator's patterns, and an action.

    Applied after allowlist redaction and before the result budget, to built-in
    tools and pinned upstream definitions alike. Guards add up across scopes.
    """

    detectors = models.JSONField(
        default=list, blank=True, help_text="Built-in detectors: aws_access_key, aws_secret_key, private_key."
    )
    patterns = models.JSONField(
        default=list, blank=True, help_text="Extra regular expressions (RE2 syntax), one secret kind each."
    )
    action = models.CharField(max_length=16, choices=GuardAction.choices, default=GuardAction.REDACT)
    arguments = models.CharField(
        max_length=16,
        choices=ArgumentScan.choices,
        default=ArgumentScan.IGNORE,
        help_text="Also scan a call's arguments: refuse the call, or only record what was found.",
    )

    class Meta(ScopedRule.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(service_account__isnull=True) | Q(tenant__isnull=False),
                name="resultguard_service_account_needs_tenant",
            ),
            models.CheckConstraint(
                condition=Q(arguments__in=[choice.value for choice in ArgumentScan]),
                name="resultguard_arguments_known",
            ),
            models.CheckConstraint(
                condition=Q(action__in=[choice.value for choice in GuardAction]), name="resultguard_action_known"
            ),
        ]
