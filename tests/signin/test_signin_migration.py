"""The sign-in models moved from policies_app to signin: existing rows, permissions and history come along."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from changes_app.models import Change
from signin.models import SigninClient, SigninCode, SigninGrant, SigninToken

OLD_APP = "policies_app"  # the models' app before the move (kept apart so rewriting imports leaves it)
BEFORE_THE_MOVE = [
    ("changes_app", "0001_change_log"),
    ("policies_app", "0014_result_guard_arguments"),
    ("signin", None),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    applied = [target for target in targets if target[1] is not None]  # ("signin", None): not yet there
    return MigrationExecutor(connection).loader.project_state(applied).apps


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_client_made_before_the_move_keeps_its_rows_permissions_and_history_after_it():
    # given: the schema before the move, with a client, its grant, a code and a token pair; the
    # client's content type with a permission given to a group; a change entry naming the client
    old = _migrate(BEFORE_THE_MOVE)
    tenant = old.get_model("policies_app", "Tenant").objects.create(slug="moved", name="Moved")
    account = old.get_model("policies_app", "ServiceAccount").objects.create(
        tenant=tenant, name="agent", key_prefix="tg_moved", key_digest="0" * 64
    )
    user = old.get_model("auth", "User").objects.create(username="ada")
    delegation = old.get_model("policies_app", "Delegation").objects.create(
        tenant=tenant, user=user, service_account=account
    )
    client = old.get_model("policies_app", "SigninClient").objects.create(
        client_id="moved-client", kind="registered", client_name="Moved", redirect_uris=["https://a.example/cb"]
    )
    grant = old.get_model("policies_app", "SigninGrant").objects.create(
        client=client, delegation=delegation, tenant=tenant, redirect_uri="https://a.example/cb", resource="r"
    )
    now = timezone.now()
    code = old.get_model("policies_app", "SigninCode").objects.create(
        code_digest="1" * 64,
        client=client,
        delegation=delegation,
        redirect_uri="https://a.example/cb",
        code_challenge="c",
        resource="r",
        expires_at=now + timedelta(minutes=2),
        grant=grant,
    )
    token = old.get_model("policies_app", "SigninToken").objects.create(
        grant=grant,
        access_prefix="tga_moved",
        access_digest="2" * 64,
        refresh_prefix="tgr_moved",
        refresh_digest="3" * 64,
        access_expires_at=now + timedelta(hours=1),
        refresh_expires_at=now + timedelta(days=30),
    )
    old_types = {
        model: ContentType.objects.get_or_create(app_label="policies_app", model=model)[0]
        for model in ("signinclient", "signingrant", "signincode", "signintoken")
    }
    permission, _ = Permission.objects.get_or_create(
        content_type=old_types["signinclient"], codename="view_signinclient", defaults={"name": "Can view"}
    )
    group = old.get_model("auth", "Group").objects.create(name="sign-in auditors")
    old.get_model("auth", "Group").permissions.through.objects.create(group_id=group.pk, permission_id=permission.pk)
    old.get_model("changes_app", "Change").objects.create(
        action="signin_client.register", object_type=f"{OLD_APP}.signinclient", object_id=str(client.pk)
    )

    # when: everything is migrated
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    # then: the same rows through the new models, still linked; the content types (and so the
    # permissions and the group's hold on them) relabelled, not recreated; the change log names the new label
    moved = SigninClient.objects.get(pk=client.pk)
    assert moved.client_name == "Moved"
    assert SigninGrant.objects.get(pk=grant.pk).delegation_id == delegation.pk
    assert SigninCode.objects.get(pk=code.pk).grant_id == grant.pk
    assert SigninToken.objects.get(pk=token.pk).grant.client_id == client.pk
    for model, old_type in old_types.items():
        assert ContentType.objects.get(app_label="signin", model=model).pk == old_type.pk
        assert not ContentType.objects.filter(app_label="policies_app", model=model).exists()
    assert Permission.objects.get(pk=permission.pk).content_type_id == old_types["signinclient"].pk
    assert Permission.objects.filter(group__name="sign-in auditors", codename="view_signinclient").exists()
    assert Change.objects.get(object_id=str(client.pk)).object_type == "signin.signinclient"
