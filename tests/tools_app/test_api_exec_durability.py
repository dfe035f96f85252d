"""An exec's answer waits for its audit row's commit, though the row is sent before the answer is built.

The INSERT goes out ahead of the answer (config/postgresql's `write_ahead`)
and config.middleware.answer_after_durable_writes reads its result before the
answer leaves. Here the commit itself is made to fail, on the server, after
the view has built its 200: a deferred constraint trigger on the claims table,
which the call's one statement writes, refuses the commit as a shutting-down
server would. The caller must get the outage's 503, never the 200 of a call
that has no row. (tests/integration/test_durable_answers.py kills a worker
under load; tests/config/test_write_ahead.py holds the backend's part.)
"""

from __future__ import annotations

import pytest

from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client, enable_tools
from tools_app.models import ToolInvocation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_required")]


@pytest.fixture
def key() -> str:
    enable_tools("core__get_current_time")
    tenant = TenantFactory(slug="durable")
    _account, key = service_account_with_key(tenant)
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    return key


def test_a_call_whose_audit_row_fails_at_its_commit_answers_503_not_its_result(key, commits_refused):
    response = api_client(key).post("/api/v1/tools/exec", {"tool_id": "core__get_current_time"}, format="json")

    assert response.status_code == 503, response.content
    assert response.json()["error_code"] == "unavailable_dependency"
    assert response["Retry-After"]
    assert "now" not in response.json()  # nothing of the tool's result leaves without its row
    assert not ToolInvocation.objects.filter(tool_id="core__get_current_time").exists()


def test_the_same_call_answers_its_result_once_commits_succeed(key):
    response = api_client(key).post("/api/v1/tools/exec", {"tool_id": "core__get_current_time"}, format="json")

    assert response.status_code == 200, response.content
    row = ToolInvocation.objects.get(tool_call_id=response.json()["tool_call_id"])
    assert (row.ok, row.executed) == (True, True)
