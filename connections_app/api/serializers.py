"""Input and output shapes of the connections and grants API (docs/api.md).

Input serializers bound types and sizes; what may be stored or granted is the
services' to decide. `credentials` is write-only: no output serializer has it,
and no error message carries a value, only the rule that failed.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from connections_app.credentials import APP_CREDENTIAL_PATTERN, KEY_PATTERN, MANUAL_TYPES, USERNAME_PATTERN
from connections_app.models import Connection
from connections_app.services import MAX_SCOPE_LENGTH, MAX_SCOPES
from core.api.serializers import JSONObjectField, StrictCharField, StrictInputSerializer, StrictRegexField
from policies_app.keys import CONSENT_CODE_PATTERN
from policies_app.services import CONSENT_CODE_REFUSED

MAX_PROVIDER_LENGTH = 64
MAX_LABEL_LENGTH = 100
MAX_GRANT_CONNECTIONS = 100
MAX_SERVICE_ACCOUNT_REFERENCE_LENGTH = 100


def _datetime_field(help_text: str) -> serializers.DateTimeField:
    return serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        error_messages={"invalid": "must be an ISO 8601 date-time"},
        help_text=help_text,
    )


class UUIDReferenceField(serializers.UUIDField):
    """A UUID written as a string; DRF's UUIDField would also take an integer."""

    default_error_messages = {"invalid": "must be a UUID"}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _string(pattern: str, max_length: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": pattern}


# The shapes credentials_validate enforces, per credential type, for the OpenAPI schema.
CREDENTIAL_SCHEMAS: dict[str, dict[str, Any]] = {
    "api_key": {"api_key": _string(KEY_PATTERN, 4096)},
    "app_password": {"username": _string(USERNAME_PATTERN, 256), "password": _string(APP_CREDENTIAL_PATTERN, 4096)},
}


@extend_schema_serializer(component_name="ConnectionCreate")
class ConnectionCreateInputSerializer(StrictInputSerializer):
    """`POST /api/v1/connections`: a hand-entered credential; OAuth connections come from the web UI."""

    SCHEMA_RULES = {
        "allOf": [
            {
                "if": {"properties": {"credential_type": {"const": credential_type}}},
                "then": {
                    "properties": {
                        "credentials": {
                            "type": "object",
                            "properties": fields,
                            "required": list(fields),
                            "additionalProperties": False,
                        }
                    }
                },
            }
            for credential_type, fields in CREDENTIAL_SCHEMAS.items()
        ]
    }

    provider = StrictCharField(
        max_length=MAX_PROVIDER_LENGTH, trim_whitespace=False, help_text="A provider the tools talk to, e.g. `github`."
    )
    credential_type = serializers.ChoiceField(
        choices=list(MANUAL_TYPES),
        error_messages={"invalid_choice": f"must be one of: {', '.join(MANUAL_TYPES)}"},
    )
    credentials = JSONObjectField(
        write_only=True,
        help_text=(
            'Write-only. `api_key`: `{"api_key"}`; `app_password`: `{"username", "password"}`. '
            "Stored encrypted, never returned."
        ),
    )
    scopes = serializers.ListField(
        child=StrictCharField(max_length=MAX_SCOPE_LENGTH, trim_whitespace=False),
        max_length=MAX_SCOPES,
        required=False,
        default=list,
        help_text="What the credential is allowed to do at the provider, for the tenant's records.",
    )
    expires_at = _datetime_field("When the credential stops working at the provider; null if never.")
    label = StrictCharField(
        max_length=MAX_LABEL_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="A name the tenant recognises the connection by.",
    )


@extend_schema_serializer(component_name="Connection")
class ConnectionOutputSerializer(serializers.Serializer):
    """A connection as the tenant sees it: references and bookkeeping, never the credentials."""

    id = serializers.UUIDField()
    provider = serializers.CharField()
    credential_type = serializers.ChoiceField(choices=Connection.CredentialType.choices)
    label = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    status = serializers.ChoiceField(
        source="status_now",
        choices=[*Connection.Status.choices, (Connection.EXPIRED, "Expired")],
        help_text=(
            "`expired`: an API key or app password past its expires_at; store a new one. `needs_attention`: its "
            "OAuth refreshes kept failing (the sweep stopped trying); reconnect it in the tenant UI."
        ),
    )
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="GrantCreate")
class GrantCreateInputSerializer(StrictInputSerializer):
    """`POST /api/v1/grants`: let one of the tenant's service accounts use some of its connections."""

    service_account = StrictCharField(
        max_length=MAX_SERVICE_ACCOUNT_REFERENCE_LENGTH,
        trim_whitespace=False,
        help_text="The service account's name or id, in the caller's tenant.",
    )
    connection_ids = serializers.ListField(
        child=UUIDReferenceField(),
        min_length=1,
        max_length=MAX_GRANT_CONNECTIONS,
        help_text="Ids of the tenant's active connections the account may use.",
    )
    expires_at = _datetime_field("When the grant stops authorising; null if never.")


@extend_schema_serializer(component_name="GrantServiceAccount")
class GrantServiceAccountOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


@extend_schema_serializer(component_name="Grant")
class GrantOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    service_account = GrantServiceAccountOutputSerializer()
    connection_ids = serializers.SerializerMethodField()
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_connection_ids(self, grant: Any) -> list[str]:
        """Sorted, so the same grant always reads the same (reads the prefetched rows when there are some)."""
        return sorted(str(connection.pk) for connection in grant.connections.all())


@extend_schema_serializer(component_name="DelegationTokenRequest")
class DelegationTokenInputSerializer(StrictInputSerializer):
    """`POST /api/v1/delegations/token`: the consent code, the PKCE verifier and the redirect URI it came back to."""

    code = StrictRegexField(
        CONSENT_CODE_PATTERN,
        max_length=43,
        trim_whitespace=False,
        error_messages={"invalid": CONSENT_CODE_REFUSED},  # the same answer as a well-formed code that is unknown
        help_text="The one-time code from the redirect.",
    )
    code_verifier = StrictCharField(
        max_length=128, trim_whitespace=False, help_text="The PKCE verifier whose S256 challenge started the consent."
    )
    redirect_uri = StrictCharField(
        max_length=500, trim_whitespace=False, help_text="The redirect_uri the consent request named, exactly."
    )


@extend_schema_serializer(component_name="DelegationToken")
class DelegationTokenOutputSerializer(serializers.Serializer):
    """The person's subject token, shown this once: send it as `X-Toolgate-Subject` beside the API key."""

    subject_token = serializers.CharField()
    delegation_id = serializers.UUIDField()
    subject_id = serializers.CharField(help_text="How audit rows name the person: `user:<id>`.")
    tools = serializers.ListField(child=serializers.CharField(), help_text="Empty: every tool the policy allows.")
    expires_at = serializers.DateTimeField(allow_null=True)
