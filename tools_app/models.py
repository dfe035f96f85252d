"""The Tool catalog and the ToolInvocation audit log."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from runner.types import ConnectionChoice, ConsequenceLevel, Decision, ErrorCode, ToolEffect
from tools_app.toolset_models import Toolset

__all__ = ["Tool", "ToolCallClaim", "ToolInvocation", "Toolset"]


class Tool(models.Model):
    """One catalog row per tool id, synced from the code registry and from MCP discovery.

    `is_enabled` is the operator's kill switch, above every policy; new tools
    arrive disabled. A tool gone from code keeps its row (with `missing_since`)
    so its history and switches survive a bad deploy.
    """

    class Source(models.TextChoices):
        CODE = "code", "Code"
        MCP = "mcp", "MCP"

    id = models.CharField(primary_key=True, max_length=64)
    description = models.TextField()
    input_schema = models.JSONField()
    schema_hash = models.CharField(max_length=64)
    schema_changed_at = models.DateTimeField()
    effect = models.CharField(max_length=32, choices=[(e.value, e.value) for e in ToolEffect])
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.CODE)
    provider = models.CharField(max_length=64, blank=True)
    requires_connection = models.BooleanField(default=False)
    # Tool metadata (consequence level, confirmation, tags, version). Code tools take it from their contract at
    # every sync; upstream MCP tools start at the most restrictive level and an operator sets it (discovery never
    # overwrites it).
    consequence_level = models.CharField(
        max_length=8,
        choices=[(level.value, level.value) for level in ConsequenceLevel],
        default=ConsequenceLevel.HIGH.value,
    )
    requires_confirmation = models.BooleanField(
        default=False, help_text="Every call waits for a person's approval, whatever the policy says."
    )
    tags = models.JSONField(default=list, blank=True)
    version = models.CharField(max_length=32, blank=True)
    # The display title (MCP's `title`): a code tool's from its contract, an upstream tool's from the definition
    # the row mirrors. Kept here because the full-text search document (migration 0012) weighs it like the id.
    title = models.TextField(blank=True, default="")
    is_enabled = models.BooleanField(default=False)
    missing_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id


class ToolInvocation(models.Model):
    """The audit row: one per call attempt, refusals included.

    Holds references and outcomes only: the args are kept as a hash, the value
    as the already-redacted result, and no secret ever reaches a column. The
    partial unique constraint makes a `tool_call_id` that actually ran unique
    per tenant, which is what idempotency rests on; refused attempts may repeat.

    A pending row is a claim with a lease: if its process dies mid-call, a
    repeat takes the claim over once `lease_expires_at` has passed, bumping
    `attempt` so the dead process's late write (if it ever comes) cannot
    overwrite the new attempt's row.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Pending"  # claimed for idempotency, outcome not written yet
        DONE = "done", "Done"

    # No index of its own: every index below starts with the tenant (one index less per audit INSERT).
    tenant = models.ForeignKey("policies_app.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    service_account = models.ForeignKey(
        "policies_app.ServiceAccount", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.DONE)
    tool_call_id = models.CharField(max_length=128)
    run_id = models.CharField(max_length=128, blank=True)
    tool_id = models.CharField(max_length=128)
    connection_id = models.CharField(max_length=64, blank=True)
    grant_id = models.CharField(max_length=64, blank=True)
    # On whose behalf (`user:<id>`, from the delegation the server found for the subject token), and
    # why the authorization stage refused (a category such as `revoked`; never the token).
    subject_id = models.CharField(max_length=64, blank=True)
    authz_reason = models.CharField(max_length=32, blank=True)
    # The argument rule that decided the call and its action (policies_app ArgumentRule; blank: none had a say),
    # and what the result guards found and did: {"action", "guards", "found": {kind: count}}, never the text.
    rule_id = models.CharField(max_length=64, blank=True)
    rule_action = models.CharField(max_length=24, blank=True)
    guardrail = models.JSONField(null=True, blank=True)
    # How `connection_id` was found: named by the call, or chosen for a person's call that named none
    # (`only_declared`, `personal_first`; runner.types.ConnectionChoice). Blank: no connection was used.
    connection_choice = models.CharField(
        max_length=16, blank=True, choices=[(choice.value, choice.value) for choice in ConnectionChoice]
    )
    # Who confirmed or approved the request this run rests on (the approval's decider, by name: a
    # portal or admin user, or `os:<user>` from the command line); set on the run after the decision.
    approved_by = models.CharField(max_length=150, blank=True)
    decision = models.CharField(max_length=32, choices=[(d.value, d.value) for d in Decision])
    ok = models.BooleanField(default=False)
    executed = models.BooleanField(default=False)
    error_code = models.CharField(max_length=32, blank=True, choices=[(c.value, c.value) for c in ErrorCode])
    safe_message = models.CharField(max_length=500, blank=True)
    args_sha256 = models.CharField(max_length=64, blank=True)
    result = models.JSONField(null=True, blank=True)
    # The content blocks the tool answered (an upstream MCP tool's blocks as sent, after the guards;
    # a `tool_error`'s own error blocks), kept so a repeat replays them; null for value-only tools.
    content = models.JSONField(null=True, blank=True)
    result_bytes = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "tool_call_id"],
                condition=Q(executed=True),
                name="toolinvocation_executed_call_unique_per_tenant",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-started_at"], name="toolinv_tenant_started"),
            models.Index(fields=["tenant", "run_id"], name="toolinv_tenant_run"),
            models.Index(fields=["tenant", "tool_call_id"], name="toolinv_tenant_call"),
            # The rows retention must keep whatever their age (tools_app/audit.py): few, so a partition
            # is checked for them through this small index instead of read whole before it is dropped.
            models.Index(
                fields=["started_at"],
                condition=Q(state="pending") | Q(lease_expires_at__isnull=False),
                name="toolinv_in_window",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_call_id} {self.tool_id} {'ok' if self.ok else self.error_code}"


class ToolCallClaim(models.Model):
    """Which `tool_call_id`s ran in a tenant, on PostgreSQL: the exactly-once guarantee of a partitioned audit table.

    The audit table is partitioned by `started_at`, and PostgreSQL cannot make
    a key unique across partitions unless the key holds the partition key; a
    repeat that arrives after the day changes would land in another partition.
    This narrow, unpartitioned table is that key: every executed row writes its
    claim in the same statement as the row (tools_app/audit.py), and a repeat's
    claim collides here whatever the partitions. Retention deletes a claim with
    its row (`claimed_at` is never earlier than the row's `started_at`). SQLite
    keeps the audit table's own partial unique constraint and leaves this empty.
    """

    pk = models.CompositePrimaryKey("tenant", "tool_call_id")
    tenant = models.ForeignKey("policies_app.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    tool_call_id = models.CharField(max_length=128)
    claimed_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.tool_call_id
