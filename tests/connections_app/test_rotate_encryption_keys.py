"""manage.py rotate_encryption_keys: counts, idempotency, resumability, failures, and concurrent writers.

Rows are real connections sealed by the service under whatever key ring the
`settings` fixture holds at the time; the command then runs under another ring.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db_connection
from django.db import transaction

from changes_app.models import Change
from connections_app import services
from connections_app.management.commands import rotate_encryption_keys
from connections_app.models import Connection, ConnectionEvent, OAuthProvider, TenantWebhook, WebhookDelivery
from connections_app.services import connection_credentials_open
from connections_app.webhooks import webhook_deliver, webhook_set, webhook_signature
from core import crypto
from core.crypto import KeyRing, open_json, open_sealed, seal, seal_json
from gateway.upstream.services import mcp_server_register
from identity_app.models import IdentityProvider
from identity_app.services import provider_save
from tests.factories import ConnectionFactory, TenantFactory, service_account_with_key
from tests.support.approvals import pending_approval
from tests.support.loopback import LoopbackServer

K0 = hashlib.sha256(b"rotation test key k0").digest()
K1 = hashlib.sha256(b"rotation test key k1").digest()
K2 = hashlib.sha256(b"rotation test key k2").digest()
ROTATING = {"k2": K2, "k1": K1}
TAMPERED = "credential does not decrypt for this row (tampered or moved)"
MISSING_K0 = (
    "encryption key 'k0' is not in TOOLGATE_ENCRYPTION_KEYS; "
    "add it back to the key ring (and run rotate_encryption_keys to retire it safely)"
)
SUMMARY = "rewrapped {}, already current {}, skipped because changed concurrently {}, failed {}"
CONNECTIONS = "connections: " + SUMMARY
K1_CAN_GO = "no sealed value uses k1: can be removed from TOOLGATE_ENCRYPTION_KEYS"
KEEP_K1 = "still in use, keep in TOOLGATE_ENCRYPTION_KEYS: k1"
ALL_KINDS = (
    "connections",
    "providers",
    "sso_providers",
    "mcp_tokens",
    "mcp_secret_envs",
    "approval_args",
    "webhook_secrets",
)
ADVICE = (
    "Add any missing key back to TOOLGATE_ENCRYPTION_KEYS and run again; a connection whose credentials do not "
    "decrypt with any key must be revoked and entered again by its tenant (an OAuth provider's client secret: "
    "set it again with add_oauth_provider)."
)


def run(*args: str, out: io.StringIO | None = None, err: io.StringIO | None = None) -> tuple[str, str]:
    out, err = out or io.StringIO(), err or io.StringIO()
    call_command("rotate_encryption_keys", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def make_rows(settings, ring: dict[str, bytes], secrets: list[str], tenant=None) -> list[Connection]:
    """Connections sealed by the service under `ring` (the ring setting is left as it was)."""
    before = settings.TOOLGATE_KEY_RING
    settings.TOOLGATE_KEY_RING = ring
    tenant = tenant or TenantFactory(slug="acme")
    rows = [ConnectionFactory(tenant=tenant, credentials={"api_key": secret}) for secret in secrets]
    settings.TOOLGATE_KEY_RING = before
    return rows


def state() -> dict[str, tuple[str, bytes]]:
    """Every row's key id and envelope, by id."""
    return {
        str(pk): (key_id, bytes(blob))
        for pk, key_id, blob in Connection.objects.values_list("pk", "encryption_key_id", "encrypted_credentials")
    }


def key_ids() -> list[str]:
    return sorted(Connection.objects.values_list("encryption_key_id", flat=True))


def opened_with(ring: dict[str, bytes]) -> dict[str, str]:
    """Each row's api key, opened with `ring` only."""
    key_ring = KeyRing(ring)
    return {str(row.pk): connection_credentials_open(row, ring=key_ring)["api_key"] for row in Connection.objects.all()}


def leak_forms(secrets: list[str]) -> list[str]:
    forms = list(secrets)
    for key in (K0, K1, K2):
        forms += [key.hex(), base64.b64encode(key).decode(), key.decode("latin-1")]
    return forms


def tamper(row: Connection) -> None:
    blob = bytearray(Connection.objects.get(pk=row.pk).encrypted_credentials)
    blob[-1] ^= 0x01
    Connection.objects.filter(pk=row.pk).update(encrypted_credentials=bytes(blob))


# --- the happy path ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_rewraps_every_row_under_an_older_key_in_batches_and_reports_counts(settings):
    tenant = TenantFactory(slug="acme")
    old_rows = make_rows(settings, {"k1": K1}, ["ghp_a", "ghp_b", "ghp_c"], tenant)
    make_rows(settings, ROTATING, ["ghp_d", "ghp_e"], tenant)
    settings.TOOLGATE_KEY_RING = ROTATING

    out, err = run("--batch-size", "2")

    assert out.splitlines() == [
        "rotating to key 'k2': 2 already current, 3 to rewrap, 2 per batch",
        "connections batch 1: 2 read, 2 rewrapped, 0 skipped, 0 failed",
        "connections batch 2: 1 read, 1 rewrapped, 0 skipped, 0 failed",
        CONNECTIONS.format(3, 2, 0, 0),
        "key ids in use now: k2 (connections 5)",
        K1_CAN_GO,
    ]
    assert err == ""
    assert key_ids() == ["k2"] * 5
    # k1 can now be retired: every row opens with k2 alone, with the same credentials
    assert sorted(opened_with({"k2": K2}).values()) == ["ghp_a", "ghp_b", "ghp_c", "ghp_d", "ghp_e"]
    events = ConnectionEvent.objects.filter(kind=ConnectionEvent.Kind.REWRAPPED)
    assert sorted((str(e.connection_id), e.detail) for e in events) == sorted(
        (str(row.pk), "k1 -> k2") for row in old_rows
    )


@pytest.mark.django_db
def test_a_second_run_rewraps_nothing(settings):
    make_rows(settings, {"k1": K1}, ["ghp_a", "ghp_b"])
    settings.TOOLGATE_KEY_RING = ROTATING
    run()
    after_first = state()
    events = ConnectionEvent.objects.count()

    out, _err = run()

    assert out.splitlines() == [
        "rotating to key 'k2': 2 already current, 0 to rewrap, 500 per batch",
        CONNECTIONS.format(0, 2, 0, 0),
        "key ids in use now: k2 (connections 2)",
        K1_CAN_GO,
    ]
    assert state() == after_first
    assert ConnectionEvent.objects.count() == events


@pytest.mark.django_db
def test_an_interrupted_run_is_finished_by_the_next_one(settings, monkeypatch):
    make_rows(settings, {"k1": K1}, [f"ghp_{n}" for n in range(5)])
    settings.TOOLGATE_KEY_RING = ROTATING
    real_rewrap = rotate_encryption_keys.connection_rewrap
    calls = []

    def interrupted_on_the_fourth_row(**kwargs):
        calls.append(kwargs["connection"].pk)
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second batch
        return real_rewrap(**kwargs)

    monkeypatch.setattr(rotate_encryption_keys, "connection_rewrap", interrupted_on_the_fourth_row)
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        run("--batch-size", "2", out=out)

    assert out.getvalue().splitlines()[1:] == ["connections batch 1: 2 read, 2 rewrapped, 0 skipped, 0 failed"]
    assert key_ids() == ["k1", "k1", "k2", "k2", "k2"]  # the third row went through before the interrupt

    monkeypatch.setattr(rotate_encryption_keys, "connection_rewrap", real_rewrap)
    resumed, _err = run("--batch-size", "2")

    assert resumed.splitlines()[-3:] == [
        CONNECTIONS.format(2, 3, 0, 0),
        "key ids in use now: k2 (connections 5)",
        K1_CAN_GO,
    ]
    assert key_ids() == ["k2"] * 5
    assert sorted(opened_with({"k2": K2}).values()) == [f"ghp_{n}" for n in range(5)]


@pytest.mark.django_db
def test_dry_run_counts_and_writes_nothing(settings):
    tenant = TenantFactory(slug="acme")
    make_rows(settings, {"k1": K1}, ["ghp_a", "ghp_b"], tenant)
    make_rows(settings, {"k0": K0}, ["ghp_c"], tenant)
    make_rows(settings, ROTATING, ["ghp_d"], tenant)
    settings.TOOLGATE_KEY_RING = ROTATING
    before = state()

    out, err = run("--dry-run")

    assert out.splitlines() == [
        "dry run, primary key 'k2'; nothing is written",
        "connections: already current 1, to rewrap 3 (k0: 1, k1: 2)",
        "under keys not in the ring, these would fail: 1 (k0: 1); "
        "add those keys back to TOOLGATE_ENCRYPTION_KEYS before rotating",
        "key ids in use now: k0 (connections 1), k1 (connections 2), k2 (connections 1)",
    ]
    assert err == ""
    assert state() == before
    assert not ConnectionEvent.objects.filter(kind=ConnectionEvent.Kind.REWRAPPED).exists()


@pytest.mark.django_db
def test_batch_size_must_be_positive():
    with pytest.raises(CommandError, match=r"^Error: argument --batch-size: must be at least 1$"):
        run("--batch-size", "0")


# --- failures ---------------------------------------------------------------------------------


@pytest.fixture
def damaged(settings):
    """One good row under k1, one under k0 (not in the ring), one tampered with; the ring is k2, k1."""
    tenant = TenantFactory(slug="acme")
    (good,) = make_rows(settings, {"k1": K1}, ["ghp_good"], tenant)
    (keyless,) = make_rows(settings, {"k0": K0}, ["ghp_keyless"], tenant)
    (tampered,) = make_rows(settings, {"k1": K1}, ["ghp_tampered"], tenant)
    tamper(tampered)
    settings.TOOLGATE_KEY_RING = ROTATING
    return good, keyless, tampered


@pytest.mark.django_db
def test_rows_that_cannot_be_rewrapped_are_named_and_left_alone(damaged):
    good, keyless, tampered = damaged
    before = state()
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError) as failed:
        run(out=out, err=err)

    failed_ids = sorted([str(keyless.pk), str(tampered.pk)])  # keyset order is pk order
    assert failed.value.returncode == 1
    assert str(failed.value) == f"could not rewrap 2 connection(s): {', '.join(failed_ids)}. {ADVICE}"
    assert out.getvalue().splitlines()[-5:] == [
        "connections batch 1: 3 read, 1 rewrapped, 0 skipped, 2 failed",
        CONNECTIONS.format(1, 0, 0, 2),
        # the tampered row keeps k1 in use; the keyless one needs k0 back
        "key ids in use now: k0 (connections 1), k1 (connections 1), k2 (connections 1)",
        KEEP_K1,
        "in use but missing from TOOLGATE_ENCRYPTION_KEYS (those values open with no key): k0",
    ]
    reasons = {str(keyless.pk): MISSING_K0, str(tampered.pk): TAMPERED}
    assert err.getvalue().splitlines() == [f"connection {pk}: {reasons[pk]}" for pk in failed_ids]
    after = state()
    assert after[str(good.pk)][0] == "k2"
    assert {pk: after[pk] for pk in failed_ids} == {pk: before[pk] for pk in failed_ids}
    assert list(ConnectionEvent.objects.filter(kind="rewrapped").values_list("connection_id", flat=True)) == [good.pk]


@pytest.mark.django_db(transaction=True)
def test_failures_exit_non_zero_from_the_command_line(damaged, capsys):
    _good, keyless, tampered = damaged

    with pytest.raises(SystemExit) as exited:  # what manage.py does with a CommandError
        rotate_encryption_keys.Command().run_from_argv(["manage.py", "rotate_encryption_keys"])

    assert exited.value.code == 1
    stderr = capsys.readouterr().err
    assert f"connection {keyless.pk}: {MISSING_K0}" in stderr
    assert f"connection {tampered.pk}: {TAMPERED}" in stderr
    assert "CommandError: could not rewrap 2 connection(s): " in stderr


@pytest.mark.django_db
def test_no_plaintext_or_key_material_in_output_or_logs(damaged, caplog):
    _good, keyless, tampered = damaged
    caplog.set_level(logging.DEBUG)
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError) as failed:
        run("--batch-size", "1", out=out, err=err)

    # the logs say what happened, by id
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(warnings) == sorted(
        [f"connection {keyless.pk} not rewrapped: {MISSING_K0}", f"connection {tampered.pk} not rewrapped: {TAMPERED}"]
    )
    assert f"rotate_encryption_keys: {CONNECTIONS.format(1, 0, 0, 2)}" in caplog.text
    # and nothing anywhere holds a secret
    for text in (out.getvalue(), err.getvalue(), caplog.text, str(failed.value)):
        for form in leak_forms(["ghp_good", "ghp_keyless", "ghp_tampered"]):
            assert form not in text


# --- beside a concurrent writer ------------------------------------------------------------------


def write_credentials(pk, api_key: str, ring: dict[str, bytes]) -> None:
    """What a process still holding the old ring does (e.g. a token refresh): seal and store new credentials."""
    row = Connection.objects.get(pk=pk)
    sealed = seal_json({"api_key": api_key}, binding=row.binding(), ring=KeyRing(ring))
    Connection.objects.filter(pk=pk).update(encrypted_credentials=sealed.blob, encryption_key_id=sealed.key_id)


@pytest.mark.django_db
def test_a_write_between_read_and_update_survives_and_the_next_run_rewraps_it(settings, monkeypatch):
    contested, _other = make_rows(settings, {"k1": K1}, ["ghp_before", "ghp_other"])
    settings.TOOLGATE_KEY_RING = ROTATING

    def open_then_concurrent_write(blob, *, binding, ring):
        opened = open_json(blob, binding=binding, ring=ring)
        if binding["connection"] == str(contested.pk):
            write_credentials(contested.pk, "ghp_written_meanwhile", {"k1": K1})
        return opened

    monkeypatch.setattr(services, "open_json", open_then_concurrent_write)
    out, _err = run()
    monkeypatch.undo()

    assert out.splitlines()[-4:] == [
        CONNECTIONS.format(1, 0, 1, 0),
        "rows skipped were written while this ran: run the command again to check them",
        "key ids in use now: k1 (connections 1), k2 (connections 1)",
        KEEP_K1,
    ]
    assert Connection.objects.get(pk=contested.pk).encryption_key_id == "k1"
    assert opened_with({"k1": K1, "k2": K2})[str(contested.pk)] == "ghp_written_meanwhile"

    again, _err = run()

    assert again.splitlines()[-3:] == [
        CONNECTIONS.format(1, 1, 0, 0),
        "key ids in use now: k2 (connections 2)",
        K1_CAN_GO,
    ]
    assert opened_with({"k2": K2})[str(contested.pk)] == "ghp_written_meanwhile"


@pytest.mark.django_db(transaction=True)
def test_a_write_committed_while_the_rewrap_waits_on_the_row_lock_survives(postgres_required, settings, monkeypatch):
    """On PostgreSQL, another connection locks the row and writes; the rewrap's UPDATE waits for that
    lock, then re-checks its WHERE against the committed row, finds the envelope changed and updates nothing."""
    (contested,) = make_rows(settings, {"k1": K1}, ["ghp_before"])
    settings.TOOLGATE_KEY_RING = ROTATING
    locked = threading.Event()
    seen_waiting: list[bool] = []
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                Connection.objects.select_for_update().get(pk=contested.pk)
                write_credentials(contested.pk, "ghp_written_meanwhile", {"k1": K1})
                locked.set()
                seen_waiting.append(_another_session_waits_on_a_lock())
        except BaseException as exc:  # reported to the test thread below
            failures.append(exc)
            locked.set()
        finally:
            db_connection.close()

    thread = threading.Thread(target=writer)

    def open_then_let_the_writer_lock(blob, *, binding, ring):
        opened = open_json(blob, binding=binding, ring=ring)
        thread.start()
        assert locked.wait(timeout=10)
        return opened

    monkeypatch.setattr(services, "open_json", open_then_let_the_writer_lock)
    out, _err = run()
    monkeypatch.undo()
    thread.join(timeout=10)

    assert failures == []
    assert seen_waiting == [True]
    assert out.splitlines()[-4:] == [
        CONNECTIONS.format(0, 0, 1, 0),
        "rows skipped were written while this ran: run the command again to check them",
        "key ids in use now: k1 (connections 1)",
        KEEP_K1,
    ]
    assert opened_with({"k1": K1, "k2": K2}) == {str(contested.pk): "ghp_written_meanwhile"}

    again, _err = run()

    assert again.splitlines()[-3:] == [
        CONNECTIONS.format(1, 0, 0, 0),
        "key ids in use now: k2 (connections 1)",
        K1_CAN_GO,
    ]
    assert opened_with({"k2": K2}) == {str(contested.pk): "ghp_written_meanwhile"}


def _another_session_waits_on_a_lock(timeout: float = 10.0) -> bool:
    """Poll pg_stat_activity until another backend of this database waits on a lock (the rewrap's UPDATE)."""
    deadline = time.monotonic() + timeout
    with db_connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.02)
    return False


# --- OAuth providers' client secrets (sealed with the same ring) --------------------------------------


def make_provider(name: str, ring: dict[str, bytes], client_secret: str) -> OAuthProvider:
    provider = OAuthProvider(
        name=name,
        authorize_url=f"https://{name}.example/authorize",
        token_url=f"https://{name}.example/token",
        client_id=f"{name}-client",
    )
    sealed = seal(client_secret.encode(), binding=provider.binding(), ring=KeyRing(ring))
    provider.encrypted_client_secret, provider.encryption_key_id = sealed.blob, sealed.key_id
    provider.save()
    return provider


def provider_secret(name: str, ring: dict[str, bytes]) -> str:
    provider = OAuthProvider.objects.get(name=name)
    return open_sealed(provider.encrypted_client_secret, binding=provider.binding(), ring=KeyRing(ring)).decode()


@pytest.mark.django_db
def test_oauth_provider_client_secrets_are_rewrapped_too(settings):
    make_rows(settings, {"k1": K1}, ["ghp_a"])
    make_provider("github", {"k1": K1}, "gh-client-secret")
    make_provider("gitlab", ROTATING, "gl-client-secret")
    settings.TOOLGATE_KEY_RING = ROTATING

    dry, _err = run("--dry-run")
    out, _err = run()
    again, _err = run()

    assert dry.splitlines()[1:] == [
        "connections: already current 0, to rewrap 1 (k1: 1)",
        "oauth provider client secrets: already current 1, to rewrap 1 (k1: 1)",
        "key ids in use now: k1 (connections 1, oauth provider client secrets 1), k2 (oauth provider client secrets 1)",
    ]
    assert out.splitlines()[-4:] == [
        CONNECTIONS.format(1, 0, 0, 0),
        "oauth provider client secrets: " + SUMMARY.format(1, 1, 0, 0),
        "key ids in use now: k2 (connections 1, oauth provider client secrets 2)",
        K1_CAN_GO,
    ]
    assert again.splitlines()[-3] == "oauth provider client secrets: " + SUMMARY.format(0, 2, 0, 0)
    assert sorted(OAuthProvider.objects.values_list("encryption_key_id", flat=True)) == ["k2", "k2"]
    assert (provider_secret("github", {"k2": K2}), provider_secret("gitlab", {"k2": K2})) == (
        "gh-client-secret",
        "gl-client-secret",
    )


@pytest.mark.django_db
def test_an_oauth_provider_secret_under_a_missing_key_is_named(settings):
    make_provider("legacy", {"k0": K0}, "legacy-client-secret")
    before = bytes(OAuthProvider.objects.get(name="legacy").encrypted_client_secret)
    settings.TOOLGATE_KEY_RING = ROTATING
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError) as failed:
        run(out=out, err=err)

    assert str(failed.value) == f"could not rewrap 1 oauth provider(s): legacy. {ADVICE}"
    assert err.getvalue() == f"oauth provider legacy: {MISSING_K0}\n"
    assert out.getvalue().splitlines()[-4:] == [
        "oauth provider client secrets: " + SUMMARY.format(0, 0, 0, 1),
        "key ids in use now: k0 (oauth provider client secrets 1)",
        K1_CAN_GO,
        "in use but missing from TOOLGATE_ENCRYPTION_KEYS (those values open with no key): k0",
    ]
    assert "legacy-client-secret" not in out.getvalue() + err.getvalue() + str(failed.value)
    assert bytes(OAuthProvider.objects.get(name="legacy").encrypted_client_secret) == before


@pytest.mark.django_db
def test_an_oauth_provider_secret_set_during_the_rewrap_survives(settings, monkeypatch):
    make_provider("github", {"k1": K1}, "old-client-secret")
    settings.TOOLGATE_KEY_RING = ROTATING

    def open_then_concurrent_write(blob, *, binding, ring):
        opened = open_sealed(blob, binding=binding, ring=ring)
        provider = OAuthProvider.objects.get(name="github")
        sealed = seal(b"new-client-secret", binding=provider.binding(), ring=KeyRing({"k1": K1}))
        OAuthProvider.objects.filter(pk=provider.pk).update(encrypted_client_secret=sealed.blob)
        return opened

    monkeypatch.setattr(services, "open_sealed", open_then_concurrent_write)
    out, _err = run()
    monkeypatch.undo()

    assert "oauth provider client secrets: " + SUMMARY.format(0, 0, 1, 0) in out.splitlines()
    assert provider_secret("github", {"k1": K1}) == "new-client-secret"
    run()
    assert provider_secret("github", {"k2": K2}) == "new-client-secret"


# --- tenant webhooks' signing secrets (no key id column: read from the envelope) ------------------


@pytest.mark.django_db
def test_a_webhook_secret_is_rewrapped_and_deliveries_are_signed_with_the_old_key_dropped(settings):
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    with LoopbackServer() as receiver:
        settings.TOOLGATE_KEY_RING = {"k1": K1}
        secret = webhook_set(tenant=tenant, url=f"{receiver.url}/hooks", user=None)
        settings.TOOLGATE_KEY_RING = ROTATING

        out, _err = run()

        assert "tenant webhook secrets: " + SUMMARY.format(1, 0, 0, 0) in out.splitlines()
        assert out.splitlines()[-2:] == ["key ids in use now: k2 (tenant webhook secrets 1)", K1_CAN_GO]
        assert secret not in out
        # with k1 gone, a delivery still opens the secret and signs with it
        settings.TOOLGATE_KEY_RING = {"k2": K2}
        receiver.route("POST", "/hooks", status=204)
        delivery = WebhookDelivery.objects.create(tenant=tenant, event="approval.requested", payload={"n": 1})
        assert webhook_deliver(delivery_id=str(delivery.pk), final_attempt=True).status == "delivered"
        (request,) = receiver.requests
        assert request.headers["toolgate-signature"] == webhook_signature(
            secret, int(request.headers["toolgate-signature"].split(",")[0][2:]), request.body
        )


@pytest.mark.django_db
def test_a_webhook_secret_replaced_while_the_rewrap_runs_survives(settings, monkeypatch):
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    settings.TOOLGATE_KEY_RING = {"k1": K1}
    webhook_set(tenant=tenant, url="http://127.0.0.1:9/hooks", user=None)
    settings.TOOLGATE_KEY_RING = ROTATING
    real_open = crypto.open_sealed
    replaced: list[str] = []

    def open_then_the_owner_sets_a_new_secret(blob, *, binding, ring):
        opened = real_open(blob, binding=binding, ring=ring)
        settings.TOOLGATE_KEY_RING = {"k1": K1}  # an owner's request served by a process still on k1
        replaced.append(webhook_set(tenant=tenant, url="http://127.0.0.1:9/hooks", user=None))
        settings.TOOLGATE_KEY_RING = ROTATING
        return opened

    monkeypatch.setattr(crypto, "open_sealed", open_then_the_owner_sets_a_new_secret)
    out, _err = run()
    monkeypatch.undo()

    assert "tenant webhook secrets: " + SUMMARY.format(0, 0, 1, 0) in out.splitlines()
    webhook = TenantWebhook.objects.get()
    binding = {"webhook_secret": str(tenant.pk)}
    assert open_sealed(webhook.secret_sealed, binding=binding, ring=KeyRing({"k1": K1})).decode() == replaced[0]
    run()
    webhook.refresh_from_db()
    assert open_sealed(webhook.secret_sealed, binding=binding, ring=KeyRing({"k2": K2})).decode() == replaced[0]


# --- every kind at once --------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_sealed_kind_is_counted_in_the_output_and_in_the_change_log(settings):
    # given one value of each kind under k1, and a ring that rotates to k2
    settings.TOOLGATE_MCP_ALLOW_PRIVATE_NETWORKS = True
    settings.TOOLGATE_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    tenant = TenantFactory(slug="acme")
    make_rows(settings, {"k1": K1}, ["ghp_a"], tenant)
    make_provider("github", {"k1": K1}, "gh-client-secret")
    settings.TOOLGATE_KEY_RING = {"k1": K1}
    mcp_server_register(slug="web", url="http://127.0.0.1:9/mcp", operator_token="op-token")
    mcp_server_register(slug="docs", command=["python", "server.py"], secret_env={"API_TOKEN": "sk-docs"})
    account, _key = service_account_with_key(tenant, name="agent")
    pending_approval(account, {"title": "t"})
    webhook_set(tenant=tenant, url="http://127.0.0.1:9/hooks", user=None)
    provider_save(
        provider=IdentityProvider(slug="corp", display_name="Corp", issuer="https://idp.example", client_id="tg"),
        client_secret="sso-client-secret",
    )
    settings.TOOLGATE_KEY_RING = ROTATING
    since = Change.objects.count()

    dry, _err = run("--dry-run")
    out, _err = run()

    # then the dry run and the run name each kind with its counts
    assert dry.splitlines()[1:] == [
        "connections: already current 0, to rewrap 1 (k1: 1)",
        "oauth provider client secrets: already current 0, to rewrap 1 (k1: 1)",
        "identity provider client secrets: already current 0, to rewrap 1 (k1: 1)",
        "mcp server operator tokens: already current 0, to rewrap 1 (k1: 1)",
        "mcp server secret environments: already current 0, to rewrap 1 (k1: 1)",
        "pending approvals' arguments: already current 0, to rewrap 1 (k1: 1)",
        "tenant webhook secrets: already current 0, to rewrap 1 (k1: 1)",
        "key ids in use now: k1 (connections 1, oauth provider client secrets 1, "
        "identity provider client secrets 1, mcp server operator tokens 1, "
        "mcp server secret environments 1, pending approvals' arguments 1, tenant webhook secrets 1)",
    ]
    lines = out.splitlines()
    assert lines[0] == "rotating to key 'k2': 0 already current, 7 to rewrap, 500 per batch"
    assert [line for line in lines if "batch 1" not in line][1:] == [
        CONNECTIONS.format(1, 0, 0, 0),
        "oauth provider client secrets: " + SUMMARY.format(1, 0, 0, 0),
        "identity provider client secrets: " + SUMMARY.format(1, 0, 0, 0),
        "mcp server operator tokens: " + SUMMARY.format(1, 0, 0, 0),
        "mcp server secret environments: " + SUMMARY.format(1, 0, 0, 0),
        "pending approvals' arguments: " + SUMMARY.format(1, 0, 0, 0),
        "tenant webhook secrets: " + SUMMARY.format(1, 0, 0, 0),
        "key ids in use now: k2 (connections 1, oauth provider client secrets 1, "
        "identity provider client secrets 1, mcp server operator tokens 1, "
        "mcp server secret environments 1, pending approvals' arguments 1, tenant webhook secrets 1)",
        K1_CAN_GO,
    ]
    # and the run's one change-log entry holds every kind's counts and the key ids still in use
    (entry,) = Change.objects.order_by("pk")[since:]
    counts = {
        f"{kind}_{n}": 1 if n == "rewrapped" else 0 for kind in ALL_KINDS for n in ("rewrapped", "skipped", "failed")
    }
    assert (entry.action, entry.after) == ("keys.rotate", {"primary_key_id": "k2", **counts, "key_ids_in_use": ["k2"]})
    for secret in ("ghp_a", "gh-client-secret", "op-token", "sk-docs", "sso-client-secret"):
        assert secret not in out + dry + json.dumps(entry.after)
