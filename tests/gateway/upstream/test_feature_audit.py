"""Feature reads (`McpFeatureRead`) in the audit: `audit export --kind feature-reads`, and pruned with the calls."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from gateway.upstream.feature_audit import EXPORT_FIELDS, feature_reads_prune
from gateway.upstream.models import McpFeatureRead
from policies_app.models import Tenant
from tests.factories import TenantFactory
from tools_app.audit import audit_prune
from tools_app.models import ToolInvocation
from tools_app.tasks import audit_retention

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 11, 1, tzinfo=UTC)


def read(tenant: Tenant, started_at: datetime, name: str, **fields) -> McpFeatureRead:
    values = {
        "kind": McpFeatureRead.Kind.RESOURCE,
        "ident": name[:64],
        "ok": True,
        "result_bytes": 12,
        "started_at": started_at,
        "ended_at": started_at + timedelta(milliseconds=3),
        "duration_ms": 3,
        **fields,
    }
    return McpFeatureRead.objects.create(tenant=tenant, name=name, **values)


def export(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    """(stdout, the command's stderr report): the export writes straight to the process's stdout."""
    capsys.readouterr()
    err = io.StringIO()
    call_command("audit", "export", *args, stderr=err)
    return capsys.readouterr().out, err.getvalue()


@pytest.fixture
def reads():
    acme, other = TenantFactory(slug="acme"), TenantFactory(slug="other")
    read(acme, DAY - timedelta(seconds=1), "toolgate://docs/before")
    read(acme, DAY, "toolgate://docs/first")
    read(
        other,
        DAY + timedelta(hours=1),
        "mcp__docs__greet",
        kind=McpFeatureRead.Kind.PROMPT,
        ok=False,
        error_code="rate_limited",
        result_bytes=None,
        args_sha256="ab" * 32,
    )
    read(acme, DAY + timedelta(hours=2), "mcp__docs__greet", kind=McpFeatureRead.Kind.COMPLETION)
    read(acme, DAY + timedelta(days=1), "toolgate://docs/at-until")
    return acme, other


def test_feature_reads_export_as_jsonl_in_range_oldest_first(reads, capsys):
    out, err = export(capsys, "--kind", "feature-reads", "--since", "2026-11-01", "--until", "2026-11-02")

    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["tenant"], r["kind"], r["name"]) for r in rows] == [
        ("acme", "resource", "toolgate://docs/first"),
        ("other", "prompt", "mcp__docs__greet"),
        ("acme", "completion", "mcp__docs__greet"),
    ]
    assert list(rows[0]) == list(EXPORT_FIELDS)
    assert rows[1] | {"id": 0, "service_account_id": None} == {
        "id": 0,
        "tenant": "other",
        "service_account_id": None,
        "subject_id": "",
        "kind": "prompt",
        "ident": "mcp__docs__greet",
        "name": "mcp__docs__greet",
        "ok": False,
        "error_code": "rate_limited",
        "safe_message": "",
        "args_sha256": "ab" * 32,
        "result_bytes": None,
        "started_at": "2026-11-01T01:00:00+00:00",
        "ended_at": "2026-11-01T01:00:00.003000+00:00",
        "duration_ms": 3,
    }
    assert err == "audit export: 3 feature-reads rows\n"


def test_feature_reads_export_as_csv_for_one_tenant(reads, capsys):
    out, _err = export(
        capsys,
        "--kind",
        "feature-reads",
        "--since",
        "2026-11-01",
        "--until",
        "2026-11-02",
        "--tenant",
        "acme",
        "--format",
        "csv",
    )
    lines = list(csv.DictReader(io.StringIO(out)))

    assert out.splitlines()[0] == ",".join(EXPORT_FIELDS)
    assert [line["name"] for line in lines] == ["toolgate://docs/first", "mcp__docs__greet"]
    assert {line["tenant"] for line in lines} == {"acme"}


def test_the_default_export_is_still_the_calls_alone(reads, capsys):
    out, err = export(capsys, "--since", "2026-11-01", "--until", "2026-11-02")

    assert (out, err) == ("", "audit export: 0 rows\n")  # reads are exported only when asked for
    with pytest.raises(CommandError, match="invalid choice"):
        export(capsys, "--kind", "resources", "--since", "2026-11-01")


def test_the_feature_reads_export_streams_through_the_cursor_in_chunks(reads, tmp_path, django_assert_num_queries):
    """Constant memory: one query whatever the range (a server-side cursor on PostgreSQL), no instances."""
    target = tmp_path / "reads.jsonl"
    with django_assert_num_queries(1):
        call_command(
            "audit",
            "export",
            "--kind",
            "feature-reads",
            "--since",
            "2026-10-01",
            "--output",
            str(target),
            stderr=io.StringIO(),
        )
    assert len(target.read_text().splitlines()) == 5


def test_prune_deletes_old_reads_in_batches_and_keeps_recent_ones():
    tenant = TenantFactory(slug="acme")
    now = timezone.now()
    for number in range(5):
        read(tenant, now - timedelta(days=40, minutes=number), f"toolgate://docs/old-{number}")
    recent = read(tenant, now - timedelta(days=29), "toolgate://docs/recent")

    report = audit_prune(older_than_days=30, now=now, batch_size=2)

    (trail,) = report.trails
    assert (trail.noun, trail.deleted, trail.batches) == ("feature reads", 5, 3)
    assert list(McpFeatureRead.objects.values_list("pk", flat=True)) == [recent.pk]


def test_a_batch_is_one_statement_whatever_its_size(django_assert_num_queries):
    tenant = TenantFactory(slug="acme")
    now = timezone.now()
    for number in range(7):
        read(tenant, now - timedelta(days=40, minutes=number), f"toolgate://docs/old-{number}")

    with django_assert_num_queries(3):  # two batches of 5 and 2, then the one that finds nothing
        assert feature_reads_prune(cutoff=now - timedelta(days=30), batch_size=5) == (7, 2)
    assert not McpFeatureRead.objects.exists()


def test_the_prune_command_and_the_retention_task_prune_reads_with_the_calls(settings):
    tenant = TenantFactory(slug="acme")
    now = timezone.now()
    read(tenant, now - timedelta(days=100), "toolgate://docs/ancient")
    read(tenant, now - timedelta(days=10), "toolgate://docs/last-week")
    read(tenant, now - timedelta(hours=1), "toolgate://docs/today")
    ToolInvocation.objects.create(
        tenant=tenant,
        tool_call_id="old-call",
        tool_id="core__wait",
        decision="allow",
        ok=True,
        executed=True,
        started_at=now - timedelta(days=100),
        ended_at=now - timedelta(days=100),
        duration_ms=1,
    )

    settings.TOOLGATE_AUDIT_RETENTION_DAYS = 30
    assert audit_retention.apply().get() == 2  # the call and the ancient read
    out = io.StringIO()
    call_command("audit", "prune", "--older-than", "7", stdout=out)

    assert "audit prune: 1 feature reads deleted in 1 batches" in out.getvalue()
    assert list(McpFeatureRead.objects.values_list("name", flat=True)) == ["toolgate://docs/today"]
