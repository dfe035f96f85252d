"""The audit row's inserter writes exactly the row `objects.create` would, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from tests.factories import TenantFactory, service_account_with_key
from tools_app.models import ToolInvocation
from tools_app.rows import RowInserter, _as_given

pytestmark = pytest.mark.django_db

COMPARED = [f.attname for f in ToolInvocation._meta.concrete_fields if f.attname != "id"]


def _values(tenant, account, tool_call_id: str, **overrides) -> dict:
    values = {
        "tenant": tenant,
        "service_account_id": account.id,
        "tool_call_id": tool_call_id,
        "run_id": "run-ü",
        "tool_id": "core__get_current_time",
        "connection_id": "",
        "grant_id": "g",
        "decision": "allow",
        "ok": True,
        "executed": True,
        "error_code": "",
        "safe_message": "",
        "args_sha256": "a" * 64,
        "result": {"now": "2026-11-23T00:00:00Z", "nested": [1, None, "ünï"], "null": None},
        "result_bytes": 42,
        "started_at": datetime(2026, 11, 23, 1, 2, 3, 456789, tzinfo=UTC),
        "ended_at": datetime(2026, 11, 23, 1, 2, 4, tzinfo=UTC),
        "duration_ms": 1000,
    }
    return values | overrides


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"result": None, "ok": False, "error_code": "timeout", "safe_message": "cut at budget", "executed": False},
        {"result": [], "result_bytes": None, "ended_at": None, "duration_ms": None},
        {"result": "a bare string"},
    ],
    ids=["ok", "refused", "empty-list-result", "string-result"],
)
def test_a_row_inserted_is_the_row_the_orm_creates(overrides):
    tenant = TenantFactory(slug="rows")
    account, _key = service_account_with_key(tenant)

    ToolInvocation.objects.create(**_values(tenant, account, "by-orm", **overrides))
    RowInserter(ToolInvocation).insert(**_values(tenant, account, "by-inserter", **overrides))

    by_orm, by_inserter = (
        ToolInvocation.objects.filter(tool_call_id=call_id).values(*COMPARED).get()
        for call_id in ("by-orm", "by-inserter")
    )
    assert {**by_inserter, "tool_call_id": "by-orm"} == by_orm
    assert by_inserter["state"] == ToolInvocation.State.DONE  # a model default the caller did not pass


def test_json_null_result_and_sql_null_stay_apart():
    tenant = TenantFactory(slug="nulls")
    account, _key = service_account_with_key(tenant)

    RowInserter(ToolInvocation).insert(**_values(tenant, account, "sql-null", result=None))

    assert ToolInvocation.objects.filter(tool_call_id="sql-null", result__isnull=True).exists()


def test_a_keyword_that_names_no_field_is_refused_before_anything_is_written():
    tenant = TenantFactory(slug="typo")
    account, _key = service_account_with_key(tenant)

    with pytest.raises(TypeError, match="ToolInvocation has no field 'tool_cal_id'"):
        RowInserter(ToolInvocation).insert(**_values(tenant, account, "x") | {"tool_cal_id": "y"})

    assert not ToolInvocation.objects.exists()


@pytest.mark.parametrize("field", ToolInvocation._meta.concrete_fields, ids=lambda field: field.name)
def test_a_value_passed_as_given_is_what_the_field_itself_would_send(field):
    # given: the type the inserter hands over without asking the field (None: it always asks)
    as_given = _as_given(field)
    samples = {str: ["", "run-ü", "x" * 500], bool: [True, False]}.get(as_given, [])

    # then: for this Django, the field's own preparation would have sent exactly that value
    for value in [None, *samples] if as_given is not None else []:
        prepared = field.get_db_prep_save(value, connection)
        assert prepared == value
        assert type(prepared) is type(value)
    if field.get_internal_type() in {"CharField", "BooleanField"}:
        assert as_given is not None
