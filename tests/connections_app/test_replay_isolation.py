"""A recorded result is replayed only to the caller that made the call.

The attack: a second service account of the same tenant sends the first one's
tool_call_id (listed by GET /api/v1/invocations) with the first one's
connection, and used to get its GitHub result back. Every variant below must
answer without the original's value and without reaching GitHub again.
"""

from __future__ import annotations

import pytest

from connections_app.services import grant_revoke
from tests.factories import ConnectionFactory, GrantFactory, ToolPolicyFactory, service_account_with_key
from tests.support.api import api_client
from tools_app.services import tool_set_enabled

pytestmark = pytest.mark.django_db

USER = {"login": "octocat", "id": 583231, "name": "The Octocat", "html_url": "https://github.com/octocat"}
NULL_GRANT = "00000000-0000-0000-0000-000000000000"


@pytest.fixture
def recorded(github, caller, call_tool):
    """The victim's executed github__get_user call with tool_call_id `victim-1`."""
    account, _key = caller
    github.route("GET", "/user", json=USER)
    connection = ConnectionFactory(tenant=account.tenant, credentials={"api_key": "ghp_victimToken0123456789abcdef"})
    grant = GrantFactory(service_account=account, connections=[connection])
    first = call_tool(connection, grant, tool_call_id="victim-1")
    assert (first.status_code, first.json()["value"]) == (200, USER)
    return connection, grant


def attack(key: str, connection, grant_id: str):
    body = {
        "tool_id": "github__get_user",
        "args": {},
        "connection_id": str(connection.pk),
        "grant_id": grant_id,
        "tool_call_id": "victim-1",
    }
    return api_client(key).post("/api/v1/tools/exec", body, format="json")


def test_the_reported_attack_is_refused_by_policy_before_any_replay(github, tenant, recorded):
    # given an attacker of the same tenant whose own policy does not allow the tool and who holds no grant
    connection, _grant = recorded
    attacker, key = service_account_with_key(tenant, name="attacker")
    ToolPolicyFactory(tenant=tenant, service_account=attacker, allowed_tools=["core__get_current_time"])

    response = attack(key, connection, NULL_GRANT)

    assert (response.status_code, response.json()["error_code"]) == (403, "policy_denied")
    assert "value" not in response.json()
    assert len(github.requests) == 1


def test_another_caller_with_its_own_valid_grant_gets_a_conflict_that_reveals_nothing(github, tenant, recorded):
    # given an attacker allowed the tool and granted the very same connection
    connection, _grant = recorded
    attacker, key = service_account_with_key(tenant, name="attacker")
    attacker_grant = GrantFactory(service_account=attacker, connections=[connection])

    response = attack(key, connection, str(attacker_grant.pk))
    own_call = attack(key, connection, str(attacker_grant.pk)).json()  # same conflict on repeat: nothing learnt
    fresh_body = {
        "tool_id": "github__get_user",
        "args": {},
        "connection_id": str(connection.pk),
        "grant_id": str(attacker_grant.pk),
        "tool_call_id": "attacker-1",
    }
    unused_id = api_client(key).post("/api/v1/tools/exec", fresh_body, format="json")

    body = response.json()
    assert (response.status_code, body["error_code"]) == (409, "idempotency_conflict")
    assert set(body) == {"tool_call_id", "tool_id", "ok", "error_code", "safe_message"}
    assert "octocat" not in response.content.decode()
    assert own_call["error_code"] == "idempotency_conflict"
    assert body["safe_message"] == "tool_call_id was already used for a different request; use a new tool_call_id"
    assert unused_id.status_code == 200  # the attacker's own calls run: only the victim's id is refused
    assert len(github.requests) == 2


def test_the_same_caller_with_another_grant_gets_a_conflict(github, caller, recorded, call_tool):
    connection, _grant = recorded
    account, _key = caller
    other_grant = GrantFactory(service_account=account, connections=[connection])

    response = call_tool(connection, other_grant, tool_call_id="victim-1")

    assert (response.status_code, response.json()["error_code"]) == (409, "idempotency_conflict")
    assert len(github.requests) == 1


def test_the_caller_itself_gets_its_replay(github, recorded, call_tool):
    connection, grant = recorded

    response = call_tool(connection, grant, tool_call_id="victim-1")

    assert (response.status_code, response.json()["value"]) == (200, USER)
    assert len(github.requests) == 1


@pytest.mark.parametrize("withdrawn", ["tool disabled", "policy narrowed", "grant revoked"])
def test_a_replay_never_outlives_the_permission_that_let_the_call_run(github, caller, recorded, call_tool, withdrawn):
    connection, grant = recorded
    account, _key = caller
    if withdrawn == "tool disabled":
        tool_set_enabled(tool_ids=["github__get_user"], enabled=False)
    elif withdrawn == "policy narrowed":
        ToolPolicyFactory(tenant=account.tenant, service_account=account, allowed_tools=["github__create_issue"])
    else:
        grant_revoke(grant=grant)

    response = call_tool(connection, grant, tool_call_id="victim-1")

    assert (response.status_code, response.json()["error_code"]) == (403, "policy_denied")
    assert "value" not in response.json()
    assert len(github.requests) == 1
