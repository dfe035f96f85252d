"""The github tools: they reach GitHub's REST API only through capabilities.

The base URL is bound by the composition root (TOOLGATE_GITHUB_API_URL) and
the token by the broker; nothing here knows either. Error messages describe
GitHub's answer by status, never by echoing its body.

Each tool is stated once, as the request its arguments make (`GitHubRequest`);
`_definition` runs it on the loop (`execute`) and on the caller's own thread
(`execute_blocking`, the runner's fast path), checked the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import Field, field_validator

from runner.capabilities import HttpResponse, ToolCapabilities
from runner.contracts import ON_LOOP, ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.errors import ToolFailure
from runner.types import ConsequenceLevel, ToolEffect, ToolInvocationContext

PROVIDER = "github"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_STATUS_MESSAGES = {
    401: "GitHub rejected the connection's credentials",
    403: "GitHub refused access (permissions or rate limit)",
    404: "not found on GitHub, or not visible to this connection",
    410: "issues are disabled for this repository",
    422: "GitHub refused the request as invalid",
}


@dataclass(frozen=True, slots=True)
class GitHubRequest:
    """One call to GitHub's API: what to send, and the status that means it worked."""

    method: str
    path: str
    expected_status: int
    json_body: Any = None


def _definition(contract: ToolContract, describe: Callable[[Any], GitHubRequest]) -> ToolDefinition:
    """The tool whose `execute` and `execute_blocking` both send `describe(args)` with the connection's credentials.

    The blocking one answers ON_LOOP, having sent nothing, when the HTTP
    capability must keep httpx's own transport (a proxy, tracing).
    """

    async def execute(args: Any, ctx: ToolInvocationContext, caps: ToolCapabilities) -> dict:
        request = describe(args)
        http, auth = caps.require_http(), caps.require_auth()
        response = await http.request(request.method, request.path, headers=auth.headers(), json_body=request.json_body)
        return _check(response, request.expected_status)

    def execute_blocking(args: Any, ctx: ToolInvocationContext, caps: ToolCapabilities, deadline: float) -> Any:
        request = describe(args)
        http, auth = caps.require_http(), caps.require_auth()
        response = http.request_blocking(
            request.method, request.path, deadline=deadline, headers=auth.headers(), json_body=request.json_body
        )
        return ON_LOOP if response is None else _check(response, request.expected_status)

    return ToolDefinition(contract, execute, execute_blocking)


def _check(response: HttpResponse, expected: int) -> dict:
    if response.status_code != expected:
        message = _STATUS_MESSAGES.get(response.status_code, f"GitHub answered HTTP {response.status_code}")
        raise ToolFailure(message)
    body = response.json()
    if not isinstance(body, dict):
        raise ToolFailure("GitHub answered with an unexpected body")
    return body


class GetUserArgs(ToolArgs):
    pass


class GitHubUser(ToolOutput):
    login: str
    id: int
    name: str | None = None
    html_url: str


def get_user(args: GetUserArgs) -> GitHubRequest:
    return GitHubRequest("GET", "/user", 200)


class CreateIssueArgs(ToolArgs):
    owner: str = Field(min_length=1, max_length=100, description="Repository owner (user or organisation)")
    repo: str = Field(min_length=1, max_length=100, description="Repository name")
    title: str = Field(min_length=1, max_length=256)
    body: str = Field(default="", max_length=65_536)

    @field_validator("owner", "repo")
    @classmethod
    def _path_segment(cls, value: str) -> str:
        # One URL path segment: no slashes, and never "." or ".." that would walk the path.
        if not _NAME.match(value) or value in (".", ".."):
            raise ValueError("must be a GitHub owner or repository name")
        return value


class CreatedIssue(ToolOutput):
    number: int
    html_url: str


def create_issue(args: CreateIssueArgs) -> GitHubRequest:
    path = f"/repos/{quote(args.owner, safe='')}/{quote(args.repo, safe='')}/issues"
    return GitHubRequest("POST", path, 201, json_body={"title": args.title, "body": args.body})


GET_USER = _definition(
    ToolContract(
        name="github__get_user",
        description="Get the GitHub user behind the connection: login, id, name and profile URL.",
        input_model=GetUserArgs,
        output_model=GitHubUser,
        effect=ToolEffect.READ_ONLY,
        redaction_allowlist=("login", "id", "name", "html_url"),
        requires_connection=True,
        provider=PROVIDER,
        capabilities=frozenset({"http", "auth"}),
        consequence_level=ConsequenceLevel.LOW,
        requires_confirmation=False,
        tags=("github", "identity"),
        version="1.0.0",
    ),
    get_user,
)

CREATE_ISSUE = _definition(
    ToolContract(
        name="github__create_issue",
        description="Open an issue in a GitHub repository. Returns the issue number and URL.",
        input_model=CreateIssueArgs,
        output_model=CreatedIssue,
        effect=ToolEffect.EXTERNAL_SIDE_EFFECT,
        redaction_allowlist=("number", "html_url"),
        requires_connection=True,
        provider=PROVIDER,
        capabilities=frozenset({"http", "auth"}),
        # Publicly visible in someone else's repository and not undone by a retry: a person confirms each one.
        consequence_level=ConsequenceLevel.MEDIUM,
        requires_confirmation=True,
        tags=("github", "issues"),
        version="1.0.0",
    ),
    create_issue,
)
