"""Argument rules and result guards in policy files: export, atomic validated import, prune, round trip."""

from __future__ import annotations

import pytest

from changes_app.models import Change
from policies_app.models import ArgumentRule, ResultGuard
from policies_app.services import argument_rule_save, result_guard_save
from policy_files.policy_io import PolicyFileError, policy_export, policy_import
from tests.factories import TenantFactory, service_account_with_key
from tests.support.api import enable_tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme():
    enable_tools("core__get_current_time", "core__wait")
    tenant = TenantFactory(slug="acme")
    account, _ = service_account_with_key(tenant, name="bot")
    return tenant, account


RULE = {
    "name": "no-long-waits",
    "tenant": "acme",
    "service_account": "bot",
    "tools": ["core__wait"],
    "tags": [],
    "condition": "args.ms > 1000",
    "action": "deny",
    "message": "waits longer than a second are not for this agent",
    "active": True,
}
GUARD = {
    "name": "secrets",
    "tenant": None,
    "service_account": None,
    "tools": ["*"],
    "tags": [],
    "detectors": ["aws_access_key", "private_key"],
    "patterns": ["acme_[a-z0-9]{32}"],
    "action": "redact",
    "arguments": "refuse",
    "message": "",
    "active": True,
}


def test_an_exported_file_imports_back_to_the_same_rows_and_changes_nothing(acme):
    policy_import(document={"argument_rules": [RULE], "result_guards": [GUARD]})
    exported = policy_export()
    assert exported["argument_rules"] == [RULE]
    assert exported["result_guards"] == [GUARD]
    logged = Change.objects.count()

    report = policy_import(document=exported)

    assert (report.rules_created, report.rules_updated) == ([], [])
    assert Change.objects.count() == logged  # unchanged rows are not written again
    assert policy_export() == exported


def test_import_creates_updates_and_prunes_with_the_change_log(acme):
    report = policy_import(document={"argument_rules": [RULE]})
    assert report.rules_created == ["argument_rules:no-long-waits"]
    assert Change.objects.filter(action="argument_rule.create").count() == 1

    report = policy_import(document={"argument_rules": [{**RULE, "condition": "args.ms > 2000"}]})
    assert report.rules_updated == ["argument_rules:no-long-waits"]
    assert ArgumentRule.objects.get().condition == "args.ms > 2000"
    change = Change.objects.get(action="argument_rule.update")
    assert (change.before["condition"], change.after["condition"]) == ("args.ms > 1000", "args.ms > 2000")

    result_guard_save(guard=ResultGuard(name="other", tools=["*"], detectors=["private_key"]))
    report = policy_import(document={"policies": [], "argument_rules": [], "result_guards": [GUARD]}, prune=True)
    assert report.rules_pruned == ["argument_rules:no-long-waits", "result_guards:other"]
    assert report.rules_created == ["result_guards:secrets"]
    assert not ArgumentRule.objects.exists()
    assert list(ResultGuard.objects.values_list("name", flat=True)) == ["secrets"]


def test_a_file_with_a_bad_rule_is_refused_whole_naming_every_problem(acme):
    argument_rule_save(rule=ArgumentRule(name="kept", tools=["core__wait"], condition="true", action="deny"))
    document = {
        "argument_rules": [
            {**RULE, "condition": "args.ms >"},
            {**RULE, "name": "second", "tools": [], "tags": []},
            {**RULE, "name": "third", "service_account": "ghost"},
        ],
        "result_guards": [{**GUARD, "patterns": ["(?=x)"]}],
    }

    with pytest.raises(PolicyFileError) as refused:
        policy_import(document=document, prune=True)

    problems = "\n".join(refused.value.problems)
    assert "argument_rules no-long-waits: condition: at 1:10: Syntax error" in problems
    assert "argument_rules second: tools: the rule covers no tool" in problems
    assert "argument_rules third: service account 'ghost' needs its tenant and must exist" in problems
    assert "result_guards secrets: patterns: pattern 1: not a valid RE2 pattern" in problems
    assert list(ArgumentRule.objects.values_list("name", flat=True)) == ["kept"]  # nothing pruned, nothing written
    assert not ResultGuard.objects.exists()
