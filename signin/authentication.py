"""A signed-in MCP client's access token (`tga_<prefix>_<secret>`) as the API's Bearer credential.

Accepted only at the resource it was issued for: `<base>/mcp`, or one
toolset's `<base>/mcp/t/<name>`. signin/apps.py adds `access_token_caller` to
the service-account authentication (`bearer_check_add`), so a token that is
wrong, expired or revoked gets the same 401 as a wrong API key.
"""

from __future__ import annotations

from django.http import HttpRequest

from policies_app.authentication import mcp_resource_url
from policies_app.selectors import Caller
from signin.services import caller_for_access_token, signin_grant_note_use

MCP_PATH = "/mcp"
MCP_TOOLSET_PREFIX = f"{MCP_PATH}/t/"


def access_token_caller(token: str, request: HttpRequest) -> Caller | None:
    """The Caller a signed-in client's access token stands for at this request's URL, None if it is not one."""
    # An API key never gets here with a well-formed token shape, so its path has no extra query.
    signed_in = caller_for_access_token(token=token, resources=mcp_resources_accepted(request))
    if signed_in is None:
        return None
    signin_grant_note_use(grant_id=signed_in.grant_id, last_used_at=signed_in.grant_last_used_at)
    return signed_in.caller


def mcp_resources_accepted(request: HttpRequest) -> tuple[str, ...]:
    """The resources a signed-in client's token may be bound to, to be accepted at this request's URL.

    A token for `<base>/mcp` (the whole catalog) is also accepted at every
    toolset endpoint: a toolset only narrows what that token already reaches.
    A token for one toolset is accepted at that toolset's URL only. Built from
    the URL alone, so the token check stays one query.
    """
    own = mcp_resource_url(request)
    if request.path.startswith(MCP_TOOLSET_PREFIX):
        return (request.build_absolute_uri(MCP_PATH), own)
    return (own,)
