"""Registered upstream MCP servers and the definitions pinned for each of their tools."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from runner.types import ToolEffect

EFFECT_CHOICES = [(effect.value, effect.value) for effect in ToolEffect]


class McpServer(models.Model):
    """An operator-registered MCP server whose tools Toolgate governs: a streamable-HTTP URL, or a
    stdio command that Toolgate's MCP host (`manage.py mcp_host`) runs as a child process.

    The operator token (for servers without a per-tenant `provider`) is sealed
    with the key ring and bound to this row, so a blob copied to another server
    does not open. A removed server keeps its row: its tools' ids stay in audit
    rows and policy history, and `mcp_upstream add` brings it back.
    """

    class DiscoveryStatus(models.TextChoices):
        NEVER = "never", "Never run"
        OK = "ok", "OK"
        FAILED = "failed", "Failed"

    class Transport(models.TextChoices):
        HTTP = "http", "Streamable HTTP"
        STDIO = "stdio", "stdio (run by the MCP host)"

    slug = models.CharField(max_length=32, unique=True)
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    url = models.URLField(max_length=2000, blank=True)
    # stdio servers: the argv (split like a shell's, never run through one), declared plain
    # environment values, and sealed values (a JSON object NAME -> value) handed to the child.
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    secret_env_names = models.JSONField(default=list, blank=True, editable=False)
    secret_env_sealed = models.BinaryField(null=True, blank=True, editable=False)
    secret_env_key_id = models.CharField(max_length=64, blank=True, editable=False)
    # npm servers: NAME@VERSION installed when the server was added (`--npm`), into the host's
    # packages/<slug>/ directory; the pinned version is part of what the operator approved.
    npm_package = models.CharField(
        max_length=300, blank=True, help_text="stdio: the npm package installed at add, NAME@VERSION (read-only)"
    )
    pip_package = models.CharField(
        max_length=300, blank=True, help_text="stdio: the pip package installed at add, NAME==VERSION (read-only)"
    )
    # Folders bound into the child's sandbox: [{"host": ..., "sandbox": ..., "writable": bool}].
    binds = models.JSONField(default=list, blank=True)
    credential_env = models.CharField(
        max_length=64, blank=True, help_text="stdio with a provider: the child's variable for the connection secret"
    )
    # stdio servers: the HOST:PORT names the child may reach through the host's egress proxy
    # (none: no network at all), and whether it may run without a sandbox when DEBUG=False.
    allowed_hosts = models.JSONField(default=list, blank=True)
    trusted_unsandboxed = models.BooleanField(
        default=False, help_text="stdio: may run without bubblewrap in production (it then sees the host's network)"
    )
    provider = models.CharField(
        max_length=64, blank=True, help_text="Tools need a tenant connection of this provider (else the token below)."
    )
    operator_token_sealed = models.BinaryField(null=True, blank=True, editable=False)
    operator_token_key_id = models.CharField(max_length=64, blank=True, editable=False)
    discover_seconds = models.PositiveIntegerField(default=300)
    enabled = models.BooleanField(default=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    last_discovery_at = models.DateTimeField(null=True, blank=True)
    last_discovery_status = models.CharField(
        max_length=16, choices=DiscoveryStatus.choices, default=DiscoveryStatus.NEVER
    )
    last_discovery_error = models.CharField(max_length=500, blank=True)
    protocol_version = models.CharField(max_length=32, blank=True)
    # Whether the last discovery saw the server declare `completions` (suggestions for its prompts'
    # arguments): Toolgate offers completion to a caller only for prompts of such servers.
    offers_completions = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = "MCP server"
        db_table = "tools_app_mcpserver"  # the table it was created with, in tools_app
        constraints = [
            models.CheckConstraint(condition=models.Q(discover_seconds__gte=10), name="mcpserver_discover_min_10s"),
            models.CheckConstraint(
                condition=(models.Q(transport="http") & ~models.Q(url=""))
                | (models.Q(transport="stdio") & models.Q(url="")),
                name="mcpserver_url_xor_command",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def has_operator_token(self) -> bool:
        return bool(self.operator_token_sealed)

    @property
    def is_stdio(self) -> bool:
        return self.transport == self.Transport.STDIO


class McpTool(models.Model):
    """One upstream tool: its live definition (last listed) beside the approved one.

    Only the approved definition is ever bound into the runner. A live
    definition that differs from the approved one quarantines the tool
    (disabled, `drifted`) until an operator approves it; the approved copy is
    kept, so the admin can show both side by side.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending review"
        APPROVED = "approved", "Approved"
        DRIFTED = "drifted", "Drifted (quarantined)"
        REMOVED = "removed", "Removed upstream"

    server = models.ForeignKey(McpServer, on_delete=models.PROTECT, related_name="tools")
    tool = models.OneToOneField("tools_app.Tool", on_delete=models.PROTECT, related_name="mcp")
    upstream_name = models.CharField(max_length=512)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    live_definition = models.JSONField()
    live_hash = models.CharField(max_length=64)
    approved_definition = models.JSONField(null=True, blank=True)
    approved_hash = models.CharField(max_length=64, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_via = models.CharField(max_length=150, blank=True, help_text="admin, policy import, or a command")
    suggested_effect = models.CharField(max_length=32, choices=EFFECT_CHOICES)
    effect_confirmed_at = models.DateTimeField(null=True, blank=True)
    effect_confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    drifted_at = models.DateTimeField(null=True, blank=True)
    enabled_before_quarantine = models.BooleanField(default=False)
    removed_at = models.DateTimeField(null=True, blank=True)
    # Whether calls of this tool may ask the caller's client mid-call (docs/mcp-asking.md): elicitation
    # (a question for the person) and sampling (a completion from the client's model, also capped by
    # the caller's policy). Allowed for one approved definition: `asking_hash` is the approved_hash
    # they were allowed for, so approving a new definition allows neither until an operator says so.
    elicitation_allowed = models.BooleanField(default=False)
    sampling_allowed = models.BooleanField(default=False)
    asking_hash = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["server__slug", "upstream_name"]
        verbose_name = "MCP tool"
        db_table = "tools_app_mcptool"  # the table it was created with, in tools_app
        constraints = [
            models.UniqueConstraint(fields=["server", "upstream_name"], name="mcptool_unique_name_per_server"),
            models.CheckConstraint(
                condition=~models.Q(status="approved") | ~models.Q(approved_hash=""),
                name="mcptool_approved_has_hash",
            ),
        ]
        indexes = [models.Index(fields=["status"], name="mcptool_status")]

    def __str__(self) -> str:
        return self.tool_id

    @property
    def asks_allowed(self) -> tuple[bool, bool]:
        """(elicitation, sampling) allowed for the approved definition in force; neither for another."""
        if not self.approved_hash or self.asking_hash != self.approved_hash:
            return (False, False)
        return (self.elicitation_allowed, self.sampling_allowed)


class McpFeature(models.Model):
    """One upstream resource, resource template or prompt: its live definition beside the approved one, like `McpTool`.

    Not a catalog `Tool`: a resource is read and a prompt fetched, never called, and neither
    may appear in a tool list. Governed the same way: discovered disabled and pending, pinned by
    the hash of what an operator approved, quarantined (disabled, `drifted`) when the live
    definition moves away from it, and served only while approved, enabled and allowed by the
    caller's policy (`allowed_resources`, `allowed_prompts`).
    """

    class Kind(models.TextChoices):
        RESOURCE = "resource", "Resource"
        PROMPT = "prompt", "Prompt"
        TEMPLATE = "template", "Resource template"

    server = models.ForeignKey(McpServer, on_delete=models.PROTECT, related_name="features")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The upstream's own key (a resource's URI, a template's URI template, a prompt's name) and what
    # callers see for it (`toolgate://<slug>/...`, `mcp__<slug>__<name>`); `ident` is the short id
    # audit rows keep.
    upstream_key = models.CharField(max_length=2000)
    name = models.CharField(max_length=2100)
    ident = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=McpTool.Status.choices, default=McpTool.Status.PENDING)
    is_enabled = models.BooleanField(default=False)
    live_definition = models.JSONField()
    live_hash = models.CharField(max_length=64)
    approved_definition = models.JSONField(null=True, blank=True)
    approved_hash = models.CharField(max_length=64, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_via = models.CharField(max_length=150, blank=True)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    drifted_at = models.DateTimeField(null=True, blank=True)
    enabled_before_quarantine = models.BooleanField(default=False)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server__slug", "kind", "name"]
        verbose_name = "MCP resource or prompt"
        db_table = "tools_app_mcpfeature"  # the table it was created with, in tools_app
        verbose_name_plural = "MCP resources and prompts"
        constraints = [
            models.UniqueConstraint(fields=["server", "kind", "upstream_key"], name="mcpfeature_unique_key"),
            models.UniqueConstraint(fields=["kind", "name"], name="mcpfeature_unique_name"),
            models.CheckConstraint(
                condition=~models.Q(status="approved") | ~models.Q(approved_hash=""),
                name="mcpfeature_approved_has_hash",
            ),
            models.CheckConstraint(
                condition=~models.Q(is_enabled=True) | models.Q(status="approved"),
                name="mcpfeature_enabled_only_approved",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class McpFeatureRead(models.Model):
    """The audit row of one `resources/read`, `prompts/get` or `completion/complete`, refusals included.

    A sibling of `ToolInvocation` rather than a `kind` on it: the invocation table is
    partitioned, claimed for idempotency and written by prepared statements on the tool
    path; a read has no `tool_call_id` to replay and must not cost the tool path anything.
    It keeps references and outcomes only (the arguments as a hash, never the contents).
    """

    tenant = models.ForeignKey("policies_app.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    service_account = models.ForeignKey(
        "policies_app.ServiceAccount", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    subject_id = models.CharField(max_length=64, blank=True)

    class Kind(models.TextChoices):
        RESOURCE = "resource", "Resource read"
        PROMPT = "prompt", "Prompt fetch"
        COMPLETION = "completion", "Prompt argument completion"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    ident = models.CharField(max_length=64, blank=True)
    name = models.CharField(max_length=2100)
    ok = models.BooleanField(default=False)
    error_code = models.CharField(max_length=32, blank=True)
    safe_message = models.CharField(max_length=500, blank=True)
    args_sha256 = models.CharField(max_length=64, blank=True)
    result_bytes = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = "MCP resource read or prompt fetch"
        db_table = "tools_app_mcpfeatureread"  # the table it was created with, in tools_app
        indexes = [models.Index(fields=["tenant", "-started_at"], name="mcpfeatureread_tenant_started")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {'ok' if self.ok else self.error_code}"
