"""Migration 0009: audit rows written before partitioning survive it, with their claims, and ids continue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tools_app.models import ToolCallClaim, ToolInvocation
from tools_app.partitions import DEFAULT_PARTITION, TABLE

BEFORE_PARTITIONING = [("tools_app", "0008_invocation_content_and_tool_error")]


def _migrate(targets):
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_rows_from_before_partitioning_are_kept_with_a_claim_for_each_call_that_ran():
    # given: the table before migration 0009, with a call that ran 45 days ago and a refusal today
    old = _migrate(BEFORE_PARTITIONING)
    tenant = old.get_model("policies_app", "Tenant").objects.create(slug="kept", name="Kept")
    invocations = old.get_model("tools_app", "ToolInvocation")
    now = timezone.now()
    common = {"tenant": tenant, "tool_id": "core__wait", "decision": "allow"}
    ran = invocations.objects.create(**common, tool_call_id="ran", executed=True, started_at=now - timedelta(days=45))
    refused = invocations.objects.create(**common, tool_call_id="refused", executed=False, started_at=now)

    # when
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    # then: the same rows; on PostgreSQL in range partitions (not the default one), the call that ran
    # claimed, and new rows numbered after the old ones
    assert set(ToolInvocation.objects.values_list("pk", "tool_call_id")) == {(ran.pk, "ran"), (refused.pk, "refused")}
    later = ToolInvocation.objects.create(
        tenant_id=tenant.pk, tool_call_id="later", tool_id="core__wait", decision="allow", started_at=now
    )
    assert later.pk > refused.pk
    if connection.vendor != "postgresql":
        return
    assert set(ToolCallClaim.objects.values_list("tool_call_id", flat=True)) == {"ran"}
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT tool_call_id, tableoid::regclass::text FROM "{TABLE}"')  # noqa: S608
        homes = dict(cursor.fetchall())
    assert all(home.startswith(f"{TABLE}_p") for home in homes.values())
    assert DEFAULT_PARTITION not in homes.values()
