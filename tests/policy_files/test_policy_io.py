"""Policy files: export format, atomic validated import, prune, idempotency."""

from __future__ import annotations

import json

import pytest

from changes_app.models import Change
from policies_app.governance import governance_generation
from policies_app.models import ToolPolicy
from policy_files.policy_io import (
    PolicyFileError,
    policy_document_dumps,
    policy_document_loads,
    policy_export,
    policy_import,
)
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import Tool, Toolset
from tools_app.registry import code_specs
from tools_app.services import tool_sync
from tools_app.toolsets import NAME_RULE, toolset_save

pytestmark = pytest.mark.django_db

BUILTIN_IDS = [
    "core__get_current_time",
    "core__wait",
    "github__create_issue",
    "github__get_user",
    "toolgate__search_tools",
]


APPROVAL_DEFAULTS = {
    "require_approval_at_or_above": None,
    "require_approval_for_tools": [],
    "approver": "operator",
    "approval_ttl_s": 3600,
}


def meta(level: str, confirmation: bool, tags: list[str]) -> dict:
    return {"consequence_level": level, "requires_confirmation": confirmation, "tags": tags, "version": "1.0.0"}


@pytest.fixture
def catalog() -> None:
    tool_sync(specs=code_specs())


def policy_entry(name: str, **overrides: object) -> dict:
    entry = {
        "name": name,
        "tenant": None,
        "service_account": None,
        "allowed_tools": ["core__get_current_time"],
        "require_approval_for_effects": [],
        "max_runtime_ms": None,
        "max_result_bytes": None,
        "rate_limit_per_minute": None,
        "max_concurrency": None,
    }
    return {**entry, **overrides}


def db_state() -> tuple[list[tuple], list[tuple]]:
    """Everything an import may touch, to prove a refused import touched nothing."""
    policies = list(
        ToolPolicy.objects.order_by("name").values_list(
            "name",
            "tenant__slug",
            "service_account__name",
            "allowed_tools",
            "require_approval_for_effects",
            "max_runtime_ms",
            "max_result_bytes",
            "rate_limit_per_minute",
            "max_concurrency",
            "is_active",
            "updated_at",
        )
    )
    tools = list(Tool.objects.order_by("id").values_list("id", "is_enabled", "updated_at"))
    return policies, tools


def test_export_is_the_contract_format_sorted_by_tool_id_and_policy_name(catalog):
    # given
    acme = TenantFactory(slug="acme")
    bot, _key = service_account_with_key(acme, name="bot")
    Tool.objects.filter(pk="core__wait").update(is_enabled=True)
    ToolPolicyFactory(
        name="zz-bot",
        tenant=acme,
        service_account=bot,
        allowed_tools=["github__get_user", "core__wait"],
        require_approval_for_effects=["external_side_effect"],
        max_runtime_ms=15000,
        max_result_bytes=32768,
    )
    ToolPolicyFactory(name="aa-global", allowed_tools=["core__get_current_time"], rate_limit_per_minute=60)

    # when
    document = policy_export()

    # then
    pins = {tool_id: f"sha256:{digest}" for tool_id, digest in Tool.objects.values_list("id", "schema_hash")}
    assert document == {
        "tools": {
            "core__get_current_time": {
                "enabled": False,
                "schema_hash": pins["core__get_current_time"],
                **meta("low", False, ["time"]),
            },
            "core__wait": {"enabled": True, "schema_hash": pins["core__wait"], **meta("low", False, ["diagnostics"])},
            "github__create_issue": {
                "enabled": False,
                "schema_hash": pins["github__create_issue"],
                **meta("medium", True, ["github", "issues"]),
            },
            "github__get_user": {
                "enabled": False,
                "schema_hash": pins["github__get_user"],
                **meta("low", False, ["github", "identity"]),
            },
            "toolgate__search_tools": {
                "enabled": False,
                "schema_hash": pins["toolgate__search_tools"],
                **meta("low", False, ["toolgate", "search"]),
            },
        },
        "policies": [
            {
                "name": "aa-global",
                "tenant": None,
                "service_account": None,
                "allowed_tools": ["core__get_current_time"],
                "require_approval_for_effects": [],
                **APPROVAL_DEFAULTS,
                "max_runtime_ms": None,
                "max_result_bytes": None,
                "rate_limit_per_minute": 60,
                "max_concurrency": None,
                "active": True,
            },
            {
                "name": "zz-bot",
                "tenant": "acme",
                "service_account": "bot",
                "allowed_tools": ["core__wait", "github__get_user"],
                "require_approval_for_effects": ["external_side_effect"],
                **APPROVAL_DEFAULTS,
                "max_runtime_ms": 15000,
                "max_result_bytes": 32768,
                "rate_limit_per_minute": None,
                "max_concurrency": None,
                "active": True,
            },
        ],
        "toolsets": [],
        "argument_rules": [],
        "result_guards": [],
        "role_mappings": [],
    }
    assert list(document["tools"]) == BUILTIN_IDS
    assert policy_document_dumps(document).startswith('{\n  "tools": {\n    "core__get_current_time": {\n')
    assert policy_document_dumps(document).endswith("}\n")


def test_import_creates_policies_and_sets_switches(catalog):
    acme = TenantFactory(slug="acme")
    service_account_with_key(acme, name="bot")
    document = {
        "tools": {"core__wait": {"enabled": True}, "core__get_current_time": {"enabled": False}},
        "policies": [
            policy_entry(
                "acme-bot",
                tenant="acme",
                service_account="bot",
                allowed_tools=["core__wait", "core__get_current_time", "core__wait"],
                max_concurrency=2,
            )
        ],
    }
    generation = governance_generation()

    report = policy_import(document=document)

    policy = ToolPolicy.objects.get(name="acme-bot")
    assert (policy.tenant.slug, policy.service_account.name) == ("acme", "bot")
    assert policy.allowed_tools == ["core__get_current_time", "core__wait"]
    assert (policy.max_concurrency, policy.is_active) == (2, True)
    assert dict(Tool.objects.values_list("id", "is_enabled")) == {
        "core__get_current_time": False,
        "core__wait": True,
        "github__create_issue": False,
        "github__get_user": False,
        "toolgate__search_tools": False,
    }
    assert (report.created, report.updated, report.tools_enabled, report.tools_disabled) == (
        ["acme-bot"],
        [],
        ["core__wait"],
        [],
    )
    assert governance_generation() > generation


def test_unknown_tool_id_among_valid_changes_refuses_the_file_and_changes_nothing(catalog):
    # given a database state and a file with several valid changes and one unknown tool id
    acme = TenantFactory(slug="acme")
    ToolPolicyFactory(name="acme-default", tenant=acme, allowed_tools=["core__wait"])
    before = db_state()
    generation = governance_generation()
    document = {
        "tools": {"core__wait": {"enabled": True}, "github__get_user": {"enabled": True}},
        "policies": [
            policy_entry("acme-default", tenant="acme", allowed_tools=["core__get_current_time"]),
            policy_entry("global", allowed_tools=["core__wait", "nope__unknown_tool"]),
        ],
    }

    # when
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document, prune=True)

    # then
    assert refused.value.problems == ["policy 'global': unknown tool id 'nope__unknown_tool'"]
    assert "nope__unknown_tool" in str(refused.value)
    assert db_state() == before
    assert governance_generation() == generation


def test_unknown_tool_switch_is_named(catalog):
    before = db_state()

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {"core__wiat": {"enabled": True}}, "policies": []})

    assert refused.value.problems == ["tools: unknown tool id 'core__wiat' (did you mean 'core__wait'?)"]
    assert db_state() == before


def test_unknown_tenant_and_service_account_are_named(catalog):
    acme = TenantFactory(slug="acme")
    service_account_with_key(acme, name="bot")
    document = {
        "tools": {},
        "policies": [
            policy_entry("ghost", tenant="ghost-tenant"),
            policy_entry("acme-stranger", tenant="acme", service_account="stranger"),
            policy_entry("orphan", service_account="bot"),
        ],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == [
        "policy 'ghost': unknown tenant 'ghost-tenant'",
        "policy 'acme-stranger': unknown service account 'stranger' in tenant 'acme'",
        "policy 'orphan': service_account 'bot' needs a tenant",
    ]
    assert ToolPolicy.objects.count() == 0


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"require_approval_for_effects": ["sometimes"]}, "unknown effect 'sometimes'"),
        ({"max_runtime_ms": 0}, "max_runtime_ms must be a positive integer or null"),
        ({"max_result_bytes": -5}, "max_result_bytes must be a positive integer or null"),
        ({"rate_limit_per_minute": "60"}, "rate_limit_per_minute must be a positive integer or null"),
        ({"max_concurrency": True}, "max_concurrency must be a positive integer or null"),
        ({"max_concurrency": 1.5}, "max_concurrency must be a positive integer or null"),
        ({"allowed_tools": "core__wait"}, "allowed_tools must be a list of strings"),
        ({"active": "yes"}, "active must be true or false"),
        ({"max_runtime": 100}, "unknown key 'max_runtime'"),
    ],
)
def test_invalid_policy_fields_are_refused(catalog, overrides, problem):
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {}, "policies": [policy_entry("p", **overrides)]})

    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(f"policy 'p': {problem}")
    assert ToolPolicy.objects.count() == 0


@pytest.mark.parametrize(
    ("document", "problems"),
    [
        ([], ['the file must hold a JSON object with "tools", "policies" or both']),
        ({}, ['the file has neither "tools" nor "policies": nothing to import']),
        (
            {"tools": {}, "policies": [], "extra": 1},
            [
                "unknown top-level key 'extra' "
                "(the keys are argument_rules, policies, result_guards, role_mappings, tools, toolsets)"
            ],
        ),
        ({"tools": {"core__wait": True}, "policies": []}, ["tools: 'core__wait' must be {\"enabled\": true|false}"]),
        ({"tools": {}, "policies": {}}, ['"policies" must be a list of policy objects']),
        (
            {"tools": {}, "policies": [{"name": "Not A Slug"}]},
            ["policies[0]: an object whose name is a slug of at most 100 characters"],
        ),
        (
            {"tools": {}, "policies": [policy_entry("twice"), policy_entry("twice", allowed_tools=[])]},
            ["policy 'twice': the name appears more than once in the file"],
        ),
    ],
)
def test_malformed_documents_are_refused(catalog, document, problems):
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == problems
    assert ToolPolicy.objects.count() == 0


def test_a_file_of_switches_alone_leaves_the_policies_as_they_are(catalog):
    ToolPolicyFactory(name="keep", allowed_tools=["core__wait"])
    before, _tools = db_state()

    report = policy_import(document={"tools": {"core__wait": {"enabled": True}}})

    assert report.tools_enabled == ["core__wait"]
    assert (report.created, report.updated, report.pruned) == ([], [], [])
    assert db_state()[0] == before


def test_a_file_of_policies_alone_leaves_the_switches_as_they_are(catalog):
    _policies, before = db_state()

    report = policy_import(document={"policies": [policy_entry("global")]})

    assert report.created == ["global"]
    assert (report.tools_enabled, report.tools_disabled) == ([], [])
    assert db_state()[1] == before


def test_prune_without_a_policies_list_is_refused_instead_of_deleting_every_policy(catalog):
    ToolPolicyFactory(name="keep")

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {"core__wait": {"enabled": True}}}, prune=True)

    assert refused.value.problems == ['--prune deletes the policies the file does not name: it needs a "policies" list']
    assert list(ToolPolicy.objects.values_list("name", flat=True)) == ["keep"]
    assert Tool.objects.get(pk="core__wait").is_enabled is False


def test_every_problem_of_a_file_is_reported_in_one_run(catalog):
    TenantFactory(slug="acme")
    before = db_state()
    document = {
        "extra": 1,
        "tools": {
            "core__wiat": {"enabled": True},
            "core__wait": {"enabled": "yes"},
            "github__get_user": {"enabled": True, "schema_hash": "sha256:" + "0" * 64},
            "core__get_current_time": {"enabled": True},
        },
        "policies": [
            policy_entry("bad-budget", max_runtime_ms=0),
            policy_entry("acme-a", tenant="acme"),
            policy_entry("acme-b", tenant="acme"),
        ],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == [
        "unknown top-level key 'extra' "
        "(the keys are argument_rules, policies, result_guards, role_mappings, tools, toolsets)",
        "tools: unknown tool id 'core__wiat' (did you mean 'core__wait'?)",
        "tools: 'core__wait' must be {\"enabled\": true|false}",
        "policy 'bad-budget': max_runtime_ms must be a positive integer or null",
        "policies 'acme-a', 'acme-b': more than one active policy for tenant acme",
        "tools: 'github__get_user': schema_hash differs from the tool's current definition",
    ]
    assert db_state() == before


def test_duplicate_json_keys_are_refused():
    with pytest.raises(PolicyFileError) as refused:
        policy_document_loads('{"tools": {}, "policies": [], "tools": {"core__wait": {"enabled": true}}}')

    assert refused.value.problems == ["duplicate key 'tools'"]


def test_two_active_policies_for_one_scope_are_refused_before_any_write(catalog):
    TenantFactory(slug="acme")
    document = {
        "tools": {"core__wait": {"enabled": True}},
        "policies": [policy_entry("acme-a", tenant="acme"), policy_entry("acme-b", tenant="acme")],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert refused.value.problems == ["policies 'acme-a', 'acme-b': more than one active policy for tenant acme"]
    assert ToolPolicy.objects.count() == 0
    assert Tool.objects.get(pk="core__wait").is_enabled is False


def test_an_existing_active_policy_not_in_the_file_conflicts_unless_pruned(catalog):
    acme = TenantFactory(slug="acme")
    ToolPolicyFactory(name="acme-old", tenant=acme)
    document = {"tools": {}, "policies": [policy_entry("acme-new", tenant="acme")]}

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)
    report = policy_import(document=document, prune=True)

    assert refused.value.problems == ["policies 'acme-new', 'acme-old': more than one active policy for tenant acme"]
    assert (report.created, report.pruned) == (["acme-new"], ["acme-old"])
    assert list(ToolPolicy.objects.values_list("name", flat=True)) == ["acme-new"]


def test_moving_the_active_flag_between_two_policies_of_a_scope_applies(catalog):
    acme = TenantFactory(slug="acme")
    ToolPolicyFactory(name="acme-a", tenant=acme, is_active=True)
    ToolPolicyFactory(name="acme-b", tenant=acme, is_active=False)
    document = {
        "tools": {},
        "policies": [
            policy_entry("acme-b", tenant="acme", active=True),  # written first: acme-a must step aside before
            policy_entry("acme-a", tenant="acme", active=False),
        ],
    }

    report = policy_import(document=document)

    assert sorted(report.updated) == ["acme-a", "acme-b"]
    assert dict(ToolPolicy.objects.values_list("name", "is_active")) == {"acme-a": False, "acme-b": True}


def test_active_defaults_to_true_when_absent(catalog):
    ToolPolicyFactory(name="global", is_active=False, allowed_tools=["core__get_current_time"])

    report = policy_import(document={"tools": {}, "policies": [policy_entry("global")]})

    assert report.updated == ["global"]
    assert ToolPolicy.objects.get(name="global").is_active is True


def test_export_then_import_reproduces_the_same_export_byte_for_byte(catalog):
    # given a varied state, exported
    acme = TenantFactory(slug="acme")
    bot, _key = service_account_with_key(acme, name="bot")
    Tool.objects.filter(pk__in=["core__wait", "github__get_user"]).update(is_enabled=True)
    ToolPolicyFactory(name="global", allowed_tools=["core__get_current_time"], max_result_bytes=1000)
    ToolPolicyFactory(name="acme-default", tenant=acme, allowed_tools=["core__wait"], is_active=False)
    ToolPolicyFactory(
        name="acme-bot",
        tenant=acme,
        service_account=bot,
        allowed_tools=["github__get_user"],
        require_approval_for_effects=["state_change", "external_side_effect"],
        rate_limit_per_minute=10,
        max_concurrency=1,
    )
    exported = policy_document_dumps(policy_export())

    # when the state drifts, then the file is imported back
    ToolPolicy.objects.all().delete()
    ToolPolicyFactory(name="stray", allowed_tools=["core__wait"])
    Tool.objects.update(is_enabled=False)
    report = policy_import(document=policy_document_loads(exported), prune=True)

    # then
    assert policy_document_dumps(policy_export()) == exported
    assert (sorted(report.created), report.pruned) == (["acme-bot", "acme-default", "global"], ["stray"])
    assert (report.tools_enabled, report.tools_disabled) == (["core__wait", "github__get_user"], [])


def test_import_is_idempotent(catalog):
    TenantFactory(slug="acme")
    document = {
        "tools": {"core__wait": {"enabled": True}},
        "policies": [policy_entry("acme-default", tenant="acme", allowed_tools=["core__wait"])],
    }
    policy_import(document=document)
    before = db_state()
    generation = governance_generation()

    report = policy_import(document=document)

    assert (report.created, report.updated, report.unchanged) == ([], [], ["acme-default"])
    assert (report.tools_enabled, report.tools_disabled, report.changed_anything) == ([], [], False)
    assert db_state() == before
    assert governance_generation() == generation


def test_prune_deletes_only_policies_the_file_does_not_name(catalog):
    ToolPolicyFactory(name="keep")
    ToolPolicyFactory(name="drop-1", tenant=TenantFactory(slug="one"))
    ToolPolicyFactory(name="drop-2", tenant=TenantFactory(slug="two"))
    document = {"tools": {}, "policies": [policy_entry("keep")]}

    without = policy_import(document=document)
    names_without_prune = sorted(ToolPolicy.objects.values_list("name", flat=True))
    pruned = policy_import(document=document, prune=True)

    assert without.pruned == []
    assert names_without_prune == ["drop-1", "drop-2", "keep"]
    assert pruned.pruned == ["drop-1", "drop-2"]
    assert list(ToolPolicy.objects.values_list("name", flat=True)) == ["keep"]


def test_switch_for_a_registry_tool_without_a_row_syncs_the_catalog_first():
    assert Tool.objects.count() == 0

    report = policy_import(document={"tools": {"core__wait": {"enabled": True}}, "policies": []})

    assert report.tools_synced is True
    assert report.tools_enabled == ["core__wait"]
    assert list(Tool.objects.values_list("id", "is_enabled")) == [
        ("core__get_current_time", False),
        ("core__wait", True),
        ("github__create_issue", False),
        ("github__get_user", False),
        ("toolgate__search_tools", False),
    ]


def test_policy_may_name_a_registry_tool_before_it_is_synced():
    report = policy_import(document={"tools": {}, "policies": [policy_entry("global", allowed_tools=["core__wait"])]})

    assert (report.created, report.tools_synced) == (["global"], False)
    assert Tool.objects.count() == 0


def test_dumps_of_a_loaded_file_is_stable_json():
    text = policy_document_dumps({"tools": {}, "policies": []})

    assert text == '{\n  "tools": {},\n  "policies": []\n}\n'
    assert json.loads(text) == policy_document_loads(text)


# --- approval keys and tool metadata --------------------------------------------------------


def test_import_sets_the_approval_keys_and_an_export_gives_them_back(catalog):
    TenantFactory(slug="acme")
    entry = policy_entry(
        "acme",
        tenant="acme",
        require_approval_at_or_above="medium",
        require_approval_for_tools=["core__wait", "core__wait"],
        approver="tenant_owner",
        approval_ttl_s=600,
    )

    policy_import(document={"tools": {}, "policies": [entry]})

    policy = ToolPolicy.objects.get(name="acme")
    assert (
        policy.require_approval_at_or_above,
        policy.require_approval_for_tools,
        policy.approver,
        policy.approval_ttl_s,
    ) == ("medium", ["core__wait"], "tenant_owner", 600)
    exported = next(p for p in policy_export()["policies"] if p["name"] == "acme")
    assert {key: exported[key] for key in APPROVAL_DEFAULTS} == {
        "require_approval_at_or_above": "medium",
        "require_approval_for_tools": ["core__wait"],
        "approver": "tenant_owner",
        "approval_ttl_s": 600,
    }


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"require_approval_at_or_above": "severe"},
            "require_approval_at_or_above must be null or one of low, medium, high",
        ),
        (
            {"require_approval_for_tools": ["nope__tool"]},
            "require_approval_for_tools names unknown tool id 'nope__tool'",
        ),
        ({"require_approval_for_tools": "core__wait"}, "require_approval_for_tools must be a list of strings"),
        ({"approver": "anyone"}, "approver must be one of operator, tenant_owner, subject"),
        ({"approval_ttl_s": 10}, "approval_ttl_s must be whole seconds from 60 to 604800"),
        ({"approval_ttl_s": "3600"}, "approval_ttl_s must be whole seconds from 60 to 604800"),
    ],
)
def test_bad_approval_keys_refuse_the_file_and_change_nothing(catalog, overrides, problem):
    before = db_state()

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {}, "policies": [policy_entry("p", **overrides)]})

    assert refused.value.problems == [f"policy 'p': {problem}"]
    assert db_state() == before


def test_a_code_tools_metadata_in_the_file_must_match_its_contract(catalog):
    same = {"enabled": True, "consequence_level": "medium", "requires_confirmation": True, "tags": ["github", "issues"]}
    policy_import(document={"tools": {"github__create_issue": same}, "policies": []})
    before = db_state()

    with pytest.raises(PolicyFileError) as refused:
        policy_import(
            document={
                "tools": {"github__create_issue": {"enabled": False, "requires_confirmation": False}},
                "policies": [],
            }
        )

    assert refused.value.problems == [
        "tools: 'github__create_issue': requires_confirmation is True in the tool's code; "
        "change it there, not in the file"
    ]
    assert db_state() == before
    assert Tool.objects.get(pk="github__create_issue").requires_confirmation is True


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"enabled": True, "consequence_level": "severe"}, "consequence_level must be one of low, medium, high"),
        ({"enabled": True, "requires_confirmation": "yes"}, "requires_confirmation must be true or false"),
        ({"enabled": True, "tags": ["Bad Tag"]}, "tags must be 1..32 lower-case letters"),
    ],
)
def test_malformed_tool_metadata_refuses_the_file(catalog, entry, problem):
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document={"tools": {"core__wait": entry}, "policies": []})

    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(f"tools: 'core__wait': {problem}")


# --- toolsets --------------------------------------------------------------------


def test_toolsets_round_trip_through_export_and_import(catalog):
    acme = TenantFactory(slug="acme")
    toolset_save(tenant_id=acme.pk, name="clock", tool_ids=["core__wait"], tags=["time"], description="d")
    toolset_save(tenant_id=None, name="basics", tool_ids=["core__get_current_time"])
    exported = policy_document_dumps(policy_export())
    assert policy_export()["toolsets"] == [
        {"name": "basics", "tenant": None, "description": "", "tool_ids": ["core__get_current_time"], "tags": []},
        {"name": "clock", "tenant": "acme", "description": "d", "tool_ids": ["core__wait"], "tags": ["time"]},
    ]

    Toolset.objects.all().delete()
    report = policy_import(document=policy_document_loads(exported))

    assert (report.toolsets_created, report.toolsets_updated) == (["*/basics", "acme/clock"], [])
    assert policy_document_dumps(policy_export()) == exported
    again = policy_import(document=policy_document_loads(exported))
    assert (again.toolsets_created, again.toolsets_updated, again.changed_anything) == ([], [], False)


def test_a_toolset_import_updates_and_prunes_and_logs_each_write(catalog):
    acme = TenantFactory(slug="acme")
    toolset_save(tenant_id=acme.pk, name="clock", tool_ids=["core__wait"])
    toolset_save(tenant_id=acme.pk, name="old", tool_ids=["core__wait"])
    document = {
        "policies": [],  # --prune needs the policies part: it prunes policies and toolsets alike
        "toolsets": [{"name": "clock", "tenant": "acme", "tool_ids": ["core__get_current_time"]}],
    }

    report = policy_import(document=document, prune=True)

    assert (report.toolsets_updated, report.toolsets_pruned) == (["acme/clock"], ["acme/old"])
    assert list(Toolset.objects.values_list("name", "tool_ids")) == [("clock", ["core__get_current_time"])]
    assert list(Change.objects.filter(object_type="tools_app.toolset").order_by("id").values_list("action", flat=True))[
        -2:
    ] == ["toolset.update", "toolset.delete"]


def test_a_bad_toolset_refuses_the_whole_file(catalog):
    TenantFactory(slug="acme")
    document = {
        "policies": [policy_entry("p")],
        "toolsets": [
            {"name": "ok", "tenant": "acme", "tool_ids": ["core__wiat"]},
            {"name": "x", "tenant": "nobody", "tags": ["time"]},
            {"name": "Bad Name", "tenant": None, "tags": ["time"]},
        ],
    }
    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document)

    assert [error.message for error in refused.value.field_errors] == [
        "toolset acme/ok: unknown tool id 'core__wiat'",
        "toolset nobody/x: tenant 'nobody' does not exist",
        f"toolset */Bad Name: name must be {NAME_RULE}",
    ]
    assert not ToolPolicy.objects.exists()
    assert not Toolset.objects.exists()
