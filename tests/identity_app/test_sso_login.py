"""Single sign-on against a real OpenID provider on loopback: admin and portal logins, roles from groups."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command

from changes_app.models import Change
from identity_app import oidc
from identity_app.backends import LocalPasswordBackend
from identity_app.models import ExternalIdentity, RoleMapping
from policies_app.models import TenantMembership
from tests.factories import PASSWORD, MembershipFactory, TenantFactory, UserFactory
from tests.identity_app.conftest import browser, make_provider, mapping, sso_login, start
from tests.support.oidc import callback_path, query_of, signing_key

pytestmark = pytest.mark.django_db

User = get_user_model()


def account(username: str, *groups: str, **claims) -> dict:
    return {"preferred_username": username, "email": f"{username}@corp.test", "groups": list(groups), **claims}


def changes(*actions: str) -> list[tuple[str, str, str]]:
    rows = Change.objects.order_by("id")
    if actions:
        rows = rows.filter(action__in=actions)
    return list(rows.values_list("action", "origin", "actor_label"))


def test_an_operator_group_signs_in_to_admin_as_tool_admin(idp, corp, settings):
    # given
    idp.set_accounts({"op-1": account("olga", "tg-ops")})
    mapping("tg-ops", operator_role="tool_admin")

    # when
    client, response = sso_login(idp, corp, "op-1", "admin")

    # then
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
    user = User.objects.get(username="olga")
    assert (user.is_staff, user.is_superuser, user.has_usable_password()) == (True, False, False)
    assert list(user.groups.values_list("name", flat=True)) == ["Toolgate tool admin"]
    assert user.has_perm("policies_app.change_toolpolicy")
    assert ExternalIdentity.objects.get(user=user).subject == "op-1"
    assert (
        settings.TOOLGATE_SSO_SESSION_SECONDS - 5
        < client.session.get_expiry_age()
        <= settings.TOOLGATE_SSO_SESSION_SECONDS
    )
    assert isinstance(client.session["_session_expiry"], str)  # an absolute date, not a sliding number of seconds
    assert changes("sso.roles", "sso.login") == [("sso.roles", "admin", "olga"), ("sso.login", "admin", "olga")]
    roles = Change.objects.get(action="sso.roles")
    assert roles.after == {"is_staff": True, "operator_groups": ["Toolgate tool admin"]}


@pytest.mark.parametrize(
    ("role", "may", "may_not"),
    [
        ("viewer", ["policies_app.view_toolpolicy", "changes_app.view_change"], ["policies_app.change_toolpolicy"]),
        (
            "approver",
            ["policies_app.change_approvalrequest"],
            ["policies_app.view_toolpolicy", "tools_app.change_tool"],
        ),
        ("tool_admin", ["tools_app.change_tool", "policies_app.add_toolpolicy"], ["connections_app.change_connection"]),
        ("superuser", ["connections_app.change_connection", "axes.view_accessattempt"], []),
    ],
)
def test_each_operator_role_carries_its_permission_set(idp, corp, role, may, may_not):
    idp.set_accounts({f"sub-{role}": account(f"u-{role}", f"tg-{role}")})
    mapping(f"tg-{role}", operator_role=role)

    _, response = sso_login(idp, corp, f"sub-{role}", "admin")

    assert response.status_code == 302
    user = User.objects.get(username=f"u-{role}")
    assert user.is_staff
    assert user.is_superuser is (role == "superuser")
    assert [perm for perm in may if not user.has_perm(perm)] == []
    assert [perm for perm in may_not if user.has_perm(perm)] == []


def test_a_staff_only_mapping_opens_admin_without_permissions(idp, corp):
    idp.set_accounts({"s-1": account("stan", "tg-staff")})
    mapping("tg-staff", is_staff=True)

    _, response = sso_login(idp, corp, "s-1", "admin")

    user = User.objects.get(username="stan")
    assert (response.status_code, user.is_staff, user.get_all_permissions()) == (302, True, set())


def test_a_group_removed_between_two_logins_loses_its_role_at_the_next_login(idp, corp):
    # given: an approver and tool admin
    idp.set_accounts({"op-2": account("omar", "tg-ops", "tg-approvers")})
    mapping("tg-ops", operator_role="tool_admin")
    mapping("tg-approvers", operator_role="approver")
    sso_login(idp, corp, "op-2", "admin")
    user = User.objects.get(username="omar")
    assert sorted(user.groups.values_list("name", flat=True)) == ["Toolgate approver", "Toolgate tool admin"]

    # when: the provider takes tg-ops away, and the next login happens
    idp.set_accounts({"op-2": account("omar", "tg-approvers")})
    client, response = sso_login(idp, corp, "op-2", "admin")

    # then
    assert response.status_code == 302
    user.refresh_from_db()
    assert list(user.groups.values_list("name", flat=True)) == ["Toolgate approver"]
    assert not User.objects.get(pk=user.pk).has_perm("tools_app.change_tool")
    last = Change.objects.filter(action="sso.roles").latest("id")
    assert (last.before, last.after) == (
        {"operator_groups": ["Toolgate approver", "Toolgate tool admin"]},
        {"operator_groups": ["Toolgate approver"]},
    )

    # and when every operator group is gone, admin refuses, and the staff flag is gone for good
    idp.set_accounts({"op-2": account("omar")})
    client, response = sso_login(idp, corp, "op-2", "admin")
    assert response.status_code == 403
    assert "do not give you access to admin" in response.content.decode()
    user.refresh_from_db()
    assert (user.is_staff, list(user.groups.all())) == (False, [])
    assert "_auth_user_id" not in client.session
    refused = Change.objects.filter(action="sso.login_refused").latest("id")
    assert refused.after["reason"] == "your groups do not give you access to admin"


def test_tenant_groups_make_members_and_owners_of_the_portal(idp, corp):
    acme = TenantFactory(slug="acme")
    beta = TenantFactory(slug="beta")
    mapping("acme-eng", tenant=acme, tenant_role="member")
    mapping("acme-admins", tenant=acme, tenant_role="owner")
    mapping("beta-eng", tenant=beta, tenant_role="member")
    idp.set_accounts({"m-1": account("mia", "acme-eng", "acme-admins", "beta-eng")})

    client, response = sso_login(idp, corp, "m-1", "portal")

    assert (response.status_code, response["Location"]) == (302, "/")
    user = User.objects.get(username="mia")
    assert dict(TenantMembership.objects.filter(user=user).values_list("tenant__slug", "role")) == {
        "acme": "owner",
        "beta": "member",
    }
    page = client.get("/connections/")
    assert page.status_code == 200
    assert 'action="/sso/sign-out"' in page.content.decode()  # Log out signs out at the provider too
    assert not user.is_staff

    # beta-eng removed: the beta membership goes at the next login, acme stays
    idp.set_accounts({"m-1": account("mia", "acme-eng")})
    sso_login(idp, corp, "m-1", "portal")
    assert dict(TenantMembership.objects.filter(user=user).values_list("tenant__slug", "role")) == {"acme": "member"}


def test_a_portal_login_without_any_tenant_group_is_refused(idp, corp):
    idp.set_accounts({"n-1": account("nina", "unrelated")})

    client, response = sso_login(idp, corp, "n-1", "portal")

    assert response.status_code == 403
    assert "_auth_user_id" not in client.session
    assert Change.objects.filter(action="sso.login").count() == 0


def test_a_tenant_own_provider_grants_only_its_tenant(idp, corp):
    # given: acme's own provider, and rules that try to reach further
    acme = TenantFactory(slug="acme")
    other = TenantFactory(slug="other")
    acme_idp = make_provider(idp, slug="acme-idp", display_name="Acme SSO", tenant=acme)
    RoleMapping.objects.create(provider=acme_idp, group="acme-admins", tenant=acme, tenant_role="owner")
    RoleMapping.objects.create(group="acme-admins", operator_role="superuser")  # a global rule: not for acme's IdP
    RoleMapping.objects.create(group="acme-admins", tenant=other, tenant_role="owner")  # likewise
    idp.set_accounts({"a-1": account("ana", "acme-admins")})

    # when
    _, response = sso_login(idp, acme_idp, "a-1", "portal")

    # then
    assert response.status_code == 302
    user = User.objects.get(username="ana")
    assert (user.is_staff, user.is_superuser) == (False, False)
    assert list(TenantMembership.objects.filter(user=user).values_list("tenant__slug", "role")) == [("acme", "owner")]
    # a tenant's provider never signs in to admin, and its rules cannot name operator roles or other tenants
    assert start(browser(), acme_idp, "admin").status_code == 403
    for bad in (
        RoleMapping(provider=acme_idp, group="x", operator_role="viewer"),
        RoleMapping(provider=acme_idp, group="x", tenant=other, tenant_role="member"),
    ):
        with pytest.raises(ValidationError):
            bad.full_clean()


def test_a_replayed_state_is_refused_and_logs_in_nobody_twice(idp, corp):
    idp.set_accounts({"op-3": account("rita", "tg-ops")})
    mapping("tg-ops", operator_role="viewer")
    client = browser()
    started = start(client, corp, "admin")
    callback = idp.sign_in(started["Location"], "op-3")
    assert client.get(callback_path(callback)).status_code == 302

    replay = browser()
    replay.cookies = client.cookies  # the same session, even: the state was spent
    again = client.get(callback_path(callback))

    assert again.status_code == 403
    assert "expired or was already used" in again.content.decode()
    assert changes("sso.login") == [("sso.login", "admin", "rita")]
    assert Change.objects.get(action="sso.login_refused").after["reason"] == "unknown or already used state"


def test_a_callback_with_a_state_never_issued_is_refused(idp, corp):
    response = browser().get("/sso/callback", {"state": "made-up", "code": "whatever"})

    assert response.status_code == 403
    assert User.objects.count() == 0


def test_a_provider_whose_discovery_names_another_issuer_is_refused(idp):
    # localhost serves the same provider, whose document says its issuer is 127.0.0.1: not this issuer
    impostor = make_provider(idp, slug="impostor", issuer=idp.issuer.replace("127.0.0.1", "localhost"))

    response = start(browser(), impostor, "admin")

    assert response.status_code == 403
    assert "names another issuer" in response.content.decode()


def test_an_unknown_provider_slug_is_not_found(idp, corp):
    assert browser().get("/sso/nobody/start", {"for": "admin"}).status_code == 404


def test_the_provider_refusing_the_sign_in_is_refused_and_logged(idp, corp):
    client = browser()
    started = start(client, corp, "portal")
    callback = idp.sign_in(started["Location"], "no-such-account")

    response = client.get(callback_path(callback))

    assert response.status_code == 403
    assert "access_denied" in response.content.decode()
    assert "access_denied" in Change.objects.get(action="sso.login_refused").after["reason"]


def test_a_local_user_with_the_same_name_is_not_taken_over_unless_linking_by_verified_email(idp, corp):
    existing = UserFactory(username="lena", email="lena@corp.test", is_staff=True)
    mapping("tg-ops", operator_role="viewer")
    idp.set_accounts({"l-1": account("lena", "tg-ops", email_verified=True)})

    _, refused = sso_login(idp, corp, "l-1", "admin")
    assert refused.status_code == 403
    assert ExternalIdentity.objects.count() == 0

    corp.link_by_verified_email = True
    corp.save()
    _, linked = sso_login(idp, corp, "l-1", "admin")
    assert linked.status_code == 302
    assert ExternalIdentity.objects.get().user == existing

    # an unverified email never links
    UserFactory(username="luc", email="luc@corp.test")
    idp.set_accounts({"l-2": account("luc", "tg-ops", email_verified=False)})
    _, unverified = sso_login(idp, corp, "l-2", "admin")
    assert unverified.status_code == 403


def test_keys_rotated_at_the_provider_are_fetched_again(idp, corp, monkeypatch):
    monkeypatch.setattr(oidc, "JWKS_REFETCH_MIN_INTERVAL_S", 0.0)
    idp.set_accounts({"op-4": account("kai", "tg-ops")})
    mapping("tg-ops", operator_role="viewer")
    _, first = sso_login(idp, corp, "op-4", "admin")
    assert first.status_code == 302
    cached = oidc.provider_keys(oidc.provider_metadata(idp.issuer))
    assert [key.kid for key in cached] == ["key-1"]

    # when: the provider now signs with another key only (and the old one is gone from its key set)
    old = idp.keys
    try:
        idp.rotate(signing_key("key-2"))
        _, second = sso_login(idp, corp, "op-4", "admin")
    finally:
        idp.rotate(old[0])

    # then: the unknown key id made us fetch the key set again, and the login went through
    assert second.status_code == 302
    assert changes("sso.login") == [("sso.login", "admin", "kai"), ("sso.login", "admin", "kai")]


def test_both_sign_in_pages_offer_the_provider(idp, corp, settings):
    acme = TenantFactory(slug="acme")
    make_provider(idp, slug="acme-idp", display_name="Acme SSO", tenant=acme)

    portal = browser().get("/accounts/login/", {"next": "/oauth/authorize?x=1"}).content.decode()
    admin_page = browser().get("/admin/login/", {"next": "/admin/"}).content.decode()

    assert "Sign in with Corp IdP" in portal
    assert "Sign in with Acme SSO" in portal
    query = urlencode({"for": "portal", "next": "/oauth/authorize?x=1"})
    assert f"/sso/corp/start?{query}".replace("&", "&amp;") in portal
    assert 'name="password"' in portal
    assert "Sign in with Corp IdP" in admin_page
    assert "Acme SSO" not in admin_page
    assert 'name="password"' in admin_page


def test_local_login_off_leaves_only_single_sign_on_and_a_break_glass_link(idp, corp, settings, capsys):
    # given
    settings.TOOLGATE_LOCAL_LOGIN = False
    local = UserFactory(username="root-ish", is_staff=True, is_superuser=True)
    MembershipFactory(user=local)

    # then: the pages show the buttons only, and the forms refuse a right password
    portal = browser().get("/accounts/login/")
    admin_page = browser().get("/admin/login/")
    assert "Sign in with Corp IdP" in portal.content.decode()
    assert 'name="password"' not in portal.content.decode()
    assert "Sign in with Corp IdP" in admin_page.content.decode()
    assert 'name="password"' not in admin_page.content.decode()
    for url in ("/accounts/login/", "/admin/login/"):
        client = browser()
        response = client.post(url, {"username": local.username, "password": PASSWORD})
        assert response.status_code == 403
        assert "_auth_user_id" not in client.session
    assert LocalPasswordBackend().authenticate(None, username=local.username, password=PASSWORD) is None

    # single sign-on still works
    idp.set_accounts({"op-5": account("sso-op", "tg-ops")})
    mapping("tg-ops", operator_role="viewer")
    _, response = sso_login(idp, corp, "op-5", "admin")
    assert response.status_code == 302

    # break glass: a command on the server prints a one-time link for a superuser
    call_command("sso_break_glass", "breakglass")
    link = capsys.readouterr().out.strip()
    client = browser()
    assert client.get(link).status_code == 200
    assert "_auth_user_id" not in client.session  # a GET (a link preview) spends nothing
    signed_in = client.post(link)
    assert (signed_in.status_code, signed_in["Location"]) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200
    assert User.objects.get(username="breakglass").is_superuser
    assert browser().post(link).status_code == 403  # once only
    assert [row[0] for row in changes("sso.break_glass_issued", "sso.login")][-2:] == [
        "sso.break_glass_issued",
        "sso.login",
    ]


def test_local_login_on_keeps_the_password_form_and_its_lockout(settings):
    settings.AXES_FAILURE_LIMIT = 2
    user = UserFactory(username="pat")
    MembershipFactory(user=user)
    assert browser().post("/accounts/login/", {"username": "pat", "password": "wrong"}).status_code == 200
    assert browser().post("/accounts/login/", {"username": "pat", "password": "wrong"}).status_code == 429
    locked = browser().post("/accounts/login/", {"username": "pat", "password": PASSWORD})
    assert locked.status_code == 429


def test_signing_out_ends_the_session_here_and_at_the_provider(idp, corp):
    idp.set_accounts({"op-6": account("sam", "tg-ops")})
    mapping("tg-ops", operator_role="viewer")
    client, _ = sso_login(idp, corp, "op-6", "admin")

    response = client.post("/sso/sign-out")

    assert response.status_code == 302
    end_session = urlsplit(response["Location"])
    assert f"{end_session.scheme}://{end_session.netloc}{end_session.path}" == f"{idp.issuer}/session/end"
    assert query_of(response["Location"]) == {
        "client_id": "toolgate",
        "post_logout_redirect_uri": "http://localhost/accounts/login/",
    }
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302


def test_a_deactivated_user_is_refused_at_the_next_login_and_loses_the_open_session(idp, corp):
    idp.set_accounts({"op-7": account("dan", "tg-ops")})
    mapping("tg-ops", operator_role="viewer")
    client, _ = sso_login(idp, corp, "op-7", "admin")
    User.objects.filter(username="dan").update(is_active=False)

    assert client.get("/admin/").status_code == 302  # the open session no longer counts
    _, again = sso_login(idp, corp, "op-7", "admin")
    assert again.status_code == 403
    assert "disabled" in again.content.decode()


@pytest.mark.parametrize(
    ("role", "opens", "refused"),
    [
        ("approver", ["/admin/policies_app/approvalrequest/"], ["/admin/policies_app/toolpolicy/"]),
        ("viewer", ["/admin/policies_app/toolpolicy/", "/admin/changes_app/change/"], ["/admin/axes/accessattempt/"]),
        ("tool_admin", ["/admin/policies_app/toolpolicy/add/"], ["/admin/connections_app/oauthprovider/add/"]),
    ],
)
def test_admin_enforces_the_permission_sets(idp, corp, role, opens, refused):
    idp.set_accounts({f"p-{role}": account(f"p-{role}", f"tg-{role}")})
    mapping(f"tg-{role}", operator_role=role)
    client, _ = sso_login(idp, corp, f"p-{role}", "admin")

    assert [(url, client.get(url).status_code) for url in opens] == [(url, 200) for url in opens]
    assert [(url, client.get(url).status_code) for url in refused] == [(url, 403) for url in refused]


def test_a_code_the_provider_did_not_issue_is_refused_at_the_token_endpoint(idp, corp):
    client = browser()
    started = start(client, corp, "admin")
    state = query_of(started["Location"])["state"]

    response = client.get("/sso/callback", {"state": state, "code": "forged-code"})

    assert response.status_code == 403
    assert "refused the code exchange (invalid_grant)" in response.content.decode()
    assert User.objects.count() == 0


def test_a_tenant_provider_linking_by_email_cannot_take_over_an_operator_or_another_tenant_member(idp):
    acme = TenantFactory(slug="acme")
    other = TenantFactory(slug="other")
    acme_idp = make_provider(idp, slug="acme-idp", tenant=acme, link_by_verified_email=True)
    RoleMapping.objects.create(provider=acme_idp, group="acme-eng", tenant=acme, tenant_role="member")
    UserFactory(username="boss", email="boss@corp.test", is_staff=True)
    outsider = UserFactory(username="olly", email="olly@corp.test")
    MembershipFactory(user=outsider, tenant=other)
    plain = UserFactory(username="pia", email="pia@corp.test")
    idp.set_accounts(
        {
            "t-1": account("boss", "acme-eng", email_verified=True),
            "t-2": account("olly", "acme-eng", email_verified=True),
            "t-3": account("pia", "acme-eng", email_verified=True),
        }
    )

    refused = [sso_login(idp, acme_idp, sub, "portal")[1].status_code for sub in ("t-1", "t-2")]
    _, linked = sso_login(idp, acme_idp, "t-3", "portal")

    assert refused == [403, 403]
    assert linked.status_code == 302
    assert list(ExternalIdentity.objects.values_list("user__username", flat=True)) == [plain.username]
