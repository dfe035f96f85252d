"""The authorization stage: on behalf of a person, permission AND an active delegation.

allowed ⇔ policy allows ∧ (no subject ∨ (delegation active ∧ subject permitted)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from runner.authz import SUBJECT_REFUSED, TOOL_NOT_DELEGATED, DelegationAuthorization, Reason
from runner.pipeline import ToolRunner
from runner.ports import DelegationView
from runner.types import UNKNOWN_DELEGATION, Decision, ErrorCode
from tests.runner import tools
from tests.runner.fakes import ACTOR, CONNECTION, GRANT, T0, TENANT, grant, make_harness

DELEGATION = "d-1"
SUBJECT = "user:7"


@dataclass
class FakeDelegations:
    delegations: dict[str, DelegationView] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def get(self, delegation_id: str) -> DelegationView | None:
        self.asked.append(delegation_id)
        return self.delegations.get(delegation_id)


def harness(delegation: DelegationView | None = None, *, allowed=None, grants=()):
    h = make_harness(tools.ALL, allowed=allowed, grants=grants)
    store = FakeDelegations({DELEGATION: delegation} if delegation else {})
    h.runner = ToolRunner(h.stages(authorization=DelegationAuthorization(store, h.clock)), h.clock)
    return h, store


def delegation(**changes) -> DelegationView:
    values = {
        "delegation_id": DELEGATION,
        "tenant_id": TENANT,
        "actor_id": ACTOR,
        "subject_id": SUBJECT,
        "tools": None,
        "expires_at": None,
        "revoked": False,
        "subject_is_member": True,
    }
    values.update(changes)
    return DelegationView(**values)


@given(
    policy_allows=st.booleans(),
    has_subject=st.booleans(),
    revoked=st.booleans(),
    expired=st.booleans(),
    member=st.booleans(),
    tools_subset=st.sampled_from([None, frozenset({"test__echo"}), frozenset({"test__send"}), frozenset()]),
    other_caller=st.booleans(),
    known=st.booleans(),
)
def test_allowed_iff_policy_allows_and_no_subject_or_an_active_permitting_delegation(
    *, policy_allows, has_subject, revoked, expired, member, tools_subset, other_caller, known
):
    view = delegation(
        revoked=revoked,
        expires_at=T0 - timedelta(seconds=1) if expired else T0 + timedelta(days=1),
        subject_is_member=member,
        tools=tools_subset,
        actor_id="service-2" if other_caller else ACTOR,
    )
    h, store = harness(view if known else None, allowed={"test__echo"} if policy_allows else set())

    result = h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION if has_subject else None)

    delegation_active = known and not revoked and not expired and not other_caller
    subject_permitted = member and (tools_subset is None or "test__echo" in tools_subset)
    expected = policy_allows and (not has_subject or (delegation_active and subject_permitted))
    assert result.ok is expected
    if not expected:
        assert result.error_code is (ErrorCode.POLICY_DENIED if not policy_allows else ErrorCode.AUTHZ_DENIED)
        assert result.executed is False
    (record,) = h.audit.records
    assert record.ok is expected
    if not has_subject:
        assert store.asked == []  # no subject: no lookup at all
        assert record.context.subject_id is None


def test_a_call_without_a_subject_is_untouched():
    h, store = harness(delegation())

    result = h.exec("test__echo", {"text": "hi"})

    assert result.ok is True
    assert store.asked == []
    assert h.audit.records[0].context.subject_id is None
    assert h.audit.records[0].authz_reason is None


def test_the_subject_comes_from_the_delegation_and_reaches_the_audit_row():
    h, _store = harness(delegation())

    result = h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION)

    assert result.ok is True
    assert h.audit.records[0].context.subject_id == SUBJECT
    assert h.audit.records[0].decision is Decision.ALLOW


def test_a_subject_id_a_caller_put_into_the_context_is_replaced_by_the_delegations():
    h, _store = harness(delegation())

    h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION, subject_id="user:999")

    assert h.audit.records[0].context.subject_id == SUBJECT


def test_forged_revoked_expired_and_other_callers_tokens_answer_alike_and_audit_the_category():
    cases = {
        Reason.UNKNOWN_TOKEN: (None, UNKNOWN_DELEGATION),
        Reason.REVOKED: (delegation(revoked=True), DELEGATION),
        Reason.EXPIRED: (delegation(expires_at=T0), DELEGATION),
        Reason.OTHER_CALLER: (delegation(tenant_id="tenant-b"), DELEGATION),
        Reason.NOT_MEMBER: (delegation(subject_is_member=False), DELEGATION),
    }
    answers = set()
    for reason, (view, delegation_id) in cases.items():
        h, _store = harness(view)
        result = h.exec("test__echo", {"text": "hi"}, delegation_id=delegation_id)
        answers.add((result.error_code, result.safe_message, result.ok))
        assert h.audit.records[0].authz_reason == reason
        assert h.audit.records[0].decision is Decision.DENY
    assert answers == {(ErrorCode.AUTHZ_DENIED, SUBJECT_REFUSED, False)}


def test_another_tenants_person_is_not_named_in_this_tenants_audit_row():
    h, _store = harness(delegation(tenant_id="tenant-b"))

    h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION)

    assert h.audit.records[0].context.subject_id is None


def test_a_tool_outside_the_delegated_subset_is_refused_with_its_own_message():
    h, _store = harness(delegation(tools=frozenset({"test__send"})))

    result = h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION)

    assert (result.error_code, result.safe_message) == (ErrorCode.AUTHZ_DENIED, TOOL_NOT_DELEGATED)
    assert h.audit.records[0].authz_reason == Reason.TOOL_NOT_DELEGATED
    assert h.audit.records[0].context.subject_id == SUBJECT


def test_authorization_runs_after_the_policy_and_before_the_connection_gate():
    # given a policy that denies: the delegation is never looked up
    h, store = harness(delegation(), allowed=set())
    assert h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION).error_code is ErrorCode.POLICY_DENIED
    assert store.asked == []
    # and an authz refusal never reaches the broker
    h, _store = harness(delegation(revoked=True), grants=[grant()])
    result = h.exec(
        "test__connected",
        {},
        delegation_id=DELEGATION,
        connection_id=CONNECTION,
        grant_id=GRANT,
        declared_connection_ids=(CONNECTION,),
    )
    assert result.error_code is ErrorCode.AUTHZ_DENIED
    assert h.broker.resolved == []


def test_a_runner_without_an_authorization_port_refuses_every_subject():
    h = make_harness(tools.ALL)

    result = h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION)

    assert result.error_code is ErrorCode.AUTHZ_DENIED


def test_a_personal_connection_is_usable_only_on_behalf_of_its_owner():
    personal = grant(personal_for={CONNECTION: SUBJECT})
    ctx = {"connection_id": CONNECTION, "grant_id": GRANT, "declared_connection_ids": (CONNECTION,)}
    # its owner
    h, _ = harness(delegation(), grants=[personal])
    assert h.exec("test__connected", {}, delegation_id=DELEGATION, **ctx).ok is True
    # no subject
    h, _ = harness(delegation(), grants=[personal])
    refused = h.exec("test__connected", {}, **ctx)
    assert refused.error_code is ErrorCode.POLICY_DENIED
    assert h.broker.resolved == []
    # another person
    h, _ = harness(delegation(subject_id="user:8"), grants=[personal])
    refused = h.exec("test__connected", {}, delegation_id=DELEGATION, **ctx)
    assert refused.error_code is ErrorCode.POLICY_DENIED
    assert h.broker.resolved == []
