"""Which connection a call on a person's behalf uses when it names none (runner/grants.py).

The rule: the one connection of the tool's provider in grant ∩ declared, where
the person's delegation declares; a personal connection of the person comes
before the tenant's when both are declared; several left: the call must name
one; none left: `connection_required`, naming the provider.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from runner.authz import DelegationAuthorization
from runner.grants import ChoicePages, ChosenConnection, GateRefusal, choose_connection
from runner.pipeline import ToolRunner
from runner.ports import DelegationView
from runner.types import ConnectionChoice, ErrorCode, ToolInvocationContext
from tests.runner import tools
from tests.runner.fakes import ACTOR, T0, TENANT, grant, make_harness
from tests.runner.test_authz import DELEGATION, SUBJECT, FakeDelegations

TENANT_A = "11111111-1111-4111-8111-111111111111"  # the tenant's shared connections
TENANT_B = "22222222-2222-4222-8222-222222222222"
MINE = "33333333-3333-4333-8333-333333333333"  # personal connections of SUBJECT
MINE_TOO = "44444444-4444-4444-8444-444444444444"
THEIRS = "55555555-5555-4555-8555-555555555555"  # another person's personal connection
SLACK = "66666666-6666-4666-8666-666666666666"  # another provider's
OTHER_PERSON = "user:99"
PAGES = ChoicePages(connect="/connections/?provider={provider}", choose="/delegations/{delegation_id}/connections/")

PERSONAL = {MINE: SUBJECT, MINE_TOO: SUBJECT, THEIRS: OTHER_PERSON}
EVERYTHING = (TENANT_A, TENANT_B, MINE, MINE_TOO, THEIRS, SLACK)


def ctx(**changes: object) -> ToolInvocationContext:
    values: dict[str, object] = {
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "tenant_id": TENANT,
        "actor_id": ACTOR,
        "subject_id": SUBJECT,
        "delegation_id": DELEGATION,
    }
    values.update(changes)
    return ToolInvocationContext(**values)  # type: ignore[arg-type]


def one_grant(*connection_ids: str, grant_id: str = "grant-1"):
    providers = {cid: "slack" if cid == SLACK else "github" for cid in connection_ids}
    personal = {cid: owner for cid, owner in PERSONAL.items() if cid in connection_ids}
    return grant(connection_ids, grant_id=grant_id, personal_for=personal, providers=providers)


# (case, what the grants hold, what the person declared, expected connection and reason, or error code)
CASES = [
    ("one tenant connection declared", [EVERYTHING], {TENANT_A}, (TENANT_A, ConnectionChoice.ONLY_DECLARED)),
    ("one personal connection declared", [EVERYTHING], {MINE}, (MINE, ConnectionChoice.ONLY_DECLARED)),
    ("personal before tenant, both declared", [EVERYTHING], {TENANT_A, MINE}, (MINE, ConnectionChoice.PERSONAL_FIRST)),
    (
        "personal before two tenant ones",
        [EVERYTHING],
        {TENANT_A, TENANT_B, MINE},
        (MINE, ConnectionChoice.PERSONAL_FIRST),
    ),
    ("two tenant connections declared", [EVERYTHING], {TENANT_A, TENANT_B}, ErrorCode.VALIDATION),
    ("two personal connections declared", [EVERYTHING], {MINE, MINE_TOO, TENANT_A}, ErrorCode.VALIDATION),
    ("nothing declared", [EVERYTHING], set(), ErrorCode.CONNECTION_REQUIRED),
    ("declared but not granted", [(TENANT_B,)], {TENANT_A}, ErrorCode.CONNECTION_REQUIRED),
    ("granted across two grants", [(TENANT_A,), (MINE,)], {TENANT_A, MINE}, (MINE, ConnectionChoice.PERSONAL_FIRST)),
    ("another person's connection is never a candidate", [EVERYTHING], {THEIRS}, ErrorCode.CONNECTION_REQUIRED),
    ("... nor counts against the choice", [EVERYTHING], {THEIRS, TENANT_A}, (TENANT_A, ConnectionChoice.ONLY_DECLARED)),
    ("another provider's connection is not a candidate", [EVERYTHING], {SLACK}, ErrorCode.CONNECTION_REQUIRED),
    ("... nor makes the choice ambiguous", [EVERYTHING], {SLACK, TENANT_B}, (TENANT_B, ConnectionChoice.ONLY_DECLARED)),
    ("no grant at all", [], {TENANT_A}, ErrorCode.CONNECTION_REQUIRED),
]


@pytest.mark.parametrize(("held", "declared", "expected"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_the_choice_rule(held, declared, expected):
    grants = [one_grant(*ids, grant_id=f"grant-{n}") for n, ids in enumerate(held)]

    found = choose_connection(ctx(), "github", frozenset(declared), grants, pages=PAGES)

    if isinstance(expected, ErrorCode):
        assert isinstance(found, GateRefusal)
        assert (found.code, found.provider) == (expected, "github")
    else:
        assert isinstance(found, ChosenConnection)
        assert (found.connection_id, found.reason) == expected
        assert found.grant_id in {g.grant_id for g in grants if found.connection_id in g.connection_ids}
        assert found.declared == tuple(sorted(declared))


def test_a_connection_held_by_two_grants_uses_the_first_grant_by_id_every_time():
    grants = [one_grant(TENANT_A, grant_id="grant-b"), one_grant(TENANT_A, grant_id="grant-a")]

    found = choose_connection(ctx(), "github", frozenset({TENANT_A}), grants, pages=PAGES)

    assert isinstance(found, ChosenConnection)
    assert (found.connection_id, found.grant_id) == (TENANT_A, "grant-a")


def test_the_refusals_say_what_to_do_and_where():
    grants = [one_grant(*EVERYTHING, grant_id="grant-0")]

    ambiguous = choose_connection(ctx(), "github", frozenset({TENANT_A, TENANT_B}), grants, pages=PAGES)
    missing = choose_connection(ctx(), "github", frozenset(), grants, pages=PAGES)

    assert isinstance(ambiguous, GateRefusal)
    assert ambiguous.path == "connection_id"
    assert ambiguous.safe_message == (
        "2 github connections may be used for this call, so it must name one with its grant: "
        "`toolgate/connection_id` and `toolgate/grant_id` in the call's _meta (MCP), or connection_id and grant_id "
        f"(REST), among {TENANT_A} (grant grant-0), {TENANT_B} (grant grant-0); or keep only one for this client "
        f"at /delegations/{DELEGATION}/connections/"
    )
    assert isinstance(missing, GateRefusal)
    assert missing.safe_message == (
        "this tool needs a github connection, and none is both granted to this service account and chosen by "
        "the person for it: connect one at /connections/?provider=github, then choose it for this client at "
        f"/delegations/{DELEGATION}/connections/"
    )


# --- through the pipeline ---------------------------------------------------------------------------------


def person_harness(declared: frozenset[str], grants, **delegation_changes):
    h = make_harness(tools.ALL, grants=grants)
    view = DelegationView(
        delegation_id=DELEGATION,
        tenant_id=TENANT,
        actor_id=ACTOR,
        subject_id=SUBJECT,
        connection_ids=declared,
        **delegation_changes,
    )
    store = FakeDelegations({DELEGATION: view})
    h.runner = ToolRunner(h.stages(authorization=DelegationAuthorization(store, h.clock), pages=PAGES), h.clock)
    return h


def test_a_call_for_a_person_that_names_no_connection_runs_once_with_the_chosen_one():
    h = person_harness(frozenset({TENANT_A, MINE}), [one_grant(*EVERYTHING)])

    result = h.exec("test__connected", delegation_id=DELEGATION)

    assert result.ok, result.safe_message
    assert h.broker.resolved == [MINE]
    (record,) = h.audit.records
    assert (record.context.connection_id, record.context.grant_id) == (MINE, "grant-1")
    assert record.connection_choice is ConnectionChoice.PERSONAL_FIRST
    assert record.executed is True


@pytest.mark.parametrize(
    ("declared", "code"),
    [({TENANT_A, TENANT_B}, ErrorCode.VALIDATION), (set(), ErrorCode.CONNECTION_REQUIRED)],
    ids=["ambiguous", "none left"],
)
def test_a_refused_choice_touches_no_credential_and_names_the_provider(declared, code):
    h = person_harness(frozenset(declared), [one_grant(*EVERYTHING)])

    result = h.exec("test__connected", delegation_id=DELEGATION)

    assert (result.ok, result.error_code, result.connection_provider) == (False, code, "github")
    assert h.broker.resolved == []
    (record,) = h.audit.records
    assert (record.context.connection_id, record.connection_choice, record.executed) == (None, None, False)


def test_expired_revoked_and_other_callers_grants_are_not_chosen_from():
    grants = [
        grant((TENANT_A,), grant_id="g-expired", expires_at=T0 - timedelta(seconds=1)),
        grant((TENANT_B,), grant_id="g-other", actor_id="service-2"),
        grant((MINE,), grant_id="g-revoked", revoked=True, personal_for={MINE: SUBJECT}),
    ]
    h = person_harness(frozenset({TENANT_A, TENANT_B, MINE}), grants)

    result = h.exec("test__connected", delegation_id=DELEGATION)

    assert result.error_code is ErrorCode.CONNECTION_REQUIRED
    assert h.broker.resolved == []


def test_the_requests_own_connection_ids_narrow_what_the_person_declared():
    h = person_harness(frozenset({TENANT_A, TENANT_B}), [one_grant(*EVERYTHING)])

    result = h.exec("test__connected", delegation_id=DELEGATION, declared_connection_ids=(TENANT_B, MINE))

    assert result.ok
    assert h.broker.resolved == [TENANT_B]
    assert h.audit.records[0].connection_choice is ConnectionChoice.ONLY_DECLARED


def test_a_named_grant_without_a_connection_chooses_within_that_grant_only():
    grants = [one_grant(TENANT_A, grant_id="grant-a"), one_grant(TENANT_B, grant_id="grant-b")]
    h = person_harness(frozenset({TENANT_A, TENANT_B}), grants)

    result = h.exec("test__connected", delegation_id=DELEGATION, grant_id="grant-b")

    assert result.ok
    assert h.broker.resolved == [TENANT_B]


def test_a_call_naming_connection_and_grant_is_checked_as_before_and_recorded_as_named():
    h = person_harness(frozenset({TENANT_A}), [one_grant(*EVERYTHING)])

    result = h.exec(
        "test__connected",
        delegation_id=DELEGATION,
        connection_id=TENANT_B,
        grant_id="grant-1",
        declared_connection_ids=(TENANT_B,),
    )

    assert result.ok
    assert h.broker.resolved == [TENANT_B]  # what the person declared does not narrow a named connection
    assert h.audit.records[0].connection_choice is ConnectionChoice.NAMED
    assert h.grants.listed == []  # both named: no list of grants is read


def test_a_call_on_nobodys_behalf_reads_no_list_of_grants_and_still_needs_a_connection_id():
    h = make_harness(tools.ALL, grants=[one_grant(*EVERYTHING)])

    result = h.exec("test__connected")

    assert (result.error_code, result.safe_message) == (ErrorCode.VALIDATION, "this tool needs a connection_id")
    assert result.connection_provider is None
    assert h.grants.listed == []
    assert h.audit.records[0].connection_choice is None


def test_a_tool_without_a_connection_reads_nothing_for_a_person():
    h = person_harness(frozenset({TENANT_A}), [one_grant(*EVERYTHING)])

    result = h.exec("test__echo", {"text": "hi"}, delegation_id=DELEGATION)

    assert result.ok
    assert h.grants.listed == []
    assert h.audit.records[0].connection_choice is None
