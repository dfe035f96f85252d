"""`manage.py audit export|prune` and the retention task."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from policies_app.models import Tenant
from tests.factories import TenantFactory
from tools_app.audit import EXPORT_FIELDS, audit_export, audit_prune
from tools_app.models import ToolInvocation
from tools_app.tasks import audit_retention

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 11, 1, tzinfo=UTC)


def row(tenant: Tenant, started_at: datetime, **fields) -> ToolInvocation:
    values = {
        "tool_call_id": f"call-{ToolInvocation.objects.count()}",
        "tool_id": "core__get_current_time",
        "decision": "allow",
        "ok": True,
        "executed": True,
        "result": {"secret_value": "do-not-export"},
        "started_at": started_at,
        "ended_at": started_at + timedelta(milliseconds=5),
        "duration_ms": 5,
        **fields,
    }
    return ToolInvocation.objects.create(tenant=tenant, **values)


def export(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("audit", "export", *args, stdout=out, stderr=err)
    return out.getvalue()


@pytest.fixture
def two_tenants():
    acme, other = TenantFactory(slug="acme"), TenantFactory(slug="other")
    row(acme, DAY - timedelta(seconds=1), tool_call_id="before")
    row(acme, DAY, tool_call_id="first")
    row(other, DAY + timedelta(hours=1), tool_call_id="other-tenant", ok=False, error_code="policy_denied")
    row(acme, DAY + timedelta(hours=2), tool_call_id="second")
    row(acme, DAY + timedelta(days=1), tool_call_id="at-until")
    return acme, other


def test_jsonl_export_streams_the_range_oldest_first_without_results(two_tenants, capsys):
    call_command("audit", "export", "--since", "2026-11-01", "--until", "2026-11-02")
    lines = capsys.readouterr().out.splitlines()

    rows = [json.loads(line) for line in lines]
    assert [r["tool_call_id"] for r in rows] == ["first", "other-tenant", "second"]
    assert list(rows[0]) == list(EXPORT_FIELDS)
    assert rows[1]["tenant"] == "other"
    assert rows[1]["error_code"] == "policy_denied"
    assert rows[0]["started_at"] == "2026-11-01T00:00:00+00:00"
    assert "do-not-export" not in "\n".join(lines)


def test_csv_export_of_one_tenant(two_tenants, tmp_path):
    target = tmp_path / "audit.csv"

    call_command(
        "audit",
        "export",
        "--since",
        "2026-11-01T00:00:00Z",
        "--until",
        "2026-11-03",
        "--tenant",
        "acme",
        "--format",
        "csv",
        "--output",
        str(target),
        stderr=io.StringIO(),
    )

    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [r["tool_call_id"] for r in rows] == ["first", "second", "at-until"]
    assert {r["tenant"] for r in rows} == {"acme"}
    assert rows[0]["ok"] == "True"


def test_export_refuses_a_reversed_or_malformed_range():
    with pytest.raises(CommandError, match="after"):
        export("--since", "2026-11-02", "--until", "2026-11-01")
    with pytest.raises(CommandError, match="ISO 8601"):
        export("--since", "yesterday")


class CountingSink(io.TextIOBase):
    """Counts what is written and keeps nothing, so the memory measured is the exporter's own."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


@pytest.mark.timeout(600)
def test_exporting_20k_rows_stays_within_a_constant_memory_bound():
    tenant = TenantFactory(slug="bulk")
    total, batch = 20_000, 10_000  # ten of the exporter's chunks: enough to tell streaming from holding
    for offset in range(0, total, batch):
        ToolInvocation.objects.bulk_create(
            ToolInvocation(
                tenant=tenant,
                tool_call_id=f"bulk-{n}",
                tool_id="core__get_current_time",
                decision="allow",
                ok=True,
                executed=True,
                safe_message="x" * 100,
                args_sha256="a" * 64,
                started_at=DAY + timedelta(milliseconds=n),
                ended_at=DAY + timedelta(milliseconds=n + 1),
                duration_ms=1,
            )
            for n in range(offset, offset + batch)
        )
    sink = CountingSink()

    tracemalloc.start()
    try:
        written = audit_export(out=sink, export_format="jsonl", since=DAY, until=DAY + timedelta(days=1))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert written == sink.lines == total
    # Holding the rows would take several times the bound; streaming holds one chunk of 2,000.
    assert peak < 12 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


def test_prune_deletes_old_finished_rows_in_batches_and_never_the_idempotency_window():
    tenant = TenantFactory(slug="acme")
    now = timezone.now()
    old = now - timedelta(days=40)
    for _ in range(5):
        row(tenant, old)
    pending = row(
        tenant, old, state="pending", lease_expires_at=old + timedelta(seconds=70), tool_call_id="stale-claim"
    )
    leased = row(tenant, old, state="pending", lease_expires_at=now + timedelta(seconds=30), tool_call_id="running")
    done_but_leased = row(tenant, old, lease_expires_at=now + timedelta(seconds=30), tool_call_id="finishing")
    recent = row(tenant, now - timedelta(days=29), tool_call_id="recent")

    report = audit_prune(older_than_days=30, now=now, batch_size=2)

    assert (report.deleted, report.batches, report.kept_in_window) == (5, 3, 3)
    assert set(ToolInvocation.objects.values_list("pk", flat=True)) == {
        pending.pk,
        leased.pk,
        done_but_leased.pk,
        recent.pk,
    }


def test_the_prune_command_reports_its_counts_and_refuses_zero_days():
    tenant = TenantFactory(slug="acme")
    row(tenant, timezone.now() - timedelta(days=10))
    row(tenant, timezone.now() - timedelta(days=10), state="pending", lease_expires_at=timezone.now())
    out = io.StringIO()

    call_command("audit", "prune", "--older-than", "7", stdout=out)

    assert "1 rows started before" in out.getvalue()
    assert "in 1 batches; 1 kept (pending or claim lease live)" in out.getvalue()
    with pytest.raises(CommandError, match="at least 1 day"):
        call_command("audit", "prune", "--older-than", "0")


def test_the_retention_task_prunes_past_the_setting_and_does_nothing_when_it_is_off(settings):
    tenant = TenantFactory(slug="acme")
    row(tenant, timezone.now() - timedelta(days=100))
    row(tenant, timezone.now() - timedelta(days=10))

    settings.TOOLGATE_AUDIT_RETENTION_DAYS = 0
    assert audit_retention.apply().get() == 0
    assert ToolInvocation.objects.count() == 2

    settings.TOOLGATE_AUDIT_RETENTION_DAYS = 30
    assert audit_retention.apply().get() == 1
    assert ToolInvocation.objects.count() == 1
