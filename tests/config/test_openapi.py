"""The OpenAPI schema: generated without warnings, served publicly, and true to the API.

schemathesis generates requests from the schema and checks the answers against
it with all its checks (no 5xx, every body, status and header as documented,
valid data accepted, invalid data refused). The schema is loaded at
module level through the WSGI application: `from_fixture` breaks on pytest 9.2.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter

import pytest
import schemathesis
import yaml
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import positive_data_acceptance, response_schema_conformance

from config.wsgi import application
from connections_app.credentials import CredentialsInvalid, credentials_validate
from core.errors import ERROR_STATUS
from policies_app.governance import governance_bump
from runner.types import ErrorCode
from runner.wire.codecs import CODECS
from tests.factories import TenantFactory, ToolPolicyFactory, service_account_with_key
from tools_app.models import Tool

SCHEMA = schemathesis.openapi.from_wsgi("/api/schema/", application)
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations()}
EXAMPLES_PER_OPERATION = 50


def test_schema_generates_and_validates_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))

    schema = yaml.safe_load(target.read_text())
    assert sorted(schema["paths"]) == [
        "/api/v1/approvals/{approval_id}",
        "/api/v1/connections",
        "/api/v1/connections/{connection_id}",
        "/api/v1/connections/{connection_id}/revoke",
        "/api/v1/delegations/token",
        "/api/v1/grants",
        "/api/v1/grants/{grant_id}",
        "/api/v1/grants/{grant_id}/revoke",
        "/api/v1/invocations",
        "/api/v1/invocations/{tool_call_id}",
        "/api/v1/tools",
        "/api/v1/tools/calls",
        "/api/v1/tools/exec",
        "/api/v1/tools/{tool_id}",
    ]
    assert schema["components"]["securitySchemes"] == {
        "ServiceAccountKey": {
            "type": "http",
            "scheme": "bearer",
            "description": "A service account's API key: `Authorization: Bearer tg_<prefix>_<secret>`.",
        }
    }


def test_schema_states_the_rules_validation_enforces():
    # the schema allowed what the API refused (NUL, unknown fields) and vice versa
    schema = SCHEMA.raw_schema
    components = schema["components"]["schemas"]
    exec_body = components["ExecRequest"]
    detail = schema["paths"]["/api/v1/invocations/{tool_call_id}"]["get"]["parameters"]
    listing = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/invocations"]["get"]["parameters"]}

    assert schema["openapi"] == "3.1.0"
    assert "NUL character or an unpaired surrogate" in schema["info"]["description"]
    assert all(
        components[name]["additionalProperties"] is False
        for name in ("ExecRequest", "ConnectionCreateRequest", "GrantCreateRequest")
    )
    assert exec_body["properties"]["tool_call_id"]["pattern"] == "^[A-Za-z0-9_-]{1,128}$"
    assert exec_body["properties"]["tool_id"]["pattern"] == "^[^\\x00]*$"
    assert exec_body["properties"]["args"]["propertyNames"] == {"pattern": "^[^\\x00]*$"}
    assert exec_body["then"] == {"properties": {"grant_id": {"type": "string"}}, "required": ["grant_id"]}
    assert next(p for p in detail if p["name"] == "tool_call_id")["schema"]["pattern"] == "^[A-Za-z0-9_-]{1,128}$"
    assert listing["limit"] == {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}
    # the schema accepted what the API refused
    assert exec_body["allOf"] == [
        {
            "if": {
                "properties": {"tool_id": {"enum": ["core__get_current_time", "core__wait", "toolgate__search_tools"]}},
                "required": ["tool_id"],
            },
            "then": {"properties": {"connection_id": {"type": "null"}}},
        }
    ]
    assert components["ToolCallsRequest"]["properties"]["message"]["type"] == ["object", "array"]
    assert components["DelegationTokenRequestRequest"]["properties"]["code"]["pattern"] == "^[A-Za-z0-9_-]{43}$"
    assert listing["offset"] == {"type": "integer", "minimum": 0, "maximum": 1_000_000_000, "default": 0}


def test_schema_format_names_are_the_codec_registrys():
    # the names were hand-kept in the serializers, the views and an enum
    schema = SCHEMA.raw_schema
    catalog = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/tools"]["get"]["parameters"]}

    assert list(CODECS) == ["openai", "openai_responses", "anthropic"]
    assert catalog["format"]["enum"] == list(CODECS)
    assert schema["components"]["schemas"]["ToolCallsRequest"]["properties"]["format"]["allOf"] == [
        {"$ref": "#/components/schemas/FormatEnum"}
    ]
    assert schema["components"]["schemas"]["FormatEnum"]["enum"] == list(CODECS)


def test_schema_credential_shapes_are_the_ones_credentials_validate_enforces():
    rules = SCHEMA.raw_schema["components"]["schemas"]["ConnectionCreateRequest"]["allOf"]
    shapes = {
        rule["if"]["properties"]["credential_type"]["const"]: rule["then"]["properties"]["credentials"]
        for rule in rules
    }

    for credential_type, shape in shapes.items():
        valid = dict.fromkeys(shape["properties"], "a")
        assert credentials_validate(credential_type, valid) == valid
        for name, field in shape["properties"].items():
            for sample in ("ghp_x", "ghp_éx", "two words", "user:name", "tab\there", "é"):
                in_schema = re.fullmatch(field["pattern"], sample) is not None
                try:
                    credentials_validate(credential_type, {**valid, name: sample})
                except CredentialsInvalid:
                    accepted = False
                else:
                    accepted = True
                assert in_schema is accepted, (credential_type, name, sample)
    assert set(shapes) == {"api_key", "app_password"}


def test_schema_documents_the_status_of_every_exec_outcome():
    responses = SCHEMA.raw_schema["paths"]["/api/v1/tools/exec"]["post"]["responses"]

    documented = set(responses)

    assert {str(ERROR_STATUS[code]) for code in ErrorCode} <= documented
    assert {"200", "401", "403", "413", "415"} <= documented


def test_every_operation_requires_the_bearer_key():
    for operation in OPERATIONS.values():
        assert operation.definition.raw["security"] == [{"ServiceAccountKey": []}], operation.label


def test_schema_and_docs_are_served_without_a_key_and_without_a_cdn(client):
    schema = client.get("/api/schema/")
    docs = client.get("/api/docs/")

    assert schema.status_code == 200
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn." not in page
    assert "https://" not in page


# --- schemathesis ---------------------------------------------------------------------------------


@pytest.fixture
def bearer(db) -> str:
    """A caller whose catalog holds the clock only: generated calls cannot reach core__wait's minute-long sleeps."""
    call_command("sync_tools", stdout=io.StringIO())
    Tool.objects.filter(pk__in=["core__get_current_time", "core__wait"]).update(is_enabled=True)
    governance_bump()
    tenant = TenantFactory(slug="schemathesis")
    ToolPolicyFactory(tenant=tenant, allowed_tools=["core__get_current_time"])
    _account, key = service_account_with_key(tenant, name="agent", scopes=("tools:exec", "connections:manage"))
    return key


@pytest.fixture
def wsgi_inside_the_test_transaction():
    """Django's test client does this itself; a bare WSGI call would close the test's connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# A schema cannot list what exists in a tenant (a provider some tool needs, a service account,
# a connection, a consent code waiting to be exchanged) nor say "in the future"; nor does it
# spell out a model's assistant turn, whose shape its vendor's API defines per `format`. The
# contract answers those 422 with `errors` naming the field; any other refusal of schema-valid
# data is still a failure.
UNKNOWN_REFERENCES = {
    "POST /api/v1/connections": re.compile(r"provider|expires_at"),
    "POST /api/v1/grants": re.compile(r"service_account|connection_ids\.[0-9]+"),
    "POST /api/v1/tools/calls": re.compile(r"message(\..+)?"),
    "POST /api/v1/delegations/token": re.compile(r"code"),
}


# The schema spells the parser's NUL rule out only JSON_SCHEMA_DEPTH levels into free-form objects
# (a recursive schema breaks schemathesis's generator); deeper, the refusal is the documented one.
NUL_REFUSAL = "JSON strings must not contain NUL characters or unpaired surrogates"


def positive_data_accepted_but_for_unknown_references(ctx, response, case):
    if case.meta.generation.mode.is_positive and response.status_code == 400:
        assert response.json()["safe_message"] == NUL_REFUSAL, "schema-valid data refused as invalid JSON"
        return True
    if (
        case.meta.generation.mode.is_positive
        and response.status_code == 422
        and case.operation.label in UNKNOWN_REFERENCES
    ):
        paths = {error["path"] for error in response.json()["errors"]}
        pattern = UNKNOWN_REFERENCES[case.operation.label]
        assert paths, "422 without errors"
        assert all(pattern.fullmatch(path) for path in paths), f"schema-valid data refused at {sorted(paths)}"
        return True
    return positive_data_acceptance(ctx, response, case)


@pytest.mark.django_db
@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_api_conforms_to_its_schema(label, mode, bearer, wsgi_inside_the_test_transaction, capsys):
    operation = OPERATIONS[label]
    statuses: Counter[int] = Counter()

    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def call_and_check(case):
        # A query parameter whose value is an empty list is not sent at all (a URL cannot carry it):
        # as a "negative" case it is the valid request without it, so it proves nothing either way.
        assume(not any(value == [] for value in (case.query or {}).values()))
        # Every check schemathesis has: no 5xx, bodies, statuses, headers and content types as
        # documented, schema-valid data accepted and schema-violating data refused (the
        # API coerced 1 to "1" and ?offset=null to 0), the key required.
        response = case.call_and_validate(
            headers={"Authorization": f"Bearer {bearer}"},
            excluded_checks=[positive_data_acceptance],
            additional_checks=[positive_data_accepted_but_for_unknown_references],
        )
        statuses[response.status_code] += 1

    call_and_check()

    generated = statuses.total()
    with capsys.disabled():
        print(f"\nschemathesis {mode.value} {label}: {generated} cases, statuses {dict(sorted(statuses.items()))}")
    assert generated > 0
    if mode is schemathesis.GenerationMode.POSITIVE:  # negative cases also send broken Authorization headers
        assert 401 not in statuses  # the key was sent: the checks saw the API's answers, not only the gate's


def test_known_outcomes_match_their_documented_schemas(bearer, wsgi_inside_the_test_transaction):
    # given the outcomes random generation rarely reaches: success, refusals, existing rows
    headers = {"Authorization": f"Bearer {bearer}"}
    exec_op = OPERATIONS["POST /api/v1/tools/exec"]
    cases = [
        (exec_op.Case(body={"tool_id": "core__get_current_time", "tool_call_id": "s1"}), 200),
        (exec_op.Case(body={"tool_id": "core__get_current_time", "tool_call_id": "s1"}), 200),  # replayed
        (
            exec_op.Case(body={"tool_id": "core__get_current_time", "args": {"timezone": "UTC"}, "tool_call_id": "s1"}),
            409,
        ),
        (exec_op.Case(body={"tool_id": "core__wait", "args": {"ms": 1}}), 403),
        (exec_op.Case(body={"tool_id": "core__get_current_time", "args": {"timezone": "Mars/Base"}}), 422),
        (exec_op.Case(body={"tool_id": "core__get_current_time", "extra": 1}), 422),
        (exec_op.Case(body={"tool_id": "core__nope"}), 404),
        (OPERATIONS["GET /api/v1/tools"].Case(), 200),
        (OPERATIONS["GET /api/v1/tools"].Case(query={"format": "openai"}), 200),
        (OPERATIONS["GET /api/v1/tools"].Case(query={"format": "openai_responses"}), 200),
        (OPERATIONS["GET /api/v1/tools"].Case(query={"format": "anthropic"}), 200),
        (
            OPERATIONS["POST /api/v1/tools/calls"].Case(
                body={
                    "format": "anthropic",
                    "message": [
                        {"type": "tool_use", "id": "toolu_s2", "name": "core__get_current_time", "input": {}},
                        {"type": "tool_use", "id": "toolu_s3", "name": "core__wait", "input": {"ms": 1}},
                    ],
                }
            ),
            200,
        ),
        (OPERATIONS["POST /api/v1/tools/calls"].Case(body={"format": "openai", "message": []}), 422),
        (OPERATIONS["GET /api/v1/tools/{tool_id}"].Case(path_parameters={"tool_id": "core__get_current_time"}), 200),
        (OPERATIONS["GET /api/v1/invocations"].Case(query={"ok": "true", "limit": 1}), 200),
        (OPERATIONS["GET /api/v1/invocations/{tool_call_id}"].Case(path_parameters={"tool_call_id": "s1"}), 200),
        (OPERATIONS["GET /api/v1/tools"].Case(), 401),
    ]

    # when / then
    statuses = []
    for case, _expected in cases:
        send = headers if _expected != 401 else {"Authorization": "Bearer tg_nope"}
        response = case.call_and_validate(headers=send, checks=[not_a_server_error, response_schema_conformance])
        statuses.append(response.status_code)
    assert statuses == [expected for _case, expected in cases]


@pytest.mark.parametrize(
    ("query", "content_type"), [("json", "application/vnd.oai.openapi+json"), ("yaml", "application/vnd.oai.openapi")]
)
def test_schema_format_parameter_picks_json_or_yaml(client, query, content_type):
    response = client.get("/api/schema/", {"format": query})

    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == content_type
    if query == "json":
        assert json.loads(response.content)["info"]["title"] == "Toolgate API"
    else:
        assert response.content.startswith(b"openapi: 3.1.0")


def test_schema_unknown_format_answers_the_envelope(client):
    response = client.get("/api/schema/", {"format": "xml"})

    assert response.status_code == 422
    assert response.json()["errors"] == [{"path": "format", "message": "unknown schema format; use one of: json, yaml"}]
