"""OpenAPI pieces every /api/v1/ view documents alike: the error envelope, auth and throttle answers."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from core.api.serializers import ErrorOutputSerializer


def error_response(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorOutputSerializer, description=description)


def common_errors(scope: str) -> dict[int, OpenApiResponse]:
    """What any operation may answer before its own logic runs, for a key that needs `scope`."""
    return {
        401: error_response("`unauthenticated`: missing, unknown or revoked API key."),
        403: error_response(f"`forbidden`: the API key lacks the {scope} scope."),
        406: error_response("`not_acceptable`: this API answers application/json only."),
        429: error_response("`rate_limited`: too many requests from this service account."),
        500: error_response("`internal`: an unexpected error; nothing about it is disclosed."),
        503: error_response(
            "`unavailable_dependency`: the database or Redis cannot be reached; nothing ran. See Retry-After."
        ),
    }


RESPONSE_HEADERS = [
    OpenApiParameter(
        "WWW-Authenticate", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[401], description="`Bearer`"
    ),
    OpenApiParameter(
        "Retry-After",
        OpenApiTypes.INT,
        OpenApiParameter.HEADER,
        response=[429, 503],
        description="Seconds to wait before retrying.",
    ),
]

SUBJECT_HEADER = OpenApiParameter(
    "X-Toolgate-Subject",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "A person's subject token (`tgs_...`): the call is made on their behalf. It needs their active "
        "delegation to this service account and their permission for the tool, else `authz_denied` (403). "
        "Absent: the call is the service account's own."
    ),
)
