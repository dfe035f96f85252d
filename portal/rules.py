"""The portal's rules page: what the argument rules and result guards say about this tenant's tools, read-only.

Operators write rules and guards (admin, policy files); a tenant's owners and
members read here which of them can apply to their calls, so a refusal with a
rule's message is no surprise. Nothing here is editable, and nothing an
operator keeps to themselves (a guard's own patterns) is shown.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from policies_app.rules import rules_shown_to_tenant
from portal.tenancy import tenant_member_required

SECTION = "rules"


@tenant_member_required
@require_GET
def rules(request: HttpRequest) -> HttpResponse:
    shown = rules_shown_to_tenant(tenant_id=request.tenant.pk)
    return render(
        request,
        "tenant/rule_list.html",
        {
            "section": SECTION,
            "rules": [row for row in shown if row.kind == "rule"],
            "guards": [row for row in shown if row.kind == "guard"],
        },
    )
