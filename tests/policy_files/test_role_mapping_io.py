"""Single sign-on role mappings in policy files: export by provider name, atomic import, prune, the change log."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from changes_app.models import Change
from identity_app.models import IdentityProvider, RoleMapping
from identity_app.services import provider_save
from policies_app.models import ToolPolicy
from policy_files.policy_io import PolicyFileError, policy_document_dumps, policy_export, policy_import
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

SECRET = "corp-client-secret-never-exported-4242"
OPERATORS = {
    "group": "toolgate-operators",
    "provider": None,
    "operator_role": "tool_admin",
    "is_staff": True,
    "tenant": None,
    "tenant_role": None,
}
ACME_ENG = {
    "group": "acme-eng",
    "provider": "acme-idp",
    "operator_role": None,
    "is_staff": False,
    "tenant": "acme",
    "tenant_role": "member",
}
APPROVERS = {
    "group": "toolgate-approvers",
    "provider": "corp",
    "operator_role": "approver",
    "is_staff": False,
    "tenant": None,
    "tenant_role": None,
}


@pytest.fixture
def providers():
    acme = TenantFactory(slug="acme")
    corp = provider_save(
        provider=IdentityProvider(slug="corp", display_name="Corp", issuer="https://idp.example", client_id="tg"),
        client_secret=SECRET,
    )
    acme_idp = provider_save(
        provider=IdentityProvider(
            slug="acme-idp", display_name="Acme", issuer="https://acme.example", client_id="tg", tenant=acme
        ),
        client_secret=SECRET,
    )
    return corp, acme_idp, acme


def mapping_actions() -> list[str]:
    return list(
        Change.objects.filter(action__startswith="sso.role_mapping").order_by("id").values_list("action", flat=True)
    )


def test_export_lists_mappings_by_their_values_and_names_providers_without_their_secrets(providers):
    corp, acme_idp, acme = providers
    # given: created in an order unlike the sorted one, one of them twice
    RoleMapping.objects.create(group="toolgate-approvers", provider=corp, operator_role="approver")
    RoleMapping.objects.create(group="acme-eng", provider=acme_idp, tenant=acme, tenant_role="member")
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)
    RoleMapping.objects.create(group="acme-eng", provider=acme_idp, tenant=acme, tenant_role="member")

    # when
    document = policy_export()
    text = policy_document_dumps(document)

    # then
    assert document["role_mappings"] == [ACME_ENG, APPROVERS, OPERATORS]
    assert list(document)[-1] == "role_mappings"
    assert SECRET not in text
    assert "client_id" not in text
    assert "issuer" not in text
    RoleMapping.objects.filter(group="acme-eng").first().delete()
    assert policy_document_dumps(policy_export()) == text  # the duplicate changed nothing of the file


def test_import_creates_the_listed_mappings_once_with_change_log_entries(providers):
    _corp, acme_idp, _acme = providers

    report = policy_import(document={"role_mappings": [OPERATORS, ACME_ENG, APPROVERS]})

    assert report.role_mappings_created == [
        "acme-eng via acme-idp → member of acme",
        "toolgate-approvers via corp → approver",
        "toolgate-operators via any provider → tool_admin, staff",
    ]
    assert report.changed_anything
    assert policy_export()["role_mappings"] == [ACME_ENG, APPROVERS, OPERATORS]
    assert RoleMapping.objects.get(group="acme-eng").provider == acme_idp
    assert mapping_actions() == ["sso.role_mapping.save"] * 3

    again = policy_import(document=policy_export())

    assert again.role_mappings_created == []
    assert again.role_mappings_pruned == []
    assert RoleMapping.objects.count() == 3
    assert mapping_actions() == ["sso.role_mapping.save"] * 3


def test_absent_keys_take_the_defaults(providers):
    policy_import(document={"role_mappings": [{"group": "acme-admins", "tenant": "acme", "tenant_role": "owner"}]})

    mapping = RoleMapping.objects.get()
    assert (mapping.provider, mapping.operator_role, mapping.is_staff) == (None, "", False)
    assert mapping.tenant_role == "owner"


def test_a_file_without_role_mappings_leaves_them_alone_even_with_prune(providers):
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)

    report = policy_import(document={"policies": []}, prune=True)

    assert report.role_mappings_pruned == []
    assert RoleMapping.objects.count() == 1
    assert mapping_actions() == []


def test_prune_deletes_the_mappings_the_list_does_not_hold_and_duplicates(providers):
    corp, _acme_idp, _acme = providers
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)
    RoleMapping.objects.create(group="toolgate-approvers", provider=corp, operator_role="approver")

    # when: the operators group becomes viewers, the approvers mapping is dropped
    viewers = {**OPERATORS, "operator_role": "viewer", "is_staff": False}
    report = policy_import(document={"policies": [], "role_mappings": [viewers]}, prune=True)

    assert report.role_mappings_created == ["toolgate-operators via any provider → viewer"]
    assert report.role_mappings_pruned == [
        "toolgate-approvers via corp → approver",
        "toolgate-operators via any provider → tool_admin, staff",
        "toolgate-operators via any provider → tool_admin, staff",
    ]
    assert policy_export()["role_mappings"] == [viewers]
    assert mapping_actions() == ["sso.role_mapping.delete"] * 3 + ["sso.role_mapping.save"]


def test_a_bad_list_is_refused_whole_naming_each_entry_and_nothing_changes(providers):
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)
    document = {
        "policies": [{"name": "global", "allowed_tools": []}],
        "role_mappings": [
            APPROVERS,
            {**APPROVERS, "provider": "nope"},
            {**ACME_ENG, "tenant": "beta"},
            {**ACME_ENG, "operator_role": "superuser"},  # a tenant's own provider grants no operator role
            {"group": "acme-eng", "tenant": "acme"},
            {"group": "idle"},
            {"group": "x", "is_staff": "yes", "operator_role": "root", "tenant_role": "boss", "colour": "red"},
            APPROVERS,
            "toolgate-operators",
        ],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document, prune=True)

    assert refused.value.problems == [
        "role_mappings[1] (group 'toolgate-approvers'): unknown identity provider 'nope'",
        "role_mappings[2] (group 'acme-eng'): unknown tenant 'beta'",
        "role_mappings[3] (group 'acme-eng'): A tenant's own provider cannot grant operator roles or staff.",
        "role_mappings[4] (group 'acme-eng'): A tenant and a tenant role go together.",
        "role_mappings[5] (group 'idle'): The rule grants nothing: choose an operator role, staff or a tenant.",
        "role_mappings[6] (group 'x'): unknown key 'colour'",
        "role_mappings[6] (group 'x'): operator_role must be null or one of viewer, approver, tool_admin, superuser",
        "role_mappings[6] (group 'x'): tenant_role must be null or one of owner, member",
        "role_mappings[6] (group 'x'): is_staff must be true or false",
        "role_mappings[7] (toolgate-approvers via corp → approver): listed more than once",
        "role_mappings[8] must be an object",
    ]
    assert list(RoleMapping.objects.values_list("group", flat=True)) == ["toolgate-operators"]
    assert not ToolPolicy.objects.exists()
    assert mapping_actions() == []


def test_the_policy_command_round_trips_role_mappings(providers, tmp_path):
    RoleMapping.objects.create(group="toolgate-operators", operator_role="tool_admin", is_staff=True)
    path = tmp_path / "policy.json"
    call_command("policy", "export", str(path), stdout=io.StringIO())
    assert SECRET not in path.read_text()
    document = json.loads(path.read_text())
    document["role_mappings"].append(APPROVERS)
    path.write_text(json.dumps(document))

    out = io.StringIO()
    call_command("policy", "import", str(path), "--prune", stdout=out)

    assert "created role mapping: toolgate-approvers via corp → approver" in out.getvalue().splitlines()
    assert policy_export()["role_mappings"] == [APPROVERS, OPERATORS]
