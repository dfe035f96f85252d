"""The connections and grants API: a tenant's connections and who may use them (scope `connections:manage`).

Each view validates its input, makes one service or selector call and shapes
the output; a refusal leaves as the service's `AppError` (or a DRF exception),
which the API's exception handler (core/api/handlers.py) turns into the contract's
envelope: no view translates errors by hand. Rows of other tenants are
answered exactly like rows that do not exist, so ids cannot be probed.

A key acts for the tenant, never for a person: personal connections (they
belong to their person, who grants them in the portal) are answered like rows
that do not exist here too, so a key can neither read, revoke nor grant one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import AuthenticationFailed, NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from connections_app.api.serializers import (
    ConnectionCreateInputSerializer,
    ConnectionOutputSerializer,
    DelegationTokenInputSerializer,
    DelegationTokenOutputSerializer,
    GrantCreateInputSerializer,
    GrantOutputSerializer,
)
from connections_app.models import Connection, ExecutionGrant
from connections_app.selectors import connection_get, connection_list, connections_of_tenant, grant_get, grant_list
from connections_app.services import connection_create, connection_revoke, grant_create, grant_revoke
from core.api.openapi import RESPONSE_HEADERS, common_errors, error_response
from core.api.pagination import StrictLimitOffsetPagination
from core.api.parser import validated_body
from core.api.serializers import PageQuerySerializer
from core.errors import AppError
from policies_app.authentication import INVALID_KEY_MESSAGE, ConnectionsManageScope, ToolsExecScope, request_caller
from policies_app.models import ServiceAccount, Tenant
from policies_app.selectors import service_account_for_tenant, subject_id_of, tenant_of_caller
from policies_app.services import consent_exchange

NO_SUCH_CONNECTION = "no such connection in this tenant"
NO_SUCH_SERVICE_ACCOUNT = "no such active service account in this tenant"
CONNECTION_REVOKED = "the connection is revoked"


# --- schema pieces shared by the operations ---------------------------------------------


COMMON_ERRORS = common_errors("connections:manage")
QUERY_ERRORS = {422: error_response("`validation`: a query parameter is invalid or unknown; `errors` says which.")}
BODY_ERRORS = {
    400: error_response(
        "`invalid_json`: the body is not a JSON object (or is empty, malformed, too deep, has duplicate keys)."
    ),
    413: error_response("`validation`: the body exceeds 64 KiB."),
    415: error_response("`unsupported_media_type`: send application/json."),
}
CONNECTION_ID = OpenApiParameter(
    "connection_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The connection's id."
)
GRANT_ID = OpenApiParameter("grant_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The grant's id.")
CONNECTION_NOT_FOUND = {
    404: error_response(
        "`not_found`: no such connection in this tenant (other tenants' ids and personal connections alike)."
    )
}
GRANT_NOT_FOUND = {404: error_response("`not_found`: no such grant in this tenant (other tenants' ids alike).")}
CONNECTION_EXAMPLE = OpenApiExample(
    "GitHub token",
    value={
        "provider": "github",
        "credential_type": "api_key",
        "credentials": {"api_key": "ghp_..."},
        "scopes": ["repo"],
        "expires_at": None,
        "label": "ci bot",
    },
    request_only=True,
)
GRANT_EXAMPLE = OpenApiExample(
    "one connection",
    value={"service_account": "agent", "connection_ids": ["4f6c2a9e-8d1b-4c3e-9a57-0b2d6e8f1a34"], "expires_at": None},
    request_only=True,
)


# --- helpers ------------------------------------------------------------------------------


class ConnectionsApiView(APIView):
    """Base of the connections and grants views: the connections:manage scope."""

    permission_classes = [ConnectionsManageScope]


def _caller_tenant(request: Request) -> Tenant:
    """The caller's tenant; a key whose tenant is gone is answered like any invalid key."""
    tenant = tenant_of_caller(caller=request_caller(request))
    if tenant is None:
        raise AuthenticationFailed(INVALID_KEY_MESSAGE)
    return tenant


def _grant_references(
    *, tenant: Tenant, service_account: str, connection_ids: Sequence[uuid.UUID]
) -> tuple[ServiceAccount, list[Connection]]:
    """The rows a grant request names, or an AppError naming each reference that fails.

    Missing and other tenants' references get the same message. The service
    checks the same rules again; this only says which field broke them.
    """
    errors: list[tuple[str, str]] = []
    account = service_account_for_tenant(tenant_id=tenant.pk, name_or_id=service_account)
    if account is None:
        errors.append(("service_account", NO_SUCH_SERVICE_ACCOUNT))
    found, _missing = connections_of_tenant(tenant=tenant, connection_ids=connection_ids, include_personal=False)
    by_id = {connection.pk: connection for connection in found}
    for index, pk in enumerate(connection_ids):
        connection = by_id.get(pk)
        if connection is None:
            errors.append((f"connection_ids.{index}", NO_SUCH_CONNECTION))
        elif connection.is_revoked:
            errors.append((f"connection_ids.{index}", CONNECTION_REVOKED))
    if errors or account is None:
        raise AppError("the grant names rows this tenant does not have", field_errors=errors)
    return account, found


# --- connections ---------------------------------------------------------------------------


class ConnectionListView(ConnectionsApiView):
    """The tenant's connections, and adding one by hand (an API key or an app password)."""

    pagination_class = StrictLimitOffsetPagination

    @extend_schema(
        operation_id="connections_list",
        summary="This tenant's connections, newest first",
        parameters=RESPONSE_HEADERS,
        responses={200: ConnectionOutputSerializer(many=True), **COMMON_ERRORS, **QUERY_ERRORS},
    )
    def get(self, request: Request) -> Response:
        PageQuerySerializer(data=request.query_params).is_valid(raise_exception=True)
        rows = connection_list(tenant=_caller_tenant(request), include_personal=False)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(ConnectionOutputSerializer(page, many=True).data)

    @extend_schema(
        operation_id="connections_create",
        summary="Store a credential as a new connection",
        request=ConnectionCreateInputSerializer,
        parameters=RESPONSE_HEADERS,
        responses={
            201: ConnectionOutputSerializer,
            **COMMON_ERRORS,
            **BODY_ERRORS,
            422: error_response(
                "`validation`: the request or the credentials are invalid; `errors` says where, never what."
            ),
        },
        examples=[CONNECTION_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, ConnectionCreateInputSerializer)
        connection = connection_create(
            tenant=_caller_tenant(request),
            provider=data["provider"],
            credential_type=data["credential_type"],
            credentials=data["credentials"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
            label=data["label"],
            created_by_service_account_id=request_caller(request).service_account_id,
        )
        return Response(ConnectionOutputSerializer(connection).data, status=status.HTTP_201_CREATED)


class ConnectionDetailView(ConnectionsApiView):
    """One connection of the tenant."""

    @extend_schema(
        operation_id="connections_retrieve",
        summary="One connection of this tenant",
        parameters=[CONNECTION_ID, *RESPONSE_HEADERS],
        responses={200: ConnectionOutputSerializer, **COMMON_ERRORS, **CONNECTION_NOT_FOUND},
    )
    def get(self, request: Request, connection_id: str) -> Response:
        return Response(ConnectionOutputSerializer(_connection_or_404(request, connection_id)).data)


class ConnectionRevokeView(ConnectionsApiView):
    """Revoke a connection: the broker refuses it from the next call on. Revoking again changes nothing."""

    @extend_schema(
        operation_id="connections_revoke",
        summary="Revoke a connection of this tenant",
        request=None,
        parameters=[CONNECTION_ID, *RESPONSE_HEADERS],
        responses={200: ConnectionOutputSerializer, **COMMON_ERRORS, **CONNECTION_NOT_FOUND},
    )
    def post(self, request: Request, connection_id: str) -> Response:
        connection = _connection_or_404(request, connection_id)
        connection_revoke(connection=connection)
        return Response(ConnectionOutputSerializer(connection).data)


def _connection_or_404(request: Request, connection_id: str) -> Connection:
    connection = connection_get(tenant=_caller_tenant(request), connection_id=connection_id, include_personal=False)
    if connection is None:
        raise NotFound(NO_SUCH_CONNECTION)
    return connection


# --- grants ----------------------------------------------------------------------------------


class GrantListView(ConnectionsApiView):
    """The tenant's grants, and granting a service account the use of connections."""

    pagination_class = StrictLimitOffsetPagination

    @extend_schema(
        operation_id="grants_list",
        summary="This tenant's grants, newest first",
        parameters=RESPONSE_HEADERS,
        responses={200: GrantOutputSerializer(many=True), **COMMON_ERRORS, **QUERY_ERRORS},
    )
    def get(self, request: Request) -> Response:
        PageQuerySerializer(data=request.query_params).is_valid(raise_exception=True)
        rows = grant_list(tenant_id=request_caller(request).tenant_id)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(GrantOutputSerializer(page, many=True).data)

    @extend_schema(
        operation_id="grants_create",
        summary="Let a service account use some of this tenant's connections",
        request=GrantCreateInputSerializer,
        parameters=RESPONSE_HEADERS,
        responses={
            201: GrantOutputSerializer,
            **COMMON_ERRORS,
            **BODY_ERRORS,
            422: error_response(
                "`validation`: the request is invalid, or names a service account or connection this tenant "
                "does not have (or a revoked one); `errors` says which field."
            ),
        },
        examples=[GRANT_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, GrantCreateInputSerializer)
        tenant = _caller_tenant(request)
        account, connections = _grant_references(
            tenant=tenant, service_account=data["service_account"], connection_ids=data["connection_ids"]
        )
        grant = grant_create(
            tenant=tenant,
            service_account=account,
            connections=connections,
            expires_at=data["expires_at"],
            created_by_service_account_id=request_caller(request).service_account_id,
        )
        return Response(GrantOutputSerializer(grant).data, status=status.HTTP_201_CREATED)


class GrantDetailView(ConnectionsApiView):
    """One grant of the tenant."""

    @extend_schema(
        operation_id="grants_retrieve",
        summary="One grant of this tenant",
        parameters=[GRANT_ID, *RESPONSE_HEADERS],
        responses={200: GrantOutputSerializer, **COMMON_ERRORS, **GRANT_NOT_FOUND},
    )
    def get(self, request: Request, grant_id: str) -> Response:
        return Response(GrantOutputSerializer(_grant_or_404(request, grant_id)).data)


class GrantRevokeView(ConnectionsApiView):
    """Revoke a grant: its connections are refused to the account from the next call on. Idempotent."""

    @extend_schema(
        operation_id="grants_revoke",
        summary="Revoke a grant of this tenant",
        request=None,
        parameters=[GRANT_ID, *RESPONSE_HEADERS],
        responses={200: GrantOutputSerializer, **COMMON_ERRORS, **GRANT_NOT_FOUND},
    )
    def post(self, request: Request, grant_id: str) -> Response:
        grant = _grant_or_404(request, grant_id)
        grant_revoke(grant=grant)
        return Response(GrantOutputSerializer(grant).data)


def _grant_or_404(request: Request, grant_id: str) -> ExecutionGrant:
    grant = grant_get(tenant_id=request_caller(request).tenant_id, grant_id=grant_id)
    if grant is None:
        raise NotFound("no such grant in this tenant")
    return grant


# --- delegations: the consent redirect's code exchange -------------------------------------------


class DelegationTokenView(APIView):
    """`POST /api/v1/delegations/token`: a service trades a person's one-time consent code for their subject token.

    The code comes back to the service's registered redirect URI after the
    person approved (`GET /delegations/consent`). The exchange needs the
    service's own API key (the account the person approved), the same
    redirect_uri and the PKCE verifier of the challenge it sent. A code works
    once; used again, it revokes the delegation it created.
    """

    permission_classes = [ToolsExecScope]

    @extend_schema(
        operation_id="delegations_token",
        summary="Exchange a consent code for a person's subject token",
        request=DelegationTokenInputSerializer,
        parameters=RESPONSE_HEADERS,
        responses={
            200: DelegationTokenOutputSerializer,
            **common_errors("tools:exec"),
            **BODY_ERRORS,
            422: error_response(
                "`validation`: the body is invalid, or the code is unknown, expired, already used, or was "
                "issued for another redirect_uri, caller or PKCE challenge (one message for all)."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, DelegationTokenInputSerializer)
        delegation, token = consent_exchange(  # a refused code is an AppError (422, at `code`)
            service_account_id=request_caller(request).service_account_id,
            code=data["code"],
            code_verifier=data["code_verifier"],
            redirect_uri=data["redirect_uri"],
        )
        return Response(
            DelegationTokenOutputSerializer(
                {
                    "subject_token": token,
                    "delegation_id": delegation.pk,
                    "subject_id": subject_id_of(delegation.user_id),
                    "tools": delegation.tools,
                    "expires_at": delegation.expires_at,
                }
            ).data,
            headers={"Cache-Control": "no-store"},
        )
