"""Calls on behalf of a person: subject tokens, the authorization stage, personal connections.

The service sends a person's subject token beside its own key; the server
derives the subject from the token's digest. Everything here goes through the
real API, database and (where a connection is used) a loopback GitHub.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import logging.config
import secrets
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from config import logs
from policies_app import governance
from policies_app.keys import subject_token_generate
from policies_app.models import ApprovalRequest, TenantMembership
from policies_app.services import (
    approval_decide,
    delegation_create,
    delegation_revoke,
    service_account_set_redirect_uris,
)
from runner.authz import SUBJECT_REFUSED, TOOL_NOT_DELEGATED
from runner.grants import PERSONAL
from tests.connections_app.test_canary import everything_in_the_database
from tests.factories import (
    ConnectionFactory,
    GrantFactory,
    MembershipFactory,
    TenantFactory,
    UserFactory,
    service_account_with_key,
)
from tests.support.api import api_client, enable_tools
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

EXEC_URL = "/api/v1/tools/exec"
USER = {"login": "octocat", "id": 1, "name": "Octo", "html_url": "https://github.com/octocat"}
TIME = "core__get_current_time"


@pytest.fixture
def alice(tenant):
    return MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user


@pytest.fixture
def bob(tenant):
    return MembershipFactory(tenant=tenant, user=UserFactory(username="bob"), role="member").user


@pytest.fixture
def agent(caller):
    """The caller of conftest (github tools allowed), plus the time tool."""
    account, key = caller
    enable_tools(TIME, "github__get_user", "github__create_issue")
    policy = account.tenant.policies.get()
    policy.allowed_tools = [*policy.allowed_tools, TIME]
    policy.save()
    return account, key


def as_person(key: str, token: str | None, **body):
    client = api_client(key)
    headers = {} if token is None else {"HTTP_X_TOOLGATE_SUBJECT": token}
    return client.post(EXEC_URL, {"tool_id": TIME, "args": {}, **body}, format="json", **headers)


def test_a_call_with_a_subject_token_runs_for_that_person_and_says_so_everywhere(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)

    response = as_person(key, token, tool_call_id="for-alice")

    assert response.status_code == 200, response.content
    row = ToolInvocation.objects.get(tool_call_id="for-alice")
    assert row.subject_id == f"user:{alice.pk}"
    assert row.authz_reason == ""
    listed = api_client(key).get("/api/v1/invocations", {"subject_id": f"user:{alice.pk}"}).json()
    assert [(item["tool_call_id"], item["subject_id"]) for item in listed["results"]] == [
        ("for-alice", f"user:{alice.pk}")
    ]
    assert api_client(key).get("/api/v1/invocations/for-alice").json()["subject_id"] == f"user:{alice.pk}"


def test_a_call_without_a_subject_is_the_service_accounts_own(agent):
    _account, key = agent

    response = as_person(key, None, tool_call_id="own")

    assert response.status_code == 200
    assert ToolInvocation.objects.get(tool_call_id="own").subject_id == ""
    assert api_client(key).get("/api/v1/invocations/own").json()["subject_id"] is None


def test_forged_revoked_expired_and_other_tenant_tokens_answer_alike(agent, alice, time_machine):
    account, key = agent
    tenant = account.tenant
    _d, revoked = delegation_create(tenant=tenant, user=alice, service_account=account)
    delegation_revoke(delegation=_d)
    _d, expired = delegation_create(
        tenant=tenant, user=alice, service_account=account, expires_at=timezone.now() + timedelta(minutes=1)
    )
    other_tenant = TenantFactory(slug="globex")
    other_account, _other_key = service_account_with_key(other_tenant, name="agent")
    carol = MembershipFactory(tenant=other_tenant, user=UserFactory(username="carol")).user
    _d, foreign = delegation_create(tenant=other_tenant, user=carol, service_account=other_account)
    forged = subject_token_generate().key
    time_machine.move_to(timezone.now() + timedelta(minutes=5))

    cases = {
        "forged": forged,
        "malformed": "not-a-token",
        "empty": "",
        "revoked": revoked,
        "expired": expired,
        "other tenant": foreign,
        "secret part wrong": expired[:-4] + "AAAA",
    }
    bodies = {}
    for name, token in cases.items():
        response = as_person(key, token, tool_call_id=f"c-{name.replace(' ', '-')}")
        assert response.status_code == 403, name
        body = response.json()
        del body["tool_call_id"]
        bodies[name] = json.dumps(body, sort_keys=True)

    assert len(set(bodies.values())) == 1, bodies
    assert json.loads(bodies["forged"])["error_code"] == "authz_denied"
    assert json.loads(bodies["forged"])["safe_message"] == SUBJECT_REFUSED
    reasons = dict(
        ToolInvocation.objects.filter(tool_call_id__startswith="c-").values_list("tool_call_id", "authz_reason")
    )
    assert reasons == {
        "c-forged": "unknown_token",
        "c-malformed": "unknown_token",
        "c-empty": "unknown_token",
        "c-revoked": "revoked",
        "c-expired": "expired",
        "c-other-tenant": "other_caller",
        "c-secret-part-wrong": "unknown_token",
    }
    assert not ToolInvocation.objects.filter(tool_call_id__startswith="c-", executed=True).exists()


def test_a_revocation_reaches_the_very_next_call(agent, alice):
    account, key = agent
    delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    assert as_person(key, token).status_code == 200

    delegation_revoke(delegation=delegation)

    assert as_person(key, token).json()["error_code"] == "authz_denied"


def test_a_person_removed_from_the_tenant_can_no_longer_be_acted_for(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)

    TenantMembership.objects.filter(user=alice).delete()

    response = as_person(key, token, tool_call_id="gone")
    assert response.json()["error_code"] == "authz_denied"
    assert ToolInvocation.objects.get(tool_call_id="gone").authz_reason == "not_member"


def test_the_delegations_tool_subset_narrows_what_the_policy_allows(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(
        tenant=account.tenant, user=alice, service_account=account, tools=["github__get_user"]
    )

    response = as_person(key, token)

    assert (response.status_code, response.json()["safe_message"]) == (403, TOOL_NOT_DELEGATED)


def test_the_subject_never_widens_the_service_accounts_policy(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(
        tenant=account.tenant, user=alice, service_account=account, tools=["core__wait"]
    )
    enable_tools("core__wait")

    response = api_client(key).post(
        EXEC_URL, {"tool_id": "core__wait", "args": {"ms": 0}}, format="json", HTTP_X_TOOLGATE_SUBJECT=token
    )

    assert response.json()["error_code"] == "policy_denied"


def test_a_personal_connection_serves_only_its_owner(github, agent, alice, bob, call_tool):
    account, key = agent
    github.route("GET", "/user", json=USER)
    connection = ConnectionFactory(tenant=account.tenant, owner=alice)
    grant = GrantFactory(service_account=account, connections=[connection])
    _d, alice_token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    _d, bob_token = delegation_create(tenant=account.tenant, user=bob, service_account=account)
    body = {"tool_id": "github__get_user", "args": {}, "connection_id": str(connection.pk), "grant_id": str(grant.pk)}

    for token in (bob_token, None):
        headers = {} if token is None else {"HTTP_X_TOOLGATE_SUBJECT": token}
        refused = api_client(key).post(EXEC_URL, body, format="json", **headers)
        assert (refused.status_code, refused.json()["safe_message"]) == (403, PERSONAL)
    assert github.requests == []  # refused before the broker: GitHub never asked

    used = api_client(key).post(EXEC_URL, body, format="json", HTTP_X_TOOLGATE_SUBJECT=alice_token)
    assert (used.status_code, used.json()["value"]) == (200, USER)
    assert len(github.requests) == 1


def test_a_recorded_result_is_replayed_only_to_the_same_subject(agent, alice, bob):
    account, key = agent
    _d, alice_token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    _d, bob_token = delegation_create(tenant=account.tenant, user=bob, service_account=account)
    first = as_person(key, alice_token, tool_call_id="shared-id")
    assert first.status_code == 200

    replay = as_person(key, alice_token, tool_call_id="shared-id")
    assert (replay.status_code, replay.json()["value"]) == (200, first.json()["value"])
    assert ToolInvocation.objects.filter(tool_call_id="shared-id", decision="replayed").count() == 1
    assert as_person(key, bob_token, tool_call_id="shared-id").json()["error_code"] == "idempotency_conflict"
    assert as_person(key, None, tool_call_id="shared-id").json()["error_code"] == "idempotency_conflict"


def test_a_warm_call_with_a_subject_costs_no_query_more_than_one_without(
    agent, alice, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(governance, "MAX_STALENESS_S", 3600.0)
    account, key = agent
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    assert as_person(key, token).status_code == 200  # warms the key, the policy and the delegation
    generation_reads = 0 if settings.REDIS_URL else 2

    with django_assert_num_queries(generation_reads + 1) as captured:
        assert as_person(key, token).status_code == 200

    # one statement: the audit row (on PostgreSQL with its tool_call_id claim in a CTE before it)
    assert 'INSERT INTO "tools_app_toolinvocation"' in captured.captured_queries[-1]["sql"]


def test_the_subject_travels_in_mcp_meta_too(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    def call(meta):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": TIME, "arguments": {}, "_meta": meta},
        }
        return client.post(
            "/mcp", json.dumps(body), content_type="application/json", headers={"MCP-Protocol-Version": "2025-11-25"}
        ).json()["result"]

    allowed = call({"toolgate/subject": token, "toolgate/tool_call_id": "mcp-alice"})
    refused = call({"toolgate/subject": "tgs_forged", "toolgate/tool_call_id": "mcp-forged"})

    assert allowed["isError"] is False
    assert ToolInvocation.objects.get(tool_call_id="mcp-alice").subject_id == f"user:{alice.pk}"
    assert refused["isError"] is True
    assert refused["_meta"]["toolgate/error_code"] == "authz_denied"


def test_a_canary_subject_token_never_leaks(agent, alice, caplog, admin_client, request):
    account, key = agent
    caplog.set_level(logging.DEBUG)
    rendered = io.StringIO()
    structured = logging.StreamHandler(rendered)
    structured.setFormatter(logging.config.DictConfigurator({}).configure_formatter(logs.formatter("json")))
    logging.getLogger().addHandler(structured)
    request.addfinalizer(lambda: logging.getLogger().removeHandler(structured))
    delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    forged = f"tgs_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
    seen = []

    for used, call_id in ((token, "canary-ok"), (forged, "canary-forged")):
        seen.append(as_person(key, used, tool_call_id=call_id).content.decode())
    delegation_revoke(delegation=delegation)
    seen.append(as_person(key, token, tool_call_id="canary-revoked").content.decode())
    seen.append(api_client(key).get("/api/v1/invocations").content.decode())
    browser = Client()
    browser.force_login(alice)
    # the consent redirect: its code travels only in the redirect to the service (not kept here), its
    # verifier only in the exchange's body; the token the exchange answers is shown that once
    callback = "https://agent.example/callback"
    service_account_set_redirect_uris(account=account, uris=[callback])
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    consent = {
        "client_id": str(account.pk),
        "redirect_uri": callback,
        "state": "canary-state-1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    seen.append(browser.get("/delegations/consent", consent).content.decode())
    answered = browser.post("/delegations/consent", {"state": "canary-state-1", "decision": "approve"})
    code = parse_qs(urlsplit(answered["Location"]).query)["code"][0]
    exchanged = api_client(key).post(
        "/api/v1/delegations/token",
        {"code": code, "code_verifier": verifier, "redirect_uri": callback},
        format="json",
    )
    consent_token = exchanged.json()["subject_token"]
    seen.append(as_person(key, consent_token, tool_call_id="canary-consent").content.decode())
    reused = api_client(key).post(
        "/api/v1/delegations/token",
        {"code": code, "code_verifier": verifier, "redirect_uri": callback},
        format="json",
    )
    seen.append(reused.content.decode())
    for url in ("/delegations/", "/activity/"):
        seen.append(browser.get(url).content.decode())
    for url in (
        reverse("admin:tools_app_toolinvocation_changelist"),
        reverse("admin:policies_app_delegation_changelist"),
        reverse("admin:policies_app_delegation_change", args=[delegation.pk]),
        reverse("admin:changes_app_change_changelist"),
    ):
        page = admin_client.get(url)
        assert page.status_code == 200, url
        seen.append(page.content.decode())

    places = {
        "responses and pages": "\n".join(seen),
        "logs": caplog.text + repr([(record.msg, record.args) for record in caplog.records]),
        "structured log lines": rendered.getvalue(),
        "database": everything_in_the_database(),
    }
    assert '"tool_call_id": "canary-ok"' in rendered.getvalue()  # the structured lines are live
    assert ToolInvocation.objects.get(tool_call_id="canary-consent").ok is True  # the consent token did work
    leaks = [
        (place, name)
        for place, text in places.items()
        for name, secret in (
            ("token", token),
            ("forged", forged),
            ("consent code", code),
            ("PKCE verifier", verifier),
            ("consent token", consent_token),
        )
        if secret in text
    ]
    assert leaks == []


def test_an_approval_given_for_one_persons_call_does_not_run_it_for_another(agent, alice, bob):
    # given a policy that asks a person to approve every call of the time tool
    account, key = agent
    policy = account.tenant.policies.get()
    policy.require_approval_for_tools = [TIME]
    policy.save()
    _d, alice_token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    _d, bob_token = delegation_create(tenant=account.tenant, user=bob, service_account=account)
    asked = as_person(key, alice_token, tool_call_id="needs-ok")
    assert (asked.status_code, asked.json()["error_code"]) == (202, "approval_required")
    approval = ApprovalRequest.objects.get(pk=asked.json()["approval_id"])
    assert approval.subject_id == f"user:{alice.pk}"
    approval_decide(approval=approval, approve=True, decided_by=None, decided_by_name="op")

    # when another person's token repeats the approved call
    stolen = as_person(key, bob_token, tool_call_id="needs-ok")

    # then it is refused, and the approval is still there for alice's call
    assert (stolen.status_code, stolen.json()["error_code"]) == (403, "policy_denied")
    assert as_person(key, alice_token, tool_call_id="needs-ok").status_code == 200


def test_a_persons_call_awaiting_approval_is_theirs_to_see_not_other_members(github, agent, alice, bob):
    # given alice's call, on her behalf with her personal connection, waiting for an operator
    account, key = agent
    label = "canary-alices-connection-5b0f"
    connection = ConnectionFactory(tenant=account.tenant, owner=alice, label=label)
    grant = GrantFactory(service_account=account, connections=[connection])
    _d, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    args = {"owner": "octo", "repo": "hello", "title": "canary-alices-args-77c1"}
    body = {"tool_id": "github__create_issue", "args": args, "tool_call_id": "alices-issue"}
    asked = api_client(key).post(
        EXEC_URL,
        {**body, "connection_id": str(connection.pk), "grant_id": str(grant.pk)},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=token,
    )
    assert (asked.status_code, asked.json()["error_code"]) == (202, "approval_required")
    detail = reverse("web:approval-detail", args=[asked.json()["approval_id"]])
    as_alice, as_bob = Client(), Client()
    as_alice.force_login(alice)
    as_bob.force_login(bob)

    # when each of them looks, and bob tries to decide it
    alices_page = as_alice.get(detail).content.decode()
    bobs_list = as_bob.get(reverse("web:approval-list")).content.decode()
    bobs_look, bobs_decision = as_bob.get(detail), as_bob.post(detail, {"decision": "deny", "reason": "mine now"})

    # then alice sees her args and her connection; bob sees nothing of it, and nothing was decided
    assert args["title"] in alices_page
    assert label in alices_page
    assert asked.json()["approval_id"] not in bobs_list
    assert (bobs_look.status_code, bobs_decision.status_code) == (404, 404)
    for leak in (args["title"], label):
        assert leak not in bobs_list + bobs_look.content.decode() + bobs_decision.content.decode()
    assert ApprovalRequest.objects.get(pk=asked.json()["approval_id"]).status == "pending"
    assert github.requests == []


def test_a_models_tool_calls_run_for_the_person_too(agent, alice):
    account, key = agent
    _d, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    turn = {
        "format": "anthropic",
        "message": [{"type": "tool_use", "id": "toolu_1", "name": TIME, "input": {}}],
    }

    allowed = api_client(key).post("/api/v1/tools/calls", turn, format="json", HTTP_X_TOOLGATE_SUBJECT=token)
    forged = api_client(key).post(
        "/api/v1/tools/calls",
        {**turn, "message": [{"type": "tool_use", "id": "toolu_2", "name": TIME, "input": {}}]},
        format="json",
        HTTP_X_TOOLGATE_SUBJECT=subject_token_generate().key,
    )

    assert allowed.json()["calls"][0]["ok"] is True
    assert ToolInvocation.objects.get(tool_call_id="toolu_1").subject_id == f"user:{alice.pk}"
    assert forged.json()["calls"][0]["error_code"] == "authz_denied"


def test_the_catalog_for_a_person_lists_what_may_run_for_them(agent, alice):
    account, key = agent
    _d, token = delegation_create(tenant=account.tenant, user=alice, service_account=account, tools=[TIME])
    client = api_client(key)

    own = client.get("/api/v1/tools").json()["tools"]
    for_alice = client.get("/api/v1/tools", HTTP_X_TOOLGATE_SUBJECT=token).json()["tools"]
    forged = client.get("/api/v1/tools", HTTP_X_TOOLGATE_SUBJECT=subject_token_generate().key)

    assert sorted(tool["name"] for tool in own) == [
        "core__get_current_time",
        "github__create_issue",
        "github__get_user",
    ]
    assert [tool["name"] for tool in for_alice] == [TIME]
    assert (forged.status_code, forged.json()) == (403, {"error_code": "authz_denied", "safe_message": SUBJECT_REFUSED})
    assert client.get("/api/v1/tools/github__get_user", HTTP_X_TOOLGATE_SUBJECT=token).status_code == 404
    assert client.get(f"/api/v1/tools/{TIME}", HTTP_X_TOOLGATE_SUBJECT=token).status_code == 200


def mcp_list(client: Client, *, meta: dict | None = None, **headers: str):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta} if meta else {}}
    return client.post(
        "/mcp",
        json.dumps(body),
        content_type="application/json",
        headers={"MCP-Protocol-Version": "2025-11-25", **headers},
    )


def test_mcp_tools_list_for_a_person_is_narrowed_as_the_rest_catalog_is(agent, alice):
    account, key = agent
    _d, token = delegation_create(tenant=account.tenant, user=alice, service_account=account, tools=[TIME])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    rest_for_alice = api_client(key).get("/api/v1/tools", HTTP_X_TOOLGATE_SUBJECT=token).json()["tools"]

    own = mcp_list(client).json()["result"]["tools"]
    by_header = mcp_list(client, **{"X-Toolgate-Subject": token}).json()["result"]["tools"]
    by_meta = mcp_list(client, meta={"toolgate/subject": token}).json()["result"]["tools"]
    forged = mcp_list(client, **{"X-Toolgate-Subject": subject_token_generate().key})

    assert [tool["name"] for tool in own] == ["core__get_current_time", "github__create_issue", "github__get_user"]
    assert [tool["name"] for tool in by_header] == [tool["name"] for tool in rest_for_alice] == [TIME]
    assert [tool["name"] for tool in by_meta] == [TIME]
    assert forged.status_code == 403
    assert forged.json()["error"]["message"] == SUBJECT_REFUSED


def test_an_mcp_call_with_the_subject_header_runs_for_that_person(agent, alice):
    account, key = agent
    _delegation, token = delegation_create(tenant=account.tenant, user=alice, service_account=account)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": TIME, "arguments": {}, "_meta": {"toolgate/tool_call_id": "mcp-header-alice"}},
    }

    response = Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/mcp",
        json.dumps(body),
        content_type="application/json",
        headers={"MCP-Protocol-Version": "2025-11-25", "X-Toolgate-Subject": token},
    )

    assert response.json()["result"]["isError"] is False
    assert ToolInvocation.objects.get(tool_call_id="mcp-header-alice").subject_id == f"user:{alice.pk}"
