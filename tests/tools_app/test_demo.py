"""The demo seed behind `make run`: idempotent, and what it prints works."""

from __future__ import annotations

import io
import json
import re
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from changes_app.models import Change
from policies_app.governance import governance_cache
from policies_app.models import ServiceAccount, Tenant, TenantMembership, ToolPolicy
from policies_app.selectors import caller_for_key, policy_effective_for
from tools_app.demo import demo_seed
from tools_app.models import Tool

pytestmark = pytest.mark.django_db

KEY_LINE = re.compile(r"^ {16}(tg_\S+)$", re.MULTILINE)
LOGIN_LINE = re.compile(r"^ {16}user (\S+)  password (\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def fast_hasher(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def credentials_file(tmp_path):
    return tmp_path / "var" / "demo_credentials.json"


def seed(credentials_file) -> str:
    out = io.StringIO()
    call_command("seed_demo", "--credentials-file", str(credentials_file), stdout=out)
    return out.getvalue()


def printed(out: str) -> tuple[str, list[tuple[str, str]]]:
    return KEY_LINE.search(out).group(1), LOGIN_LINE.findall(out)


def test_seed_creates_the_demo_and_prints_working_credentials(credentials_file):
    out = seed(credentials_file)

    key, logins = printed(out)
    governance_cache.refresh()
    caller = caller_for_key(key=key)
    users = get_user_model().objects
    assert [username for username, _password in logins] == ["operator", "demo-user"]
    (_, operator_password), (_, user_password) = logins
    assert users.get(username="operator").check_password(operator_password)
    assert users.get(username="operator").is_superuser is True
    assert users.get(username="demo-user").check_password(user_password)
    assert users.get(username="demo-user").is_staff is False
    assert list(TenantMembership.objects.values_list("user__username", "tenant__slug", "role")) == [
        ("demo-user", "demo", "owner")
    ]
    assert caller is not None
    assert (caller.tenant_slug, caller.name, caller.scopes) == (
        "demo",
        "demo-agent",
        frozenset({"tools:exec", "connections:manage"}),
    )
    policy = policy_effective_for(tenant_id=caller.tenant_id, service_account_id=caller.service_account_id)
    assert policy is not None
    assert (policy.name, policy.allowed_tools, policy.approval_effects) == (
        "demo-default",
        frozenset(
            {
                "core__get_current_time",
                "core__wait",
                "github__get_user",
                "github__create_issue",
                "toolgate__search_tools",
            }
        ),
        frozenset({"external_side_effect"}),
    )
    assert list(Tool.objects.filter(is_enabled=True).values_list("id", flat=True)) == [
        "core__get_current_time",
        "core__wait",
        "github__create_issue",
        "github__get_user",
        "toolgate__search_tools",
    ]
    assert "http://127.0.0.1:8000/admin/" in out
    assert "http://127.0.0.1:8000/accounts/login/" in out
    assert "MCP:          http://127.0.0.1:8000/mcp" in out
    assert (
        "curl -s -X POST http://127.0.0.1:8000/api/v1/tools/exec "
        f'-H "Authorization: Bearer {key}" -H "Content-Type: application/json" '
        """-d '{"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}}'"""
    ) in out


def test_credentials_file_is_private_and_holds_what_was_printed(credentials_file):
    out = seed(credentials_file)

    key, [(_, operator_password), (_, user_password)] = printed(out)
    assert stat.S_IMODE(credentials_file.stat().st_mode) == 0o600
    assert json.loads(credentials_file.read_text()) == {
        "api_key": key,
        "operator_password": operator_password,
        "user_password": user_password,
    }
    assert [path.name for path in credentials_file.parent.iterdir()] == ["demo_credentials.json"]


def test_second_run_creates_nothing_and_prints_the_same_credentials(credentials_file):
    first = seed(credentials_file)
    file_before = credentials_file.read_text()
    account_before = ServiceAccount.objects.get()

    second = seed(credentials_file)

    assert printed(second) == printed(first)
    assert second.splitlines()[0] == "demo already seeded; nothing created"
    assert first.splitlines()[0] == "created tenant demo"
    assert credentials_file.read_text() == file_before
    assert Tenant.objects.count() == 1
    assert list(ServiceAccount.objects.values_list("pk", "key_digest")) == [
        (account_before.pk, account_before.key_digest)
    ]
    assert ToolPolicy.objects.count() == 1
    assert get_user_model().objects.count() == 2
    assert TenantMembership.objects.count() == 1


def test_operator_edits_to_the_policy_and_switches_survive_a_rerun(credentials_file):
    seed(credentials_file)
    ToolPolicy.objects.filter(name="demo-default").update(allowed_tools=["core__wait"])
    Tool.objects.filter(pk="github__create_issue").update(is_enabled=False)

    seed(credentials_file)

    assert ToolPolicy.objects.get().allowed_tools == ["core__wait"]
    assert Tool.objects.get(pk="github__create_issue").is_enabled is False


def test_lost_credentials_file_replaces_the_account_and_resets_the_passwords(credentials_file):
    # given a seeded demo whose credentials file is gone
    first_key, first_logins = printed(seed(credentials_file))
    old_account = ServiceAccount.objects.get()
    credentials_file.unlink()

    # when
    out = seed(credentials_file)
    second_key, second_logins = printed(out)

    # then the new credentials work and the old key does not
    governance_cache.refresh()
    users = get_user_model().objects
    assert second_key != first_key
    assert caller_for_key(key=first_key) is None
    assert caller_for_key(key=second_key).name == "demo-agent"
    assert ServiceAccount.objects.get().pk != old_account.pk
    assert second_logins != first_logins
    for username, password in second_logins:
        assert users.get(username=username).check_password(password)
    assert (Tenant.objects.count(), ToolPolicy.objects.count(), users.count()) == (1, 1, 2)
    assert out.split("\n\n")[0].splitlines() == [
        "reset the password of operator",
        "reset the password of demo-user",
        "deleted service account demo/demo-agent: its stored key was lost or revoked",
        "created service account demo/demo-agent",
    ]


def test_a_changed_password_is_set_back_to_the_printed_one(credentials_file):
    _key, [(_, operator_password), _user] = printed(seed(credentials_file))
    operator = get_user_model().objects.get(username="operator")
    operator.set_password("something-else-entirely")
    operator.save()

    seed(credentials_file)

    assert get_user_model().objects.get(username="operator").check_password(operator_password)


def test_a_revoked_demo_account_is_replaced(credentials_file):
    first_key, _logins = printed(seed(credentials_file))
    ServiceAccount.objects.update(revoked_at="2026-01-01T00:00:00Z")

    second_key, _logins = printed(seed(credentials_file))

    governance_cache.refresh()
    assert second_key != first_key
    assert caller_for_key(key=second_key) is not None
    assert ServiceAccount.objects.count() == 1


def test_corrupt_credentials_file_is_refused_without_changes(credentials_file):
    credentials_file.parent.mkdir(parents=True)
    credentials_file.write_text("{broken")

    with pytest.raises(CommandError, match="is unreadable"):
        seed(credentials_file)

    assert credentials_file.read_text() == "{broken"
    assert Tenant.objects.count() == 0


def test_service_result_hides_secrets_from_repr(credentials_file):
    demo = demo_seed(credentials_file=credentials_file)

    assert demo.api_key not in repr(demo)
    assert demo.operator_password not in repr(demo)
    assert demo.user_password not in repr(demo)


def test_base_url_option_changes_printed_urls(credentials_file):
    out = io.StringIO()

    call_command(
        "seed_demo", "--credentials-file", str(credentials_file), "--base-url", "http://0.0.0.0:9000/", stdout=out
    )

    assert "http://0.0.0.0:9000/admin/" in out.getvalue()
    assert "http://0.0.0.0:9000/api/v1/tools/exec" in out.getvalue()


def test_verbosity_0_seeds_and_prints_nothing(credentials_file):
    out = io.StringIO()

    call_command("seed_demo", "--credentials-file", str(credentials_file), "--verbosity", "0", stdout=out)

    assert out.getvalue() == ""
    assert ServiceAccount.objects.get().name == "demo-agent"


def test_the_seed_leaves_change_log_entries_from_the_command(credentials_file):
    seed(credentials_file)

    entries = list(Change.objects.order_by("id").values_list("action", "object_id", "origin", "actor_kind"))
    tools = sorted(
        ("core__get_current_time", "core__wait", "github__create_issue", "github__get_user", "toolgate__search_tools")
    )
    policy = ToolPolicy.objects.get()
    account = ServiceAccount.objects.get()
    assert entries == [
        ("service_account.create", str(account.pk), "command", "command"),
        ("policy.create", str(policy.pk), "command", "command"),
        *[("tool.enable", tool_id, "command", "command") for tool_id in tools],
    ]
    assert Change.objects.get(action="policy.create").after["allowed_tools"] == tools

    # a second run writes nothing, so it records nothing
    seed(credentials_file)
    assert Change.objects.count() == len(entries)


def test_a_replaced_demo_account_is_recorded_as_deleted_then_created(credentials_file):
    seed(credentials_file)
    old = ServiceAccount.objects.get()
    credentials_file.unlink()

    seed(credentials_file)

    new = ServiceAccount.objects.get()
    assert list(
        Change.objects.filter(object_type="policies_app.serviceaccount")
        .order_by("id")
        .values_list("action", "object_id")
    ) == [
        ("service_account.create", str(old.pk)),
        ("service_account.delete", str(old.pk)),
        ("service_account.create", str(new.pk)),
    ]
