"""Grants moved from policies_app to connections_app: existing rows, permissions and history come along."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from changes_app.models import Change
from connections_app.models import ExecutionGrant

BEFORE_THE_MOVE = [
    ("changes_app", "0001_change_log"),
    ("connections_app", "0004_connection_created_by_service_account"),
    ("policies_app", "0004_approval_routing_and_sealed_args"),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_a_grant_made_before_the_move_is_the_same_row_with_its_permissions_and_history_after_it():
    # given: the schema before the move, with a grant of one connection, its content type and a change entry
    old = _migrate(BEFORE_THE_MOVE)
    tenant = old.get_model("policies_app", "Tenant").objects.create(slug="moved", name="Moved")
    account = old.get_model("policies_app", "ServiceAccount").objects.create(
        tenant=tenant, name="agent", key_prefix="tg_moved", key_digest="0" * 64
    )
    connection_row = old.get_model("connections_app", "Connection").objects.create(
        tenant=tenant, provider="github", credential_type="api_key", encrypted_credentials=b"x", encryption_key_id="k"
    )
    grant = old.get_model("policies_app", "ExecutionGrant").objects.create(tenant=tenant, service_account=account)
    grant.connections.add(connection_row)
    old_type, _ = ContentType.objects.get_or_create(app_label="policies_app", model="executiongrant")
    permission = Permission.objects.create(content_type=old_type, codename="audit_grant", name="Can audit grants")
    old.get_model("changes_app", "Change").objects.create(
        action="grant.create", object_type="policies_app.executiongrant", object_id=str(grant.pk), object_label="g"
    )

    # when: everything is migrated
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    # then: the same row, through the new model, with its connection; the content type (and so the
    # permissions on it) relabelled, not recreated; the change log names the new label
    moved = ExecutionGrant.objects.get(pk=grant.pk)
    assert [str(pk) for pk in moved.connections.values_list("pk", flat=True)] == [str(connection_row.pk)]
    assert moved.service_account_id == account.pk
    new_type = ContentType.objects.get(app_label="connections_app", model="executiongrant")
    assert new_type.pk == old_type.pk
    assert Permission.objects.get(pk=permission.pk).content_type_id == new_type.pk
    assert not ContentType.objects.filter(app_label="policies_app", model="executiongrant").exists()
    assert Change.objects.get(object_id=str(grant.pk)).object_type == "connections_app.executiongrant"
