"""The tenant UI's delegations, personal connections and the consent redirect, through Django's test client.

The browser tests (tests/e2e/test_delegations_browser.py) walk the happy paths;
these pin who sees what and that every malformed request gets a page, never a
500 and never a redirect to an unchecked place.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client

from changes_app.models import Change
from connections_app.models import ExecutionGrant
from policies_app.models import ConsentCode, Delegation
from policies_app.services import delegation_create, service_account_set_redirect_uris
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.api import api_client

pytestmark = pytest.mark.django_db

CALLBACK = "https://agent.example/callback"


@pytest.fixture
def acme():
    return TenantFactory(slug="acme")


@pytest.fixture
def owner(acme):
    return MembershipFactory(tenant=acme, user=UserFactory(username="olga"), role="owner").user


@pytest.fixture
def alice(acme):
    return MembershipFactory(tenant=acme, user=UserFactory(username="alice"), role="member").user


@pytest.fixture
def bob(acme):
    return MembershipFactory(tenant=acme, user=UserFactory(username="bob"), role="member").user


@pytest.fixture
def agent(acme):
    account, key = service_account_with_key(acme, name="agent", scopes=("tools:exec", "connections:manage"))
    service_account_set_redirect_uris(account=account, uris=[CALLBACK])
    return account, key


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def challenge_of(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


# --- personal connections ----------------------------------------------------------------------


def test_members_see_shared_connections_and_their_own_personal_ones_owners_see_all(acme, owner, alice, bob):
    shared = ConnectionFactory(tenant=acme, label="team bot")
    mine = ConnectionFactory(tenant=acme, label="alice own", owner=alice)
    theirs = ConnectionFactory(tenant=acme, label="bob own", owner=bob)

    alice_page = logged_in(alice).get("/connections/").content.decode()
    owner_page = logged_in(owner).get("/connections/").content.decode()

    assert "team bot" in alice_page
    assert "alice own" in alice_page
    assert "bob own" not in alice_page
    assert all(label in owner_page for label in ("team bot", "alice own", "bob own"))
    assert "personal: bob" in owner_page
    assert logged_in(alice).get(f"/connections/{theirs.pk}/").status_code == 404
    assert logged_in(alice).get(f"/connections/{theirs.pk}/revoke/").status_code == 404
    assert logged_in(alice).get(f"/connections/{mine.pk}/").status_code == 200
    assert logged_in(owner).get(f"/connections/{theirs.pk}/").status_code == 200
    assert shared.owner_id is None


def test_a_member_adds_a_personal_connection(acme, alice):
    response = logged_in(alice).post(
        "/connections/new/?type=api_key",
        {"provider": "github", "label": "mine", "api_key": "ghp_personal0123456789", "personal": "on"},
    )

    assert response.status_code == 302
    assert acme.connections.get(label="mine").owner == alice


def test_a_member_cannot_grant_someone_elses_personal_connection(acme, alice, bob, agent):
    theirs = ConnectionFactory(tenant=acme, label="bob own", owner=bob)

    response = logged_in(alice).post(
        "/grants/new/", {"service_account": str(agent[0].pk), "connections": [str(theirs.pk)]}
    )

    assert response.status_code == 200  # re-rendered: not a choice this member has
    assert not ExecutionGrant.objects.exists()


def test_a_personal_connection_belongs_to_a_member_of_its_tenant(acme):
    stranger = MembershipFactory(tenant=TenantFactory(slug="globex"), user=UserFactory(username="eve")).user

    with pytest.raises(Exception, match="not valid"):
        ConnectionFactory(tenant=acme, owner=stranger)


# --- delegations pages ---------------------------------------------------------------------------


def test_members_list_and_revoke_only_their_own_delegations(acme, owner, alice, bob, agent):
    mine, _ = delegation_create(tenant=acme, user=alice, service_account=agent[0])
    theirs, _ = delegation_create(tenant=acme, user=bob, service_account=agent[0])

    page = logged_in(alice).get("/delegations/").content.decode()
    assert f"/delegations/{mine.pk}/revoke/" in page
    assert f"/delegations/{theirs.pk}/revoke/" not in page
    assert logged_in(alice).post(f"/delegations/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    # an owner sees and may revoke anyone's
    assert f"/delegations/{theirs.pk}/revoke/" in logged_in(owner).get("/delegations/").content.decode()
    assert logged_in(owner).post(f"/delegations/{theirs.pk}/revoke/").status_code == 302
    theirs.refresh_from_db()
    assert theirs.revoked_at is not None


def test_the_token_is_shown_once_and_never_again(acme, alice, agent):
    client = logged_in(alice)

    created = client.post("/delegations/new/", {"service_account": str(agent[0].pk)})

    assert created.status_code == 201
    assert created["Cache-Control"].startswith("max-age=0")
    token = created.content.decode().split('id="subject-token"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    assert token.startswith("tgs_")
    assert token not in client.get("/delegations/").content.decode()
    assert token not in client.get("/activity/").content.decode()


def test_another_tenants_service_account_is_not_a_choice(acme, alice):
    foreign, _ = service_account_with_key(TenantFactory(slug="globex"), name="theirs")

    response = logged_in(alice).post("/delegations/new/", {"service_account": str(foreign.pk)})

    assert response.status_code == 200
    assert not Delegation.objects.exists()


def test_only_owners_register_redirect_uris_and_bad_ones_are_refused(acme, owner, alice, agent):
    account, _ = agent
    url = f"/service-accounts/{account.pk}/redirect-uris/"

    assert logged_in(alice).post(url, {"redirect_uris": "https://evil.example/cb"}).status_code == 403
    refused = logged_in(owner).post(url, {"redirect_uris": "http://agent.example/cb"})
    assert refused.status_code == 200
    assert "https" in refused.content.decode()
    assert (
        logged_in(owner).post(url, {"redirect_uris": "https://a.example/cb\nhttp://127.0.0.1:9/cb"}).status_code == 302
    )
    account.refresh_from_db()
    assert account.consent_redirect_uris == ["https://a.example/cb", "http://127.0.0.1:9/cb"]


# --- the consent redirect ---------------------------------------------------------------------


def consent_query(account, **changes) -> dict[str, str]:
    query = {
        "response_type": "code",
        "client_id": str(account.pk),
        "redirect_uri": CALLBACK,
        "state": "state-0123456789",
        "code_challenge": challenge_of("v" * 50),
        "code_challenge_method": "S256",
    }
    query.update(changes)
    return {key: value for key, value in query.items() if value is not None}


@pytest.mark.parametrize(
    "changes",
    [
        {"client_id": "not-a-uuid"},
        {"client_id": "00000000-0000-0000-0000-000000000000"},
        {"redirect_uri": "https://agent.example/callback/other"},
        {"redirect_uri": None},
        {"state": None},
        {"state": "short"},
        {"state": "x" * 300},
        {"code_challenge": None},
        {"code_challenge_method": "plain"},
        {"code_challenge": "A" * 20},
        {"scope": "bad tool!"},
        {"expires_in": "-5"},
        {"expires_in": "9" * 30},
        {"response_type": "token"},
    ],
)
def test_a_malformed_consent_request_gets_a_page_never_a_redirect(agent, alice, changes):
    response = logged_in(alice).get("/delegations/consent?" + urlencode(consent_query(agent[0], **changes)))

    assert response.status_code == 400
    assert "This request cannot be answered" in response.content.decode()


def test_a_consent_request_asks_a_member_of_the_accounts_tenant_only(agent):
    stranger = MembershipFactory(tenant=TenantFactory(slug="globex"), user=UserFactory(username="eve")).user

    response = logged_in(stranger).get("/delegations/consent?" + urlencode(consent_query(agent[0])))

    assert response.status_code == 404


def test_consent_needs_a_login_first(agent):
    response = Client().get("/delegations/consent?" + urlencode(consent_query(agent[0])))

    assert response.status_code == 302
    assert urlsplit(response["Location"]).path == "/accounts/login/"


def test_approving_redirects_with_a_code_the_service_exchanges_once(agent, alice):
    account, key = agent
    client = logged_in(alice)
    verifier = secrets.token_urlsafe(48)
    query = consent_query(account, code_challenge=challenge_of(verifier), scope="core__get_current_time")
    page = client.get("/delegations/consent?" + urlencode(query))
    assert page.status_code == 200
    assert "form-action 'self' https://agent.example" in page["Content-Security-Policy"]

    answered = client.post("/delegations/consent", {"state": query["state"], "decision": "approve"})

    assert answered.status_code == 302
    location = urlsplit(answered["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == CALLBACK
    params = parse_qs(location.query)
    assert params["state"] == [query["state"]]
    code = params["code"][0]
    assert not ConsentCode.objects.filter(code_digest=code).exists()  # only its digest is kept
    # the same state cannot be answered twice
    assert client.post("/delegations/consent", {"state": query["state"], "decision": "approve"}).status_code == 400
    body = {"code": code, "code_verifier": verifier, "redirect_uri": CALLBACK}
    issued = api_client(key).post("/api/v1/delegations/token", body, format="json")
    assert issued.status_code == 200, issued.content
    assert issued["Cache-Control"] == "no-store"
    assert issued.json()["subject_id"] == f"user:{alice.pk}"
    assert issued.json()["tools"] == ["core__get_current_time"]


def test_denying_redirects_with_access_denied_and_delegates_nothing(agent, alice):
    client = logged_in(alice)
    query = consent_query(agent[0])
    client.get("/delegations/consent?" + urlencode(query))

    answered = client.post("/delegations/consent", {"state": query["state"], "decision": "deny"})

    assert parse_qs(urlsplit(answered["Location"]).query) == {"error": ["access_denied"], "state": [query["state"]]}
    assert not Delegation.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"code": "x", "code_verifier": "y"},
        {"code": 5, "code_verifier": "v" * 50, "redirect_uri": CALLBACK},
        {"code": "x" * 500, "code_verifier": "v" * 50, "redirect_uri": CALLBACK},
        {"code": "unknown", "code_verifier": "v" * 50, "redirect_uri": CALLBACK, "extra": 1},
        {"code": "unknown", "code_verifier": "v" * 50, "redirect_uri": CALLBACK},
    ],
)
def test_the_exchange_answers_bad_bodies_with_the_envelope(agent, body):
    response = api_client(agent[1]).post("/api/v1/delegations/token", body, format="json")

    assert response.status_code == 422
    assert set(response.json()) >= {"error_code", "safe_message"}


def test_another_service_account_cannot_exchange_the_code(acme, agent, alice):
    client = logged_in(alice)
    verifier = secrets.token_urlsafe(48)
    query = consent_query(agent[0], code_challenge=challenge_of(verifier))
    client.get("/delegations/consent?" + urlencode(query))
    code = parse_qs(
        urlsplit(
            client.post("/delegations/consent", {"state": query["state"], "decision": "approve"})["Location"]
        ).query
    )["code"][0]
    _other, other_key = service_account_with_key(acme, name="other")

    response = api_client(other_key).post(
        "/api/v1/delegations/token", {"code": code, "code_verifier": verifier, "redirect_uri": CALLBACK}, format="json"
    )

    assert response.status_code == 422
    assert Delegation.objects.get().token_prefix is None  # nothing issued


def test_a_grant_made_over_rest_records_the_acting_service_account(acme, agent):
    account, key = agent
    connection = ConnectionFactory(tenant=acme)

    created = api_client(key).post(
        "/api/v1/grants", {"service_account": "agent", "connection_ids": [str(connection.pk)]}, format="json"
    )

    assert created.status_code == 201
    assert ExecutionGrant.objects.get().created_by_service_account == account


def test_delegation_writes_are_in_the_change_log(acme, alice, agent):
    client = logged_in(alice)
    client.post("/delegations/new/", {"service_account": str(agent[0].pk)})
    delegation = Delegation.objects.get()
    client.post(f"/delegations/{delegation.pk}/revoke/")

    rows = list(Change.objects.filter(object_type="policies_app.delegation").order_by("id"))

    assert [(row.action, row.origin, row.actor_label) for row in rows] == [
        ("delegation.create", "tenant_ui", "alice"),
        ("delegation.token_issue", "tenant_ui", "alice"),
        ("delegation.revoke", "tenant_ui", "alice"),
    ]
    assert all("token_prefix" not in row.after and "token_digest" not in row.after for row in rows)
    assert client.get("/changes/").status_code == 200


# --- the connections a new delegation or a consent declares ---------------------------------------


def _choices(page) -> dict[str, bool]:
    """The offered connection ids on a page, and whether each is ticked."""
    html = page.content.decode()
    found = {}
    for chunk in html.split('name="tg_connection" value="')[1:]:
        value, rest = chunk.split('"', 1)
        found[value] = rest.split(">", 1)[0].strip() == "checked"
    return found


def test_the_new_delegation_form_offers_granted_connections_per_provider_and_declares_the_ticked(
    acme, alice, bob, agent
):
    account, _key = agent
    shared = ConnectionFactory(tenant=acme, label="org")
    mine = ConnectionFactory(tenant=acme, owner=alice, label="alice's")
    ungranted = ConnectionFactory(tenant=acme, label="nobody's")
    theirs = ConnectionFactory(tenant=acme, owner=bob, label="bob's")
    other = service_account_with_key(acme, name="other")[0]
    ExecutionGrant.objects.create(tenant=acme, service_account=account).connections.set([shared, mine, theirs])
    elsewhere = ConnectionFactory(tenant=acme, label="other account only")
    ExecutionGrant.objects.create(tenant=acme, service_account=other).connections.set([elsewhere])
    client = logged_in(alice)

    page = client.get("/delegations/new/")

    assert page.status_code == 200
    assert _choices(page) == {str(c.pk): False for c in (shared, mine, elsewhere)}  # granted, and not bob's
    assert str(ungranted.pk) not in page.content.decode()
    assert "<strong>github</strong>" in page.content.decode()
    # a ticked connection the chosen account is not granted is refused, and nothing is delegated
    refused = client.post("/delegations/new/", {"service_account": str(account.pk), "tg_connection": [elsewhere.pk]})
    assert refused.status_code == 200
    assert "is not granted to agent" in refused.content.decode()
    assert not Delegation.objects.exists()
    # ticked and granted: declared with the new delegation, both writes in the change log
    created = client.post(
        "/delegations/new/", {"service_account": str(account.pk), "tg_connection": [mine.pk, theirs.pk]}
    )
    assert created.status_code == 201
    delegation = Delegation.objects.get()
    assert delegation.connection_ids == [str(mine.pk)]  # bob's is never offered, so never declared
    change = Change.objects.get(action="delegation.connections_set")
    assert (change.actor_label, change.after["connection_ids"]) == ("alice", [str(mine.pk)])
    assert Change.objects.filter(action="delegation.create").count() == 1


def test_the_consent_redirect_offers_the_accounts_connections_ticked_and_declares_what_stays_ticked(acme, alice, agent):
    account, _key = agent
    shared = ConnectionFactory(tenant=acme, label="org")
    mine = ConnectionFactory(tenant=acme, owner=alice, label="alice's")
    ExecutionGrant.objects.create(tenant=acme, service_account=account).connections.set([shared, mine])
    client = logged_in(alice)
    query = consent_query(account)

    page = client.get("/delegations/consent?" + urlencode(query))

    assert page.status_code == 200
    assert _choices(page) == {str(shared.pk): True, str(mine.pk): True}
    answered = client.post(
        "/delegations/consent", {"state": query["state"], "decision": "approve", "tg_connection": [shared.pk]}
    )
    assert answered.status_code == 302
    assert "code" in parse_qs(urlsplit(answered["Location"]).query)
    delegation = Delegation.objects.get(user=alice, revoked_at__isnull=True)
    assert delegation.connection_ids == [str(shared.pk)]
    change = Change.objects.get(action="delegation.connections_set")
    assert change.after["connection_ids"] == [str(shared.pk)]
