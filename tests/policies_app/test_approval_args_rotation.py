"""rotate_encryption_keys and pending approvals: the args kept for the approver follow the key ring.

The rows store no key id beside `args_sealed`: the rotation reads it from the
envelope's header, in SQL (core.key_rotation).
"""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command

from core import crypto
from core.key_rotation import UNREADABLE_ENVELOPE, envelope_key_usage, not_sealed_under
from policies_app.approval_args import approval_args_view
from policies_app.models import ApprovalRequest
from policies_app.services import approval_decide
from tests.factories import TenantFactory, service_account_with_key
from tests.support.approvals import pending_approval

pytestmark = pytest.mark.django_db

K1 = hashlib.sha256(b"approval rotation test key k1").digest()
K2 = hashlib.sha256(b"approval rotation test key k2").digest()
OLD = {"k1": K1}
ROTATING = {"k2": K2, "k1": K1}
NEW = {"k2": K2}
ARGS = {"repo": "octo/hello", "title": "Rotate me 4b1d"}
SUMMARY = (
    "pending approvals' arguments: rewrapped {}, already current {}, skipped because changed concurrently {}, failed {}"
)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("rotate_encryption_keys", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def account():
    account, _key = service_account_with_key(TenantFactory(slug="acme"), name="agent")
    return account


def pending_under(settings, ring: dict[str, bytes], account, call_id: str) -> ApprovalRequest:
    settings.TOOLGATE_KEY_RING = ring
    return pending_approval(account, ARGS, tool_call_id=call_id)


def columns() -> dict[str, bytes | None]:
    return {
        str(pk): bytes(blob) if blob is not None else None
        for pk, blob in ApprovalRequest.objects.values_list("pk", "args_sealed")
    }


def test_a_pending_approvals_args_stay_readable_after_rotation_with_the_old_key_dropped(settings, account):
    approval = pending_under(settings, OLD, account, "c1")
    settings.TOOLGATE_KEY_RING = ROTATING

    out = run()

    assert SUMMARY.format(1, 0, 0, 0) in out.splitlines()
    assert out.splitlines()[-2:] == [
        "key ids in use now: k2 (pending approvals' arguments 1)",
        "no sealed value uses k1: can be removed from TOOLGATE_ENCRYPTION_KEYS",
    ]
    settings.TOOLGATE_KEY_RING = NEW
    approval.refresh_from_db()
    shown = approval_args_view(approval)
    assert (shown.note, '"title": "Rotate me 4b1d"' in (shown.text or "")) == ("", True)
    assert "Rotate me" not in out


def test_without_the_rotation_the_approver_loses_the_args(settings, account):
    """The trap the rotation closes: args sealed under k1 cannot be shown once k1 is gone."""
    approval = pending_under(settings, OLD, account, "c1")
    settings.TOOLGATE_KEY_RING = NEW

    shown = approval_args_view(approval)

    assert shown.text is None
    assert shown.note == "The kept arguments cannot be opened (EncryptionKeyMissing); deny if unsure."


def test_rows_are_walked_in_batches_and_decided_requests_are_not_touched(settings, account):
    old = [pending_under(settings, OLD, account, f"c{n}") for n in range(3)]
    current = pending_under(settings, ROTATING, account, "current")
    decided = pending_under(settings, OLD, account, "decided")
    approval_decide(approval=decided, approve=False, decided_by=None, decided_by_name="os:ops")
    settings.TOOLGATE_KEY_RING = ROTATING
    before = columns()

    out = run("--batch-size", "2")

    assert [line for line in out.splitlines() if "batch" in line] == [
        "rotating to key 'k2': 1 already current, 3 to rewrap, 2 per batch",
        "pending approvals' arguments batch 1: 2 read, 2 rewrapped, 0 skipped, 0 failed",
        "pending approvals' arguments batch 2: 1 read, 1 rewrapped, 0 skipped, 0 failed",
    ]
    assert SUMMARY.format(3, 1, 0, 0) in out.splitlines()
    after = columns()
    assert after[str(current.pk)] == before[str(current.pk)]
    assert after[str(decided.pk)] is None
    assert all(crypto.envelope_key_id(after[str(row.pk)]) == "k2" for row in old)


def test_a_request_decided_while_the_rewrap_runs_stays_erased(settings, account, monkeypatch):
    approval = pending_under(settings, OLD, account, "c1")
    settings.TOOLGATE_KEY_RING = ROTATING
    real_open = crypto.open_sealed

    def open_then_an_approver_decides(blob, *, binding, ring):
        opened = real_open(blob, binding=binding, ring=ring)
        approval_decide(approval=approval, approve=True, decided_by=None, decided_by_name="os:ops")
        return opened

    monkeypatch.setattr(crypto, "open_sealed", open_then_an_approver_decides)
    out = run()
    monkeypatch.undo()

    assert SUMMARY.format(0, 0, 1, 0) in out.splitlines()
    approval.refresh_from_db()
    assert (approval.status, approval.args_sealed) == (ApprovalRequest.Status.APPROVED, None)
    assert "pending approvals' arguments" not in run()  # nothing sealed is left of that kind


def test_dry_run_counts_by_the_envelopes_key_and_writes_nothing(settings, account):
    pending_under(settings, OLD, account, "c1")
    pending_under(settings, ROTATING, account, "c2")
    settings.TOOLGATE_KEY_RING = ROTATING
    before = columns()

    out = run("--dry-run")

    assert out.splitlines()[1:] == [
        "connections: already current 0, to rewrap 0",
        "pending approvals' arguments: already current 1, to rewrap 1 (k1: 1)",
        "key ids in use now: k1 (pending approvals' arguments 1), k2 (pending approvals' arguments 1)",
    ]
    assert columns() == before


def test_key_ids_are_read_from_envelope_headers_in_sql(settings, account):
    # a key id that is a prefix of another must not be taken for it: the header holds its length
    first = pending_under(settings, {"k": K1}, account, "c1")
    second = pending_under(settings, {"k2": K2}, account, "c2")
    broken = pending_under(settings, {"k2": K2}, account, "c3")
    ApprovalRequest.objects.filter(pk=broken.pk).update(args_sealed=b"\x09garbage")
    rows = ApprovalRequest.objects.all()

    assert envelope_key_usage(rows, "args_sealed") == {"k": 1, "k2": 1, UNREADABLE_ENVELOPE: 1}
    assert sorted(str(row.pk) for row in not_sealed_under(rows, "args_sealed", "k")) == sorted(
        [str(second.pk), str(broken.pk)]
    )
    assert sorted(str(row.pk) for row in not_sealed_under(rows, "args_sealed", "k2")) == sorted(
        [str(first.pk), str(broken.pk)]
    )
