"""The tenant UI's revoke confirmations: one two-step page for every revocable row.

GET shows what will be revoked and what follows from it (or that it already
is); POST revokes through the model's own service (each built on
`revoke_once`) and goes back to the list with a message that says which of the
two happened. The views keep only what differs: how the row is found (scoped
to the tenant, 404 otherwise), its details, and its words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.models import Revocable

CONFIRM_TEMPLATE = "tenant/confirm_revoke.html"


@dataclass(frozen=True, slots=True)
class RevokeWords:
    """What one kind of revocation says: on the confirmation page and in the message after it."""

    section: str  # the navigation entry the page belongs to
    kind: str  # "connection", "grant", ...: "Revoke <kind> “<name>”?"
    name: str
    consequence: str
    revoked: str  # the message once this POST revoked it
    already: str = ""  # the message when it already was revoked; "That <kind> was already revoked." by default
    back_to: str = ""  # where POST returns (a URL); also Cancel's target unless `cancel_url` says otherwise
    cancel_url: str = ""


def revoke_confirm(
    request: HttpRequest,
    row: Revocable,
    *,
    revoke: Callable[[], bool],
    words: RevokeWords,
    details: Callable[[], list[tuple[str, str]]],
) -> HttpResponse:
    """The confirmation of revoking `row`: GET renders it (details read only then), POST calls `revoke`.

    `revoke()` answers whether this request revoked the row; False (it already
    was, perhaps by a second tab or another person a moment ago) is said as
    such, never as an error.
    """
    if request.method == "POST":
        if revoke():
            messages.success(request, words.revoked)
        else:
            messages.info(request, words.already or f"That {words.kind} was already revoked.")
        return redirect(words.back_to)
    return render(
        request,
        CONFIRM_TEMPLATE,
        {
            "section": words.section,
            "kind": words.kind,
            "name": words.name,
            "already_revoked": row.is_revoked,
            "details": [] if row.is_revoked else details(),
            "consequence": words.consequence,
            "cancel_url": words.cancel_url or words.back_to,
        },
    )
