"""rotate_encryption_keys and MCP servers: operator tokens and stdio secret environments follow the ring.

Servers are registered by the service under an old ring (k1); the command runs
under the rotating ring (k2 first, k1 kept); then k1 is dropped and the
server's secrets must still open, the token on the real call path to a
loopback upstream.
"""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import CommandError, call_command

from core import crypto
from core.crypto import KeyRing, open_sealed, seal
from gateway.models import McpServer
from gateway.upstream.services import mcp_server_discover, mcp_server_register
from gateway.upstream.vault import token_vault

pytestmark = pytest.mark.django_db

K1 = hashlib.sha256(b"mcp rotation test key k1").digest()
K2 = hashlib.sha256(b"mcp rotation test key k2").digest()
OLD = {"k1": K1}
ROTATING = {"k2": K2, "k1": K1}
NEW = {"k2": K2}
TOKEN = "op-token-rotation-7c1d"
SECRET = "sk-stdio-rotation-9e2f"
SUMMARY = "rewrapped {}, already current {}, skipped because changed concurrently {}, failed {}"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("rotate_encryption_keys", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def register_under(settings, ring: dict[str, bytes], **fields) -> McpServer:
    """A server registered by the service while `ring` is the key ring."""
    settings.TOOLGATE_KEY_RING = ring
    server, _ = mcp_server_register(**fields)
    return server


def stdio_server(settings, ring: dict[str, bytes], slug: str = "docs") -> McpServer:
    return register_under(settings, ring, slug=slug, command=["python", "server.py"], secret_env={"API_TOKEN": SECRET})


def sealed_columns() -> dict[str, tuple[str, bytes | None, str, bytes | None]]:
    return {
        slug: (token_key, bytes(token) if token else None, env_key, bytes(env) if env else None)
        for slug, token_key, token, env_key, env in McpServer.objects.values_list(
            "slug", "operator_token_key_id", "operator_token_sealed", "secret_env_key_id", "secret_env_sealed"
        )
    }


def test_tokens_and_secret_environments_are_rewrapped_and_open_with_the_new_key_alone(settings, allow_private):
    # given an HTTP server with an operator token and a stdio server with a secret environment, under k1
    register_under(settings, OLD, slug="acme", url="http://127.0.0.1:9/mcp", operator_token=TOKEN)
    stdio_server(settings, OLD)
    settings.TOOLGATE_KEY_RING = ROTATING

    # when the keys rotate
    out = run()

    # then both values are under k2, their key id columns say so, and the output names each kind
    lines = out.splitlines()
    assert lines[0] == "rotating to key 'k2': 0 already current, 2 to rewrap, 500 per batch"
    assert "mcp server operator tokens: " + SUMMARY.format(1, 0, 0, 0) in lines
    assert "mcp server secret environments: " + SUMMARY.format(1, 0, 0, 0) in lines
    assert lines[-2:] == [
        "key ids in use now: k2 (mcp server operator tokens 1, mcp server secret environments 1)",
        "no sealed value uses k1: can be removed from TOOLGATE_ENCRYPTION_KEYS",
    ]
    columns = sealed_columns()
    assert (columns["acme"][0], columns["docs"][2]) == ("k2", "k2")
    assert crypto.envelope_key_id(columns["acme"][1]) == crypto.envelope_key_id(columns["docs"][3]) == "k2"
    # and with k1 gone from the ring, what the call path and the MCP host open still opens
    settings.TOOLGATE_KEY_RING = NEW
    acme, docs = McpServer.objects.get(slug="acme"), McpServer.objects.get(slug="docs")
    assert token_vault().open(bytes(acme.operator_token_sealed), server_id=str(acme.pk)) == TOKEN
    assert json.loads(token_vault().open(bytes(docs.secret_env_sealed), server_id=str(docs.pk))) == {
        "API_TOKEN": SECRET
    }
    assert TOKEN not in out
    assert SECRET not in out


def test_after_rotation_the_upstream_still_gets_the_operator_token_with_the_old_key_dropped(
    settings, allow_private, legacy_upstream
):
    server = register_under(settings, OLD, slug="acme", url=legacy_upstream.url, operator_token=TOKEN)
    settings.TOOLGATE_KEY_RING = ROTATING
    run()
    settings.TOOLGATE_KEY_RING = NEW
    legacy_upstream.clear()

    report = mcp_server_discover(server_id=server.pk)

    assert len(report.new) == 5
    assert {r.authorization for r in legacy_upstream.requests if r.rpc_method == "tools/list"} == {f"Bearer {TOKEN}"}


def test_without_the_rotation_dropping_the_old_key_breaks_the_server(settings, allow_private, legacy_upstream):
    """The trap this rotation closes: the token sealed under k1 does not open once k1 is gone."""
    server = register_under(settings, OLD, slug="acme", url=legacy_upstream.url, operator_token=TOKEN)
    settings.TOOLGATE_KEY_RING = NEW

    with pytest.raises(crypto.EncryptionKeyMissing):
        token_vault().open(bytes(server.operator_token_sealed), server_id=str(server.pk))


def test_a_second_run_rewraps_nothing_and_a_cleared_token_is_not_counted(settings, allow_private):
    register_under(settings, OLD, slug="acme", url="http://127.0.0.1:9/mcp", operator_token=TOKEN)
    register_under(settings, OLD, slug="plain", url="http://127.0.0.1:9/mcp")  # no token: nothing sealed
    stdio_server(settings, OLD)
    settings.TOOLGATE_KEY_RING = ROTATING
    run()
    after_first = sealed_columns()

    again = run()

    assert "mcp server operator tokens: " + SUMMARY.format(0, 1, 0, 0) in again.splitlines()
    assert "mcp server secret environments: " + SUMMARY.format(0, 1, 0, 0) in again.splitlines()
    assert sealed_columns() == after_first
    assert after_first["plain"] == ("", None, "", None)


def test_dry_run_counts_servers_and_writes_nothing(settings, allow_private):
    register_under(settings, OLD, slug="acme", url="http://127.0.0.1:9/mcp", operator_token=TOKEN)
    register_under(settings, ROTATING, slug="beta", url="http://127.0.0.1:9/mcp", operator_token=TOKEN)
    stdio_server(settings, OLD)
    settings.TOOLGATE_KEY_RING = ROTATING
    before = sealed_columns()

    out = run("--dry-run")

    assert out.splitlines()[1:] == [
        "connections: already current 0, to rewrap 0",
        "mcp server operator tokens: already current 1, to rewrap 1 (k1: 1)",
        "mcp server secret environments: already current 0, to rewrap 1 (k1: 1)",
        "key ids in use now: k1 (mcp server operator tokens 1, mcp server secret environments 1), "
        "k2 (mcp server operator tokens 1)",
    ]
    assert sealed_columns() == before


def test_a_token_set_while_the_rewrap_runs_survives_and_the_next_run_rewraps_it(settings, allow_private, monkeypatch):
    server = register_under(settings, OLD, slug="acme", url="http://127.0.0.1:9/mcp", operator_token=TOKEN)
    settings.TOOLGATE_KEY_RING = ROTATING
    real_open = crypto.open_sealed

    def open_then_an_operator_sets_a_new_token(blob, *, binding, ring):
        opened = real_open(blob, binding=binding, ring=ring)
        # what `mcp_upstream add --secret-env` does in a process still running with k1 first
        sealed = seal(b"op-token-new", binding={"mcp_server": str(server.pk)}, ring=KeyRing(OLD))
        McpServer.objects.filter(pk=server.pk).update(operator_token_sealed=sealed.blob, operator_token_key_id="k1")
        return opened

    monkeypatch.setattr(crypto, "open_sealed", open_then_an_operator_sets_a_new_token)
    out = run()
    monkeypatch.undo()

    assert "mcp server operator tokens: " + SUMMARY.format(0, 0, 1, 0) in out.splitlines()
    assert out.splitlines()[-2:] == [
        "key ids in use now: k1 (mcp server operator tokens 1)",
        "still in use, keep in TOOLGATE_ENCRYPTION_KEYS: k1",
    ]
    row = McpServer.objects.get(pk=server.pk)
    assert row.operator_token_key_id == "k1"
    assert open_sealed(row.operator_token_sealed, binding={"mcp_server": str(server.pk)}, ring=KeyRing(OLD)) == (
        b"op-token-new"
    )

    run()

    settings.TOOLGATE_KEY_RING = NEW
    row.refresh_from_db()
    assert row.operator_token_key_id == "k2"
    assert token_vault().open(bytes(row.operator_token_sealed), server_id=str(server.pk)) == "op-token-new"


def test_a_secret_environment_no_key_opens_is_named_and_left_alone(settings):
    stdio_server(settings, {"k0": hashlib.sha256(b"lost key").digest()})
    before = sealed_columns()
    settings.TOOLGATE_KEY_RING = ROTATING
    err = io.StringIO()

    with pytest.raises(CommandError) as failed:
        call_command("rotate_encryption_keys", stdout=io.StringIO(), stderr=err)

    assert str(failed.value).startswith("could not rewrap 1 mcp server secret environment(s): docs. ")
    assert str(failed.value).endswith(
        "A stdio server's secret environment: set it again with mcp_upstream add SLUG --command ... "
        "--secret-env NAME=VAR."
    )
    assert err.getvalue().startswith("mcp server secret environment docs: encryption key 'k0' is not in")
    assert sealed_columns() == before
