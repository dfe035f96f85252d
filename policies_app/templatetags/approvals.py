"""Template tags of the operators' admin: how many approval requests wait for someone."""

from __future__ import annotations

from django import template

from policies_app.selectors import approval_pending_count

register = template.Library()


@register.simple_tag
def pending_approvals() -> int:
    return approval_pending_count()
