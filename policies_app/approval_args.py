"""The call's arguments kept for the person who approves it: sealed, size-capped, shown safely.

An approver who sees only a hash approves blind. So a pending approval keeps
the call's args, sealed with the key ring (AES-GCM) and bound to the request's
id and tenant: a blob copied to another request or tenant does not open. The
sealed column is nulled once the request is decided or has expired
(services.approval_decide, approval_expired_erase).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.crypto import KeyRing, Sealed, open_sealed, reseal, seal
from runner.schema import canonical_json

if TYPE_CHECKING:
    from policies_app.models import ApprovalRequest

# Larger args are not kept (the approver sees their size and hash): a page of JSON is
# what a person can review, and the column stays small.
MAX_KEPT_ARGS_BYTES = 16 * 1024


def _binding(approval_id: str, tenant_id: str) -> dict[str, str]:
    return {"approval_args": approval_id, "tenant": tenant_id}


def approval_args_seal(approval_id: str, tenant_id: str, args: Any) -> tuple[bytes | None, int]:
    """(sealed blob or None when too large or not JSON, size of the args' canonical JSON in bytes)."""
    try:
        plaintext = canonical_json(args)
    except (TypeError, ValueError):
        return None, 0
    if len(plaintext) > MAX_KEPT_ARGS_BYTES:
        return None, len(plaintext)
    return seal(plaintext, binding=_binding(approval_id, tenant_id), ring=KeyRing.from_settings()).blob, len(plaintext)


def approval_args_reseal(approval_id: str, tenant_id: str, blob: bytes, *, ring: KeyRing) -> Sealed:
    """The kept args sealed again under `ring`'s primary key (key rotation), or a CredentialError."""
    return reseal(blob, binding=_binding(approval_id, tenant_id), ring=ring)


@dataclass(frozen=True, slots=True)
class ArgsForApprover:
    """What an approver is shown: the args as indented JSON text, or why there is none."""

    text: str | None
    note: str


def approval_args_view(approval: ApprovalRequest) -> ArgsForApprover:
    """The kept args of a request, for a template's autoescaped `<pre>` (never marked safe)."""
    if approval.args_sealed is None:
        if approval.status != approval.Status.PENDING:
            return ArgsForApprover(None, "Erased when the request was decided.")
        if approval.args_bytes > MAX_KEPT_ARGS_BYTES:
            return ArgsForApprover(
                None,
                f"The arguments were {approval.args_bytes} bytes, more than the {MAX_KEPT_ARGS_BYTES} "
                "kept for approvers; only their sha256 binds this approval.",
            )
        return ArgsForApprover(None, "Erased: the request expired.")
    try:
        binding = _binding(str(approval.pk), str(approval.tenant_id))
        plaintext = open_sealed(bytes(approval.args_sealed), binding=binding, ring=KeyRing.from_settings())
    except Exception as exc:  # a tampered or moved blob, or a key gone from the ring: say so, show nothing
        return ArgsForApprover(None, f"The kept arguments cannot be opened ({type(exc).__name__}); deny if unsure.")
    return ArgsForApprover(json.dumps(json.loads(plaintext), indent=2, sort_keys=True, ensure_ascii=False), "")
