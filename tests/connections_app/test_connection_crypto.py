"""Connection rows under the key ring: stored rows open, moved blobs do not, rotation, a missing key at call time.

The envelope itself is tested in tests/policies_app/test_crypto.py; here the
rows that carry it, through the services and the broker.
"""

from __future__ import annotations

import hashlib
import logging

import pytest

from connections_app.adapters import UNREADABLE
from connections_app.models import Connection
from connections_app.services import connection_credentials_open
from core.crypto import (
    CredentialError,
    EncryptionKeyMissing,
    envelope_key_id,
)
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory
from tests.support.keys import key_material_forms
from tools_app.models import ToolInvocation

OLD_KEY = hashlib.sha256(b"toolgate test key: old").digest()
NEW_KEY = hashlib.sha256(b"toolgate test key: new").digest()
SECRET = "ghp_s3cr3t-value-that-must-never-leak"
MISSING_OLD = (
    "encryption key 'old' is not in TOOLGATE_ENCRYPTION_KEYS; "
    "add it back to the key ring (and run rotate_encryption_keys to retire it safely)"
)


# --- rows and rotation ------------------------------------------------------------------------


def outcome(row: Connection) -> str:
    """What a row yields now, read afresh from the database: its api key, or the error's class."""
    row = Connection.objects.get(pk=row.pk)
    try:
        return connection_credentials_open(row)["api_key"]
    except CredentialError as exc:
        return type(exc).__name__


@pytest.mark.django_db
def test_a_stored_row_opens_and_holds_no_plaintext(settings):
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY}
    row = ConnectionFactory(credentials={"api_key": SECRET})

    stored = Connection.objects.get(pk=row.pk)

    assert SECRET.encode() not in bytes(stored.encrypted_credentials)
    assert (stored.encryption_key_id, envelope_key_id(stored.encrypted_credentials)) == ("old", "old")
    assert connection_credentials_open(stored) == {"api_key": SECRET}


@pytest.mark.django_db
def test_a_blob_copied_to_another_row_does_not_open(settings):
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY}
    acme, globex = TenantFactory(slug="acme"), TenantFactory(slug="globex")
    source = ConnectionFactory(tenant=acme, credentials={"api_key": SECRET})
    same_tenant = ConnectionFactory(tenant=acme, credentials={"api_key": "ghp_other"})
    other_tenant = ConnectionFactory(tenant=globex, credentials={"api_key": "ghp_other"})
    stolen = Connection.objects.get(pk=source.pk).encrypted_credentials

    Connection.objects.filter(pk__in=[same_tenant.pk, other_tenant.pk]).update(encrypted_credentials=stolen)
    moved_provider = ConnectionFactory(tenant=acme, credentials={"api_key": "ghp_third"})
    Connection.objects.filter(pk=moved_provider.pk).update(provider="gitlab")

    assert outcome(source) == SECRET
    assert outcome(same_tenant) == "CredentialUndecryptable"
    assert outcome(other_tenant) == "CredentialUndecryptable"
    assert outcome(moved_provider) == "CredentialUndecryptable"


@pytest.mark.django_db
def test_rotation_matrix(settings):
    tenant = TenantFactory(slug="acme")

    # 1. the old key alone
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY}
    old_row = ConnectionFactory(tenant=tenant, credentials={"api_key": "ghp_old"})
    assert old_row.encryption_key_id == "old"
    assert outcome(old_row) == "ghp_old"

    # 2. the new key added second: everything still encrypts under the old one
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY, "new": NEW_KEY}
    second_row = ConnectionFactory(tenant=tenant, credentials={"api_key": "ghp_second"})
    assert second_row.encryption_key_id == "old"
    assert (outcome(old_row), outcome(second_row)) == ("ghp_old", "ghp_second")

    # 3. the new key promoted: new rows use it, old rows still open
    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY, "old": OLD_KEY}
    new_row = ConnectionFactory(tenant=tenant, credentials={"api_key": "ghp_new"})
    assert new_row.encryption_key_id == "new"
    assert (outcome(old_row), outcome(second_row), outcome(new_row)) == ("ghp_old", "ghp_second", "ghp_new")

    # 4. the old key retired (without rotating first): its rows refuse, loudly, naming the fix
    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY}
    assert (outcome(old_row), outcome(second_row), outcome(new_row)) == (
        "EncryptionKeyMissing",
        "EncryptionKeyMissing",
        "ghp_new",
    )
    with pytest.raises(EncryptionKeyMissing) as missing:
        connection_credentials_open(Connection.objects.get(pk=old_row.pk))
    assert str(missing.value) == MISSING_OLD
    assert missing.value.key_id == "old"
    assert not any(form in str(missing.value) for form in key_material_forms(OLD_KEY, NEW_KEY))
    assert "ghp_old" not in str(missing.value)

    # 5. the old key added back: every row opens again, nothing was lost
    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY, "old": OLD_KEY}
    assert (outcome(old_row), outcome(second_row), outcome(new_row)) == ("ghp_old", "ghp_second", "ghp_new")
    assert set(Connection.objects.values_list("encryption_key_id", flat=True)) == {"old", "new"}


# --- the broker, when a key is missing ----------------------------------------------------------


@pytest.mark.django_db
def test_broker_with_a_missing_key_answers_connection_unavailable_and_leaves_the_row(
    settings, caplog, github, caller, call_tool
):
    # given a connection sealed under a key the ring then loses
    account, _key = caller
    settings.TOOLGATE_KEY_RING = {"old": OLD_KEY}
    connection = ConnectionFactory(tenant=account.tenant, credentials={"api_key": SECRET})
    grant = GrantFactory(service_account=account, connections=[connection])
    stored = Connection.objects.get(pk=connection.pk)
    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY}
    caplog.set_level(logging.DEBUG)

    # when
    response = call_tool(connection, grant, tool_call_id="c1")

    # then the caller gets the contract's error, GitHub is never called, the row is as it was
    assert response.status_code == 409
    assert (response.json()["error_code"], response.json()["safe_message"]) == ("connection_unavailable", UNREADABLE)
    assert github.requests == []
    assert ToolInvocation.objects.get(tool_call_id="c1").error_code == "connection_unavailable"
    after = Connection.objects.get(pk=connection.pk)
    assert (after.status, after.revoked_at, after.last_used_at, after.encryption_key_id) == (
        Connection.Status.ACTIVE,
        None,
        None,
        "old",
    )
    assert bytes(after.encrypted_credentials) == bytes(stored.encrypted_credentials)

    # and the operator is told, without plaintext or key material
    errors = [r for r in caplog.records if r.name == "connections_app.adapters" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        f"connection {connection.pk}: credentials cannot be decrypted: {MISSING_OLD}"
    ]
    for text in (caplog.text, response.content.decode()):
        assert SECRET not in text
        assert not any(form in text for form in key_material_forms(OLD_KEY, NEW_KEY))

    # and once the key is back, the same row works again
    settings.TOOLGATE_KEY_RING = {"new": NEW_KEY, "old": OLD_KEY}
    github.route("GET", "/user", json={"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://x/octocat"})
    again = call_tool(connection, grant, tool_call_id="c2")
    assert again.status_code == 200
    assert [r.headers["authorization"] for r in github.requests] == [f"Bearer {SECRET}"]
