"""The operator's management commands: create_tenant, create_service_account, create_tenant_user, policy."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from policies_app.governance import governance_cache
from policies_app.models import ServiceAccount, Tenant, TenantMembership, ToolPolicy
from policies_app.selectors import caller_for_key, invocations_readable_by
from tests.factories import MembershipFactory, TenantFactory, ToolPolicyFactory, UserFactory, service_account_with_key
from tools_app.models import Tool
from tools_app.registry import code_specs
from tools_app.services import tool_sync

pytestmark = pytest.mark.django_db

STRONG_PASSWORD = "plum-quarry-lantern-47"


@pytest.fixture(autouse=True)
def fast_hasher(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def run(*args: str, **options: object) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


# --- create_tenant ----------------------------------------------------------------------


def test_create_tenant():
    out, _err = run("create_tenant", "acme", "--name", "Acme Corp")

    assert list(Tenant.objects.values_list("slug", "name")) == [("acme", "Acme Corp")]
    assert out == "created tenant acme (Acme Corp)\n"


def test_create_tenant_name_defaults_to_the_slug():
    run("create_tenant", "acme")

    assert Tenant.objects.get().name == "acme"


def test_create_tenant_refuses_an_existing_slug_and_changes_nothing():
    TenantFactory(slug="acme", name="Original")

    with pytest.raises(CommandError, match="tenant 'acme' already exists"):
        run("create_tenant", "acme", "--name", "Other")

    assert list(Tenant.objects.values_list("slug", "name")) == [("acme", "Original")]


def test_create_tenant_refuses_an_invalid_slug():
    with pytest.raises(CommandError, match="tenant 'not a slug' refused: Enter a valid “slug”"):
        run("create_tenant", "not a slug")

    assert Tenant.objects.count() == 0


# --- create_service_account ---------------------------------------------------------------


def test_create_service_account_prints_the_key_alone_on_the_last_line_and_it_authenticates():
    TenantFactory(slug="acme")

    out, err = run("create_service_account", "--tenant", "acme", "support-bot")

    lines = out.splitlines()
    key = lines[-1]
    governance_cache.refresh()
    caller = caller_for_key(key=key)
    assert lines[:-1] == [
        "created service account acme/support-bot with scopes tools:exec",
        "its API key follows; it is shown only this once:",
    ]
    assert key.startswith("tg_")
    assert key == key.strip()
    assert out.count(key) == 1
    assert err == ""
    assert caller is not None
    assert (caller.tenant_slug, caller.name, caller.scopes) == ("acme", "support-bot", frozenset({"tools:exec"}))


def test_create_service_account_with_scopes():
    TenantFactory(slug="acme")

    out, _err = run("create_service_account", "--tenant", "acme", "ops", "--scopes", "tools:exec, connections:manage")

    assert ServiceAccount.objects.get(name="ops").scopes == ["connections:manage", "tools:exec"]
    assert out.splitlines()[0] == "created service account acme/ops with scopes connections:manage, tools:exec"


def test_create_service_account_that_reads_the_tenants_invocations():
    TenantFactory(slug="acme")

    out, _err = run("create_service_account", "--tenant", "acme", "auditor", "--scopes", "invocations:read")

    key = out.splitlines()[-1]
    assert ServiceAccount.objects.get(name="auditor").scopes == ["invocations:read"]
    assert invocations_readable_by(caller=caller_for_key(key=key)) is None  # every row of its tenant


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tenant", "ghost", "bot"], "no tenant 'ghost'"),
        (["--tenant", "acme", "bot", "--scopes", "tools:exec,admin"], "unknown scopes: admin"),
        (["--tenant", "acme", "bot", "--scopes", ","], "--scopes names no scope"),
    ],
)
def test_create_service_account_refusals_create_nothing(argv, message):
    TenantFactory(slug="acme")

    with pytest.raises(CommandError, match=message):
        run("create_service_account", *argv)

    assert ServiceAccount.objects.count() == 0


def test_create_service_account_refuses_a_duplicate_name_and_keeps_the_old_key():
    acme = TenantFactory(slug="acme")
    _account, old_key = service_account_with_key(acme, name="bot")

    with pytest.raises(CommandError, match="service account acme/bot already exists"):
        run("create_service_account", "--tenant", "acme", "bot")

    governance_cache.refresh()
    assert ServiceAccount.objects.count() == 1
    assert caller_for_key(key=old_key) is not None


# --- create_tenant_user -------------------------------------------------------------------


def test_create_tenant_user_reads_the_password_from_the_environment(monkeypatch):
    TenantFactory(slug="acme")
    monkeypatch.setenv("TOOLGATE_USER_PASSWORD", STRONG_PASSWORD)

    out, err = run("create_tenant_user", "--tenant", "acme", "alice", "--role", "owner")

    user = get_user_model().objects.get(username="alice")
    assert user.check_password(STRONG_PASSWORD)
    assert list(TenantMembership.objects.values_list("user__username", "tenant__slug", "role")) == [
        ("alice", "acme", "owner")
    ]
    assert out == "created user alice, owner of tenant acme\n"
    assert STRONG_PASSWORD not in out + err


def test_create_tenant_user_updates_password_and_role_of_an_existing_user(monkeypatch):
    acme = TenantFactory(slug="acme")
    MembershipFactory(user=UserFactory(username="alice"), tenant=acme, role=TenantMembership.Role.OWNER)
    monkeypatch.setenv("TOOLGATE_USER_PASSWORD", STRONG_PASSWORD)

    out, err = run("create_tenant_user", "--tenant", "acme", "alice")

    user = get_user_model().objects.get(username="alice")
    assert user.check_password(STRONG_PASSWORD)
    assert list(TenantMembership.objects.values_list("user__username", "role")) == [("alice", "member")]
    assert get_user_model().objects.count() == 1
    assert out == "updated user alice, member of tenant acme\n"
    assert STRONG_PASSWORD not in out + err


def test_create_tenant_user_without_the_variable_creates_nothing(monkeypatch):
    TenantFactory(slug="acme")
    monkeypatch.delenv("TOOLGATE_USER_PASSWORD", raising=False)

    with pytest.raises(CommandError, match="set the password in the environment variable TOOLGATE_USER_PASSWORD"):
        run("create_tenant_user", "--tenant", "acme", "alice")

    assert get_user_model().objects.count() == 0


def test_create_tenant_user_refuses_a_weak_password_and_creates_nothing(monkeypatch):
    TenantFactory(slug="acme")
    monkeypatch.setenv("TOOLGATE_USER_PASSWORD", "1234567")

    with pytest.raises(CommandError) as refused:
        run("create_tenant_user", "--tenant", "acme", "alice")

    message = str(refused.value)
    assert message.startswith("user 'alice': password rejected: This password is too short.")
    assert "This password is entirely numeric." in message
    assert "1234567" not in message
    assert get_user_model().objects.count() == 0
    assert TenantMembership.objects.count() == 0


def test_create_tenant_user_refuses_a_weak_new_password_for_an_existing_user(monkeypatch):
    acme = TenantFactory(slug="acme")
    MembershipFactory(user=UserFactory(username="alice"), tenant=acme, role=TenantMembership.Role.OWNER)
    old_hash = get_user_model().objects.get(username="alice").password
    monkeypatch.setenv("TOOLGATE_USER_PASSWORD", "password")

    with pytest.raises(CommandError, match=re.escape("This password is too common.")):
        run("create_tenant_user", "--tenant", "acme", "alice", "--role", "member")

    assert get_user_model().objects.get(username="alice").password == old_hash
    assert TenantMembership.objects.get().role == "owner"


def test_create_tenant_user_unknown_tenant(monkeypatch):
    monkeypatch.setenv("TOOLGATE_USER_PASSWORD", STRONG_PASSWORD)

    with pytest.raises(CommandError, match="no tenant 'ghost'"):
        run("create_tenant_user", "--tenant", "ghost", "alice")

    assert get_user_model().objects.count() == 0


# --- policy export / import ---------------------------------------------------------------


@pytest.fixture
def catalog() -> None:
    tool_sync(specs=code_specs())


def test_policy_export_to_stdout_is_the_json_document_alone(catalog):
    ToolPolicyFactory(name="global", allowed_tools=["core__wait"])

    out, _err = run("policy", "export")

    document = json.loads(out)
    assert list(document) == ["tools", "policies", "toolsets", "argument_rules", "result_guards", "role_mappings"]
    assert [policy["name"] for policy in document["policies"]] == ["global"]
    assert out.endswith("}\n")


def test_policy_export_to_a_file_then_import_it_back(catalog, tmp_path):
    ToolPolicyFactory(name="global", allowed_tools=["core__wait"])
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    path = tmp_path / "policies.json"
    stdout_export, _err = run("policy", "export", "-")

    out, _err = run("policy", "export", str(path))
    ToolPolicy.objects.all().delete()
    Tool.objects.update(is_enabled=False)
    imported, _err = run("policy", "import", str(path))

    assert out == f"exported 5 tools and 1 policies to {path}\n"
    assert path.read_text() == stdout_export
    assert imported.splitlines() == [
        "created policy: global",
        "enabled tool: core__wait",
        "policy import: 1 created, 0 updated, 0 unchanged, 0 pruned, 1 tools switched",
    ]
    assert run("policy", "export")[0] == stdout_export


def test_policy_import_prune_option(catalog, tmp_path):
    ToolPolicyFactory(name="stray")
    path = tmp_path / "policies.json"
    path.write_text('{"tools": {}, "policies": []}')

    out, _err = run("policy", "import", str(path), "--prune")

    assert out.splitlines()[-1] == "policy import: 0 created, 0 updated, 0 unchanged, 1 pruned, 0 tools switched"
    assert ToolPolicy.objects.count() == 0


def test_policy_import_refusal_is_a_command_error_naming_the_problem(catalog, tmp_path):
    path = tmp_path / "policies.json"
    path.write_text(
        json.dumps({"tools": {"core__wait": {"enabled": True}}, "policies": [{"name": "p", "tenant": "ghost"}]})
    )

    with pytest.raises(CommandError) as refused:
        run("policy", "import", str(path))

    assert str(refused.value) == ("policy file refused, nothing was changed:\n  policy 'p': unknown tenant 'ghost'")
    assert ToolPolicy.objects.count() == 0
    assert Tool.objects.get(pk="core__wait").is_enabled is False


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("{not json", "not valid JSON")],
)
def test_policy_import_of_an_unreadable_file(tmp_path, content, message):
    path = tmp_path / "policies.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(CommandError, match=message):
        run("policy", "import", str(path))

    assert ToolPolicy.objects.count() == 0


def test_policy_needs_an_action():
    with pytest.raises(CommandError, match=re.escape("the following arguments are required: {export,import}")):
        run("policy")
