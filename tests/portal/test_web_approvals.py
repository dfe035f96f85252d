"""The tenant UI's Approvals page: owners decide when the policy lets them, members only look."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies_app.models import ApprovalRequest, TenantMembership
from policies_app.services import approval_decide
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval
from tests.support.web import member_client

pytestmark = pytest.mark.django_db

CANARY = "canary-tenant-ui-51c2"
ARGS = {"owner": "octo", "repo": "hello", "title": "<script>alert(1)</script>", "body": CANARY}


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def account(acme):
    return service_account_with_key(acme, name="agent")[0]


@pytest.fixture
def owner(acme):
    user = UserFactory(username="olivia")
    MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.OWNER)
    return member_client(acme, user=user)[0]


@pytest.fixture
def member(acme):
    user = UserFactory(username="max")
    MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.MEMBER)
    return member_client(acme, user=user)[0]


def _detail(approval: ApprovalRequest) -> str:
    return reverse("web:approval-detail", args=[approval.pk])


def test_an_owner_approves_with_a_reason_and_the_args_are_erased(owner, account, acme):
    connection = ConnectionFactory(tenant=acme, label="Work GitHub")
    approval = pending_approval(account, ARGS, approver="tenant_owner", connection_id=str(connection.pk))

    page = owner.get(_detail(approval))
    response = owner.post(_detail(approval), {"decision": "approve", "reason": "expected release"})

    html = page.content.decode()
    assert page.status_code == 200
    assert CANARY in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "Work GitHub (github)" in html
    assert 'id="approve-button"' in html
    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name, approval.reason) == ("approved", "olivia", "expected release")
    assert approval.args_sealed is None
    after = owner.get(_detail(approval)).content.decode()
    assert CANARY not in after
    assert "Erased when the request was decided." in after


def test_an_owner_denies(owner, account):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    owner.post(_detail(approval), {"decision": "deny", "reason": ""})

    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == ("denied", "olivia")


def test_a_member_sees_the_request_but_cannot_decide_it(member, account):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    page = member.get(_detail(approval))
    refused = member.post(_detail(approval), {"decision": "approve"})

    assert page.status_code == 200
    assert 'id="approve-button"' not in page.content.decode()
    assert "Only an owner of this tenant" in page.content.decode()
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == ("pending", "")


def test_an_owner_cannot_decide_what_the_policy_leaves_to_operators(owner, account):
    approval = pending_approval(account, ARGS, approver="operator")

    page = owner.get(_detail(approval))
    refused = owner.post(_detail(approval), {"decision": "approve"})

    assert "leaves the decision to Toolgate's operators" in page.content.decode()
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


@pytest.mark.parametrize(
    "data",
    [{}, {"decision": "maybe"}, {"decision": "approve", "reason": "x" * 501}, {"decision": "approve\x00"}],
    ids=["nothing", "unknown-decision", "reason-too-long", "nul"],
)
def test_bad_input_is_a_form_error_and_changes_nothing(owner, account, data):
    approval = pending_approval(account, ARGS, approver="tenant_owner")

    response = owner.post(_detail(approval), data)

    assert response.status_code == 400
    assert "alert-error" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_another_tenants_approval_is_not_found(owner):
    globex_account = service_account_with_key(TenantFactory(slug="globex"), name="g")[0]
    theirs = pending_approval(globex_account, ARGS, approver="tenant_owner")

    page = owner.get(_detail(theirs))
    post = owner.post(_detail(theirs), {"decision": "approve"})
    listing = owner.get(reverse("web:approval-list"))

    assert (page.status_code, post.status_code) == (404, 404)
    assert str(theirs.pk) not in listing.content.decode()
    theirs.refresh_from_db()
    assert theirs.status == "pending"


def test_the_list_shows_waiting_requests_first_then_the_history(owner, account):
    decided = pending_approval(account, ARGS, tool_call_id="old", approver="tenant_owner")
    owner.post(_detail(decided), {"decision": "deny", "reason": "no"})
    waiting = pending_approval(account, ARGS, tool_call_id="new", approver="tenant_owner")

    html = owner.get(reverse("web:approval-list")).content.decode()

    waiting_section, history_section = html.split('id="approvals-history"')
    assert str(waiting.pk) in waiting_section
    assert str(decided.pk) in history_section
    assert str(decided.pk) not in waiting_section
    assert CANARY not in html


# --- calls made for a person, or with a personal connection ----------------------

PERSONAL_LABEL = "canary-alices-github-7d1e"


@pytest.fixture
def alice(acme):
    user = UserFactory(username="alice")
    MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.MEMBER)
    return user


@pytest.fixture
def alices_connection(acme, alice):
    return ConnectionFactory(tenant=acme, owner=alice, label=PERSONAL_LABEL)


def _for_alice(account, connection, *, approver: str, tool_call_id: str = "for-alice") -> ApprovalRequest:
    """What the pipeline opens for a call made on alice's behalf with her personal connection."""
    return pending_approval(
        account,
        ARGS,
        tool_call_id=tool_call_id,
        approver=approver,
        connection_id=str(connection.pk),
        subject_id=f"user:{connection.owner_id}",
    )


def _sees(client, approval: ApprovalRequest) -> tuple[bool, int]:
    """(listed on the Approvals page, status of its detail page)."""
    listing = client.get(reverse("web:approval-list")).content.decode()
    return str(approval.pk) in listing, client.get(_detail(approval)).status_code


@pytest.mark.parametrize("approver", ["tenant_owner", "operator"])
def test_another_member_neither_lists_nor_opens_a_persons_approval(member, account, alice, alices_connection, approver):
    # given a call made for alice with her personal connection, and a call made for nobody
    private = _for_alice(account, alices_connection, approver=approver)
    shared = pending_approval(account, {"title": "shared"}, tool_call_id="shared", approver=approver)

    # when max, a plain member, looks
    listing = member.get(reverse("web:approval-list")).content.decode()
    detail = member.get(_detail(private))

    # then he sees the shared request only, and nothing of alice's: not its args, not her connection's label
    assert str(shared.pk) in listing
    assert str(private.pk) not in listing
    assert detail.status_code == 404
    for leak in (CANARY, PERSONAL_LABEL):
        assert leak not in listing
        assert leak not in detail.content.decode()
    assert _sees(member, shared) == (True, 200)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_decision_on_a_hidden_approval_answers_404_and_decides_nothing(
    owner, member, account, alices_connection, decision
):
    private = _for_alice(account, alices_connection, approver="operator")

    by_member = member.post(_detail(private), {"decision": decision, "reason": "x"})
    by_owner = owner.post(_detail(private), {"decision": decision, "reason": "x"})  # operators decide this one

    assert (by_member.status_code, by_owner.status_code) == (404, 404)
    private.refresh_from_db()
    assert (private.status, private.decided_by_name, private.args_sealed is not None) == ("pending", "", True)


def test_the_person_sees_their_own_approval_with_its_args_and_their_connection(account, alice, alices_connection):
    private = _for_alice(account, alices_connection, approver="operator")
    as_alice = member_client(account.tenant, user=alice)[0]

    page = as_alice.get(_detail(private)).content.decode()

    assert _sees(as_alice, private) == (True, 200)
    assert CANARY in page
    assert f"{PERSONAL_LABEL} (github)" in page
    assert 'id="approve-button"' not in page  # a plain member still only looks


def test_owners_see_a_persons_approval_only_when_they_decide_it(owner, account, alice, alices_connection):
    theirs = _for_alice(account, alices_connection, approver="tenant_owner", tool_call_id="owners-decide")
    operators = _for_alice(account, alices_connection, approver="operator", tool_call_id="operators-decide")

    page = owner.get(_detail(theirs)).content.decode()
    decided = owner.post(_detail(theirs), {"decision": "approve", "reason": "fine"})

    assert _sees(owner, theirs) == (True, 200)
    assert CANARY in page
    assert 'id="approve-button"' in page
    assert decided.status_code == 302
    theirs.refresh_from_db()
    assert (theirs.status, theirs.decided_by_name) == ("approved", "olivia")
    assert _sees(owner, operators) == (False, 404)


def test_a_personal_connection_makes_an_approval_private_even_without_a_subject(
    member, account, alice, alices_connection
):
    # The pipeline refuses a personal connection for anyone but its owner before it asks for
    # approval; the rule does not depend on that: naming the connection is enough.
    named = pending_approval(account, ARGS, tool_call_id="named", connection_id=str(alices_connection.pk))
    as_alice = member_client(account.tenant, user=alice)[0]

    assert _sees(member, named) == (False, 404)
    assert _sees(as_alice, named) == (True, 200)


def test_a_persons_approval_is_hidden_from_the_history_too(member, owner, account, alice, alices_connection):
    decided = _for_alice(account, alices_connection, approver="tenant_owner")
    owner.post(_detail(decided), {"decision": "deny", "reason": "not now"})
    decided.refresh_from_db()
    assert decided.status == "denied"

    assert _sees(member, decided) == (False, 404)
    assert _sees(owner, decided) == (True, 200)


def test_the_rule_costs_the_approvals_page_no_query(
    owner, member, account, alices_connection, django_assert_num_queries
):
    for number in range(3):
        _for_alice(account, alices_connection, approver="operator", tool_call_id=f"private-{number}")
        shared = pending_approval(account, ARGS, tool_call_id=f"shared-{number}")
        approval_decide(approval=shared, approve=False, decided_by=None, decided_by_name="op")  # into the history
    for client in (owner, member):
        client.get(reverse("web:approval-list"))  # warm the session
        # session, user, memberships; the waiting requests, the history's count and its page
        with django_assert_num_queries(6):
            assert client.get(reverse("web:approval-list")).status_code == 200


def test_a_decision_on_a_persons_approval_stays_out_of_other_members_change_log(
    owner, member, account, alices_connection
):
    # given owners deny alice's request with a reason, and deny a shared one too
    private = _for_alice(account, alices_connection, approver="tenant_owner")
    shared = pending_approval(account, ARGS, tool_call_id="shared", approver="tenant_owner")
    owner.post(_detail(private), {"decision": "deny", "reason": "canary-private-reason-0c4d"})
    owner.post(_detail(shared), {"decision": "deny", "reason": "canary-shared-reason-9e2b"})
    as_alice = member_client(account.tenant, user=alices_connection.owner)[0]

    # when each reads the change log
    logs = {
        name: client.get(reverse("web:change-list")).content.decode()
        for name, client in (("owner", owner), ("alice", as_alice), ("max", member))
    }

    # then the shared decision is everyone's; alice's is hers and the owners' who made it, not max's
    assert all("canary-shared-reason-9e2b" in log for log in logs.values())
    assert "canary-private-reason-0c4d" in logs["owner"]
    assert "canary-private-reason-0c4d" in logs["alice"]
    assert "canary-private-reason-0c4d" not in logs["max"]


def test_the_list_is_read_only_for_a_member_and_offers_review_to_an_owner_only_where_owners_decide(
    member, owner, account
):
    theirs = pending_approval(account, ARGS, approver="tenant_owner", tool_call_id="c-owner")
    operators = pending_approval(account, ARGS, approver="operator", tool_call_id="c-operator")
    listing = reverse("web:approval-list")

    as_member = member.get(listing).content.decode()
    as_owner = owner.get(listing).content.decode()

    assert "Review…" not in as_member
    assert "Webhook…" not in as_member
    assert as_member.count(">Details</a>") == 2
    assert _detail(theirs) in as_member
    assert _detail(operators) in as_member
    assert "Webhook…" in as_owner
    assert as_owner.count("Review…") == 1
    review_row = as_owner.split(f'data-approval-id="{theirs.pk}"')[1].split("</tr>")[0]
    assert "Review…" in review_row
    operator_row = as_owner.split(f'data-approval-id="{operators.pk}"')[1].split("</tr>")[0]
    assert ">Details</a>" in operator_row
