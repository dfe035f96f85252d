"""What each credential type holds, and the capability it becomes.

The plaintext shapes are closed pydantic models: anything else is refused before
it is encrypted, so the broker never meets a blob it cannot turn into headers.
Validation errors name fields, never values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from runner import wording
from runner.bound import field_errors
from runner.capabilities import AuthCapability, BasicAuth, BearerAuth

# What an HTTP header can carry. A token travels as `Authorization: Bearer <token>`, where a
# header holds visible ASCII only (httpx refuses anything else, so a stored `ghp_éx` would fail
# at every call): tokens are visible ASCII without spaces. Passwords go through Basic (base64)
# but are held to ASCII too, spaces allowed (some providers print app passwords in groups),
# so a credential that cannot work is refused when it is entered, not when it is first used.
# The same patterns go into the OpenAPI schema (ECMA-262 reads them alike).
KEY_PATTERN = r"^[\x21-\x7e]+$"
APP_CREDENTIAL_PATTERN = r"^[\x20-\x7e]+$"
USERNAME_PATTERN = r"^[^\x00-\x1f\x7f:]+$"
_TOKEN_CHARACTERS = re.compile(KEY_PATTERN)
_PASSWORD_CHARACTERS = re.compile(APP_CREDENTIAL_PATTERN)
_USERNAME_CHARACTERS = re.compile(USERNAME_PATTERN)
KEY_CHARACTERS_MESSAGE = (
    "must contain only ASCII letters, digits and symbols, without spaces: HTTP headers cannot carry other "
    "characters; copy the key again exactly as the provider shows it"
)
APP_CREDENTIAL_CHARACTERS_MESSAGE = (
    "must contain only ASCII letters, digits, symbols and spaces: HTTP authentication cannot carry other "
    "characters; copy the password again exactly as the provider shows it"
)
USERNAME_CHARACTERS_MESSAGE = "must not contain ':' or control characters: HTTP Basic authentication cannot carry them"


def _only(pattern: re.Pattern[str], message: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise PydanticCustomError("credential_characters", message)
        return value

    return AfterValidator(check)


Token = Annotated[
    str, StringConstraints(min_length=1, max_length=4096), _only(_TOKEN_CHARACTERS, KEY_CHARACTERS_MESSAGE)
]
Password = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    _only(_PASSWORD_CHARACTERS, APP_CREDENTIAL_CHARACTERS_MESSAGE),
]
Username = Annotated[
    str, StringConstraints(min_length=1, max_length=256), _only(_USERNAME_CHARACTERS, USERNAME_CHARACTERS_MESSAGE)
]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)


class ApiKeyCredentials(_Closed):
    api_key: Token


class AppPasswordCredentials(_Closed):
    username: Username
    password: Password


class OAuth2Credentials(_Closed):
    access_token: Token
    refresh_token: Token | None = None
    token_type: str = Field(default="Bearer", max_length=32)


SHAPES: dict[str, type[_Closed]] = {
    "api_key": ApiKeyCredentials,
    "app_password": AppPasswordCredentials,
    "oauth2": OAuth2Credentials,
}
# Types a tenant may enter by hand (UI and REST); OAuth tokens come from the OAuth flow.
MANUAL_TYPES = ("api_key", "app_password")


class CredentialsInvalid(ValueError):
    """The credentials do not have their type's shape; `errors` are (path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("credentials do not match the credential type")
        self.errors = errors


def credentials_validate(credential_type: str, credentials: Any) -> dict[str, Any]:
    """The credentials as the plain dict that gets encrypted, or CredentialsInvalid."""
    shape = SHAPES.get(credential_type)
    if shape is None:
        raise CredentialsInvalid([("credential_type", "this credential type cannot be stored here")])
    if not isinstance(credentials, Mapping):
        raise CredentialsInvalid([("credentials", wording.must_be(wording.OBJECT, credentials))])
    try:
        model = shape.model_validate(dict(credentials))
    except ValidationError as exc:
        names = list(shape.model_fields)
        errors = field_errors(
            exc,
            known_names=frozenset(names),
            unknown_message=f"unknown field; {credential_type} credentials take: {', '.join(names)}",
        )
        raise CredentialsInvalid(
            [(".".join(part for part in ("credentials", error.path) if part), error.message) for error in errors]
        ) from None
    return model.model_dump(exclude_none=True)


def capability_for(credential_type: str, credentials: Mapping[str, Any]) -> AuthCapability:
    """The AuthCapability a tool receives for these (already validated) credentials."""
    if credential_type == "api_key":
        return BearerAuth(credentials["api_key"])
    if credential_type == "app_password":
        return BasicAuth(credentials["username"], credentials["password"])
    if credential_type == "oauth2":
        return BearerAuth(credentials["access_token"])
    raise ValueError(f"no capability for credential type {credential_type!r}")
