"""change_record: allowlisted diffs, one transaction with the write, and who/where from the bound source."""

from __future__ import annotations

import getpass

import pytest
from django.db import transaction
from structlog.contextvars import bind_contextvars, unbind_contextvars

from changes_app.context import Actor, change_source, current_source, task_source_bound, task_source_cleared
from changes_app.kinds import ActorKind, Origin
from changes_app.models import Change
from changes_app.services import ChangeLogError, ObjectRef, change_record, change_snapshot
from policies_app.models import ToolPolicy
from tests.factories import TenantFactory, ToolPolicyFactory

pytestmark = pytest.mark.django_db

TOOL = ObjectRef(type="tools_app.tool", id="core__wait", label="core__wait")
OPERATOR = Actor(kind=ActorKind.USER, id="7", label="olivia")


def test_an_entry_keeps_only_the_fields_that_changed():
    with transaction.atomic():
        change = change_record(
            action="tool.enable",
            obj=TOOL,
            before={"is_enabled": False, "effect": "read_only"},
            after={"is_enabled": True, "effect": "read_only"},
        )

    assert change is not None
    change.refresh_from_db()
    assert (change.before, change.after) == ({"is_enabled": False}, {"is_enabled": True})
    assert (change.object_type, change.object_id, change.object_label) == ("tools_app.tool", "core__wait", "core__wait")


def test_fields_outside_the_allowlist_never_reach_the_row():
    with transaction.atomic():
        change = change_record(
            action="tool.enable",
            obj=TOOL,
            before={"is_enabled": False, "api_key": "canary-one"},
            after={"is_enabled": True, "api_key": "canary-two", "encrypted_credentials": "canary-three"},
        )

    assert change is not None
    assert (change.before, change.after) == ({"is_enabled": False}, {"is_enabled": True})
    assert not Change.objects.filter(before__has_key="api_key").exists()


def test_an_update_that_changes_no_recorded_field_leaves_no_entry():
    with transaction.atomic():
        change = change_record(action="tool.enable", obj=TOOL, before={"is_enabled": True}, after={"is_enabled": True})

    assert change is None
    assert Change.objects.count() == 0


def test_a_creation_records_every_field_after_and_a_deletion_every_field_before():
    policy = ToolPolicyFactory(name="acme", tenant=TenantFactory(slug="acme"), allowed_tools=["core__wait"])
    snapshot = change_snapshot(policy)

    with transaction.atomic():
        created = change_record(action="policy.create", obj=policy, after=snapshot)
        deleted = change_record(action="policy.delete", obj=policy, before=snapshot)

    assert created is not None
    assert deleted is not None
    assert (created.before, created.after["allowed_tools"], created.after["tenant"]) == (
        {},
        ["core__wait"],
        policy.tenant_id,
    )
    assert set(created.after) == set(snapshot)
    assert (deleted.before["name"], deleted.after) == ("acme", {})
    assert created.tenant_id == deleted.tenant_id == policy.tenant_id


@pytest.mark.django_db(transaction=True)
def test_recording_outside_a_transaction_is_refused():
    with pytest.raises(ChangeLogError, match="inside the transaction"):
        change_record(action="tool.enable", obj=TOOL, before={"is_enabled": False}, after={"is_enabled": True})
    assert Change.objects.count() == 0


def test_an_object_type_without_an_allowlist_is_refused():
    with transaction.atomic(), pytest.raises(ChangeLogError, match=r"no recorded fields for 'policies_app\.tenant'"):
        change_record(action="tenant.create", obj=TenantFactory(slug="acme"), after={"slug": "acme"})


def test_a_rolled_back_write_leaves_no_entry():
    tenant = TenantFactory(slug="acme")

    def write_then_fail() -> None:
        with transaction.atomic():
            policy = ToolPolicy.objects.create(name="doomed", tenant=tenant)
            change_record(action="policy.create", obj=policy, after=change_snapshot(policy))
            raise RuntimeError("the write fails after recording")

    with pytest.raises(RuntimeError):
        write_then_fail()

    assert Change.objects.count() == 0
    assert not ToolPolicy.objects.exists()


def test_the_bound_source_names_origin_and_actor_and_the_default_is_the_os_user():
    with change_source(Origin.ADMIN, OPERATOR), transaction.atomic():
        bound = change_record(action="tool.enable", obj=TOOL, before={"is_enabled": False}, after={"is_enabled": True})
    with transaction.atomic():
        unbound = change_record(
            action="tool.disable", obj=TOOL, before={"is_enabled": True}, after={"is_enabled": False}
        )

    assert bound is not None
    assert unbound is not None
    assert (bound.origin, bound.actor_kind, bound.actor_id, bound.actor_label) == ("admin", "user", "7", "olivia")
    user = getpass.getuser()
    assert (unbound.origin, unbound.actor_kind, unbound.actor_id) == ("command", "command", f"os:{user}")
    assert unbound.actor_label.startswith(f"os:{user}")


def test_a_lazy_actor_is_resolved_when_the_change_is_recorded():
    seen: list[str] = []

    def actor() -> Actor:
        seen.append("resolved")
        return OPERATOR

    with change_source(Origin.REST, actor):
        assert seen == []
        assert current_source() == (Origin.REST, OPERATOR)
    assert seen == ["resolved"]


def test_a_task_binds_its_own_source_and_restores_the_one_around_it():
    class Task:
        name = "tools_app.discover_mcp_server"

    with change_source(Origin.TENANT_UI, OPERATOR):
        task_source_bound(task_id="t1", task=Task())
        during = current_source()
        task_source_cleared(task_id="t1")
        after = current_source()

    assert during == (
        Origin.TASK,
        Actor(kind=ActorKind.TASK, id="tools_app.discover_mcp_server", label="task tools_app.discover_mcp_server"),
    )
    assert after == (Origin.TENANT_UI, OPERATOR)


def test_the_request_id_of_the_log_context_is_recorded():
    bind_contextvars(request_id="req-123")
    try:
        with transaction.atomic():
            change = change_record(
                action="tool.enable", obj=TOOL, before={"is_enabled": False}, after={"is_enabled": True}
            )
    finally:
        unbind_contextvars("request_id")

    assert change is not None
    assert change.request_id == "req-123"


def test_field_changes_pairs_before_and_after_and_skips_fields_empty_on_both_sides():
    change = Change(before={"status": "active", "revoked_at": None}, after={"status": "revoked", "expires_at": None})

    assert change.field_changes() == [("status", "active", "revoked")]
