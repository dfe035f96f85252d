"""Toolsets: named subsets of the catalog that an agent sees instead of the whole of it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Toolset(models.Model):
    """A named set of tool ids and tags, of one tenant or global (no tenant).

    Hundreds of governed tools make models choose worse; a toolset is the few a
    task needs, exposed at `/mcp/t/<name>` and `GET /api/v1/tools?toolset=<name>`.
    It only ever narrows: a caller sees policy ∩ subject rules ∩ toolset. A tool
    belongs to it when its id is listed or it carries one of the listed tags.
    A tenant's toolset hides a global one of the same name for that tenant.
    """

    tenant = models.ForeignKey(
        "policies_app.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="toolsets"
    )
    name = models.SlugField(
        max_length=64,
        help_text="Lower-case letters, digits, '-' and '_'. Agents connect to /mcp/t/ followed by this name.",
    )
    description = models.CharField(max_length=500, blank=True)
    tool_ids = models.JSONField(default=list, blank=True)
    tags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="toolset_name_unique_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="toolset_global_name_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug if self.tenant_id else '*'}/{self.name}"
