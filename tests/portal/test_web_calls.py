"""The confirm and status pages an MCP client links to: sign-in first, the right person only, CSRF, no open redirect."""

from __future__ import annotations

import pytest
from django.test import Client

from policies_app.models import Approver
from tests.factories import PASSWORD, MembershipFactory, TenantFactory, UserFactory, service_account_with_key
from tests.support.approvals import pending_approval

pytestmark = pytest.mark.django_db

ARGS = {"owner": "octo", "repo": "hello", "title": "Ship it"}


@pytest.fixture
def alices_call():
    tenant = TenantFactory(slug="acme")
    account, _key = service_account_with_key(tenant, name="desktop")
    alice = MembershipFactory(tenant=tenant, user=UserFactory(username="alice"), role="member").user
    approval = pending_approval(account, ARGS, approver=Approver.SUBJECT, subject_id=f"user:{alice.pk}")
    return approval, alice


def test_an_anonymous_visit_signs_in_first_and_comes_back_to_the_page(alices_call):
    approval, _alice = alices_call
    page = f"/calls/{approval.pk}/confirm/"
    browser = Client()

    first = browser.get(page)
    assert first.status_code == 302
    assert first["Location"] == f"/accounts/login/?next=/calls/{approval.pk}/confirm/"

    signed_in = browser.post("/accounts/login/", {"username": "alice", "password": PASSWORD, "next": page})
    assert (signed_in.status_code, signed_in["Location"]) == (302, page)
    shown = browser.get(page)
    assert shown.status_code == 200
    assert "Ship it" in shown.content.decode()  # the exact arguments, kept for the person
    assert shown["X-Frame-Options"] == "DENY"


def test_the_login_never_sends_the_person_to_another_site(alices_call):
    browser = Client()

    response = browser.post(
        "/accounts/login/", {"username": "alice", "password": PASSWORD, "next": "https://evil.example/calls/"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"


def test_a_decision_without_the_csrf_token_is_refused_and_decides_nothing(alices_call):
    approval, alice = alices_call
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    response = browser.post(f"/calls/{approval.pk}/confirm/", {"decision": "confirm"})

    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_confirm_page_of_others_approval_points_to_its_status_page_and_back(alices_call):
    approval, alice = alices_call
    browser = Client()
    browser.force_login(alice)

    assert browser.get(f"/calls/{approval.pk}/")["Location"] == f"/calls/{approval.pk}/confirm/"
    type(approval).objects.filter(pk=approval.pk).update(approver=Approver.OPERATOR)
    assert browser.get(f"/calls/{approval.pk}/confirm/")["Location"] == f"/calls/{approval.pk}/"
    status = browser.get(f"/calls/{approval.pk}/")
    assert status.status_code == 200
    assert "Waiting for a decision" in status.content.decode()


def test_an_unknown_or_malformed_id_is_not_found(alices_call):
    _approval, alice = alices_call
    browser = Client()
    browser.force_login(alice)

    assert browser.get("/calls/00000000-0000-0000-0000-000000000000/confirm/").status_code == 404
    assert browser.get("/calls/not-a-uuid/confirm/").status_code == 404
