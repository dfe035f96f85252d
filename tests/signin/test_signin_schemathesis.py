"""schemathesis over the JSON endpoints of MCP sign-in (docs/api.md), described by the OpenAPI document below.

They are OAuth endpoints, not the REST API (no API key, RFC 6749 §5.2 error
bodies), so they are described here rather than in /api/schema/. Every answer
must be a documented status with a documented body: never a 5xx, never the
REST envelope. Valid-looking data may still be refused (a random code is not
one Toolgate issued), so "positive data accepted" is not among the checks;
negative data must be refused.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from config.wsgi import application

OAUTH_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "string",
            "enum": [
                "invalid_request",
                "invalid_client",
                "invalid_grant",
                "unauthorized_client",
                "unsupported_grant_type",
                "unsupported_token_type",
                "invalid_scope",
                "invalid_target",
                "invalid_redirect_uri",
                "invalid_client_metadata",
            ],
        },
        "error_description": {"type": "string"},
        "error_uri": {"type": "string"},
    },
    "additionalProperties": False,
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, **_json(OAUTH_ERROR)}


def _form(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": schema}}}


STRING = {"type": "string", "maxLength": 200}
SIGNIN_OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Toolgate MCP sign-in", "version": "1"},
    "paths": {
        "/.well-known/oauth-protected-resource/mcp": {
            "get": {
                "responses": {
                    "200": {
                        "description": "RFC 9728",
                        **_json(
                            {
                                "type": "object",
                                "required": ["resource", "authorization_servers", "bearer_methods_supported"],
                                "properties": {
                                    "resource": {"type": "string"},
                                    "authorization_servers": {"type": "array", "items": {"type": "string"}},
                                    "bearer_methods_supported": {"type": "array", "items": {"enum": ["header"]}},
                                },
                            }
                        ),
                    }
                }
            }
        },
        "/.well-known/oauth-protected-resource/mcp/t/{toolset}": {
            "get": {
                "parameters": [
                    {
                        "name": "toolset",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "RFC 9728 for one toolset, answered alike whether it exists or not",
                        **_json(
                            {
                                "type": "object",
                                "required": ["resource", "authorization_servers", "bearer_methods_supported"],
                                "properties": {"resource": {"type": "string", "pattern": "^http://localhost/mcp/t/"}},
                            }
                        ),
                    },
                    "404": _error("not a toolset name"),
                },
            }
        },
        "/.well-known/oauth-authorization-server": {
            "get": {
                "responses": {
                    "200": {
                        "description": "RFC 8414",
                        **_json(
                            {
                                "type": "object",
                                "required": [
                                    "issuer",
                                    "authorization_endpoint",
                                    "token_endpoint",
                                    "registration_endpoint",
                                    "revocation_endpoint",
                                    "code_challenge_methods_supported",
                                ],
                            }
                        ),
                    }
                }
            }
        },
        "/oauth/register": {
            "post": {
                "requestBody": {
                    "required": True,
                    **_json(
                        {
                            "type": "object",
                            "required": ["redirect_uris"],
                            "properties": {
                                "redirect_uris": {
                                    "type": "array",
                                    "minItems": 1,
                                    "maxItems": 10,
                                    # https anywhere, plain http only on loopback with a port; never a #fragment
                                    "items": {
                                        "type": "string",
                                        "pattern": '^(https://[!-"$-~]+|http://(127\\.0\\.0\\.1|localhost):[0-9]+(/[!-"$-~]*)?)$',
                                    },
                                },
                                "client_name": {"type": "string", "nullable": True},  # cut to 200 characters
                                # Whatever a client asks for here, it is registered as a public client of
                                # the code and refresh grants (RFC 7591 §3.2.1: the server decides).
                                "token_endpoint_auth_method": {"type": "string", "nullable": True},
                                "grant_types": {"type": "array", "nullable": True, "items": {"type": "string"}},
                                "response_types": {"type": "array", "nullable": True, "items": {"type": "string"}},
                            },
                        }
                    ),
                },
                "responses": {
                    "201": {
                        "description": "registered",
                        **_json(
                            {
                                "type": "object",
                                "required": ["client_id", "redirect_uris", "token_endpoint_auth_method"],
                                "properties": {
                                    "client_id": {"type": "string"},
                                    "token_endpoint_auth_method": {"enum": ["none"]},
                                },
                            }
                        ),
                    },
                    "400": _error("refused metadata"),
                    "429": _error("too many registrations"),
                },
            }
        },
        "/oauth/token": {
            "post": {
                "requestBody": _form(
                    {
                        "grant_type": {"type": "string", "enum": ["authorization_code", "refresh_token"]},
                        "code": STRING,
                        "redirect_uri": STRING,
                        "client_id": STRING,
                        "code_verifier": STRING,
                        "refresh_token": STRING,
                        "resource": STRING,
                    },
                    ["grant_type"],
                ),
                "responses": {
                    "200": {"description": "tokens", **_json({"type": "object", "required": ["access_token"]})},
                    "400": _error("refused"),
                    "401": _error("client authentication failed"),
                },
            }
        },
        "/oauth/revoke": {
            "post": {
                "requestBody": _form(
                    {
                        "token": {"type": "string"},  # RFC 7009: any string; an unknown one answers 200
                        "token_type_hint": {"type": "string", "enum": ["access_token", "refresh_token", ""]},
                        "client_id": STRING,
                    },
                    ["token"],
                ),
                "responses": {
                    "200": {"description": "revoked (or unknown)", **_json({"type": "object"})},
                    "400": _error("refused"),
                    "401": _error("client authentication failed"),
                },
            }
        },
    },
}

SCHEMA = schemathesis.openapi.from_dict(SIGNIN_OPENAPI)
SCHEMA.app = application
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations()}


@pytest.fixture
def wsgi_inside_the_test_transaction(settings):
    """Django's test client does this itself; a bare WSGI call would close the test's connection."""
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    cache.clear()
    yield
    cache.clear()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# The documents take no input but a toolset's name in the path: there is nothing else to make invalid.
CASES = [
    (label, mode)
    for label in sorted(OPERATIONS)
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    if label.startswith("POST") or "{toolset}" in label or mode is schemathesis.GenerationMode.POSITIVE
]


@pytest.mark.django_db
@pytest.mark.parametrize(("label", "mode"), CASES)
def test_signin_endpoints_conform_to_their_description(label, mode, wsgi_inside_the_test_transaction, capsys):
    operation = OPERATIONS[label]
    statuses: Counter[int] = Counter()

    @hypothesis_settings(
        max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def call_and_check(case):
        response = case.call_and_validate(base_url="http://localhost", excluded_checks=[positive_data_acceptance])
        statuses[response.status_code] += 1

    call_and_check()

    with capsys.disabled():
        print(f"\nschemathesis {mode.value} {label}: statuses {dict(sorted(statuses.items()))}")
    assert statuses.total() > 0
    assert not any(status >= 500 for status in statuses)
