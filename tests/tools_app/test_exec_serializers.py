"""The exec answer built directly is what its declared fields render, field for field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from rest_framework import serializers

from runner.types import ToolExecResult
from tools_app.api.serializers import ExecSuccessOutputSerializer

STARTED = datetime(2026, 11, 23, 1, 2, 3, 456789, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "ended_at"),
    [
        ({"now": "2026-11-23T01:02:03Z", "nested": [1, None, "ünï"]}, STARTED + timedelta(milliseconds=3)),
        (None, STARTED),
        ([], STARTED.astimezone(timezone(timedelta(hours=-5)))),
        ("text", STARTED.replace(microsecond=0)),
    ],
)
def test_the_success_answer_is_what_the_declared_fields_render(value, ended_at):
    result = ToolExecResult(
        tool_call_id="call-1",
        tool_id="core__get_current_time",
        ok=True,
        value=value,
        started_at=STARTED,
        ended_at=ended_at,
    )
    built = ExecSuccessOutputSerializer(result).data
    by_fields = serializers.Serializer.to_representation(ExecSuccessOutputSerializer(result), result)

    assert dict(built) == dict(by_fields)
    assert list(built) == list(ExecSuccessOutputSerializer().fields)
