"""The call's arguments kept for the person who approves it: sealed, size-capped, shown safely.

An approver who sees only a hash approves blind. So a pending approval keeps
the call's args, sealed with the key ring (AES-GCM) and bound to the request's
id and tenant: a blob copied to another request or tenant does not open. The
key ring belongs to connections_app (layer 3), which this app must not import,
so this module states what it needs (an `ArgsVault`) and connections_app
installs the key-ring implementation when Django starts, as it does for MCP
servers' tokens. The sealed column is nulled once the request is decided or
has expired (services.approval_decide, approval_expired_erase).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runner.schema import canonical_json

if TYPE_CHECKING:
    from policies_app.models import ApprovalRequest

# Larger args are not kept (the approver sees their size and hash): a page of JSON is
# what a person can review, and the column stays small.
MAX_KEPT_ARGS_BYTES = 16 * 1024


class ArgsVault(Protocol):
    def seal(self, plaintext: bytes, *, approval_id: str, tenant_id: str) -> bytes: ...

    def open(self, blob: bytes, *, approval_id: str, tenant_id: str) -> bytes:
        """The plaintext, or an error that carries neither plaintext nor key material."""
        ...


class ArgsVaultMissing(RuntimeError):
    pass


_installed: dict[str, ArgsVault] = {}


def install_args_vault(vault: ArgsVault) -> None:
    _installed["vault"] = vault


def _vault() -> ArgsVault:
    vault = _installed.get("vault")
    if vault is None:
        raise ArgsVaultMissing("no approval args vault is installed (connections_app is not loaded)")
    return vault


def approval_args_seal(approval_id: str, tenant_id: str, args: Any) -> tuple[bytes | None, int]:
    """(sealed blob or None when too large or not JSON, size of the args' canonical JSON in bytes)."""
    try:
        plaintext = canonical_json(args)
    except (TypeError, ValueError):
        return None, 0
    if len(plaintext) > MAX_KEPT_ARGS_BYTES:
        return None, len(plaintext)
    return _vault().seal(plaintext, approval_id=approval_id, tenant_id=tenant_id), len(plaintext)


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
        plaintext = _vault().open(
            bytes(approval.args_sealed), approval_id=str(approval.pk), tenant_id=str(approval.tenant_id)
        )
    except Exception as exc:  # a tampered or moved blob, or a key gone from the ring: say so, show nothing
        return ArgsForApprover(None, f"The kept arguments cannot be opened ({type(exc).__name__}); deny if unsure.")
    return ArgsForApprover(json.dumps(json.loads(plaintext), indent=2, sort_keys=True, ensure_ascii=False), "")
