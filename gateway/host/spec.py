"""What a stdio server is, as the worker sends it to the MCP host in one request header.

The host holds no database credentials and no key ring, so it cannot read server
rows or open their sealed `--secret-env` values itself: the web and worker
processes, which can, send the opened `ServerConfig` with each request they
already make (`X-Toolgate-Spec`). It is serialised from the dataclass's fields
by pydantic, so a field added to `ServerConfig` travels with no code of its own,
and decoded strictly: unknown or missing fields, wrong types, an oversized header
or anything but base64url of JSON are refused.

Not sealed, by choice. The header travels on the same channel as the
connection's credential header: loopback (or the stack's private network shared
by web, worker and host only), authenticated by the host's bearer token, which
is checked before the header is read. Sealing it with a key of its own would add
no protection against the only parties able to send it: whoever holds the token
is web, worker or the host itself, and web and worker could already register any
server in the database; the host would need the opening key, so a compromised
host would hold it too. A sealed spec would also add a key to distribute and
rotate beside the token. The values are secrets all the same: never logged on
either side, never in a repr (`ServerConfig`'s and `UpstreamTarget`'s hide them).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from functools import lru_cache

from pydantic import ConfigDict, TypeAdapter, ValidationError

from gateway.host.sandbox import Bind

SPEC_HEADER = "x-toolgate-spec"
# Bounded: a server's command, environment and secrets fit in a few KiB; an HTTP server refuses far larger
# header blocks anyway, and the host decodes nothing bigger than this.
MAX_SPEC_CHARS = 16384
SLUG = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class SpecInvalid(ValueError):
    """The spec header cannot be used; the message says why and never echoes what was sent."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """What the host needs of one stdio server row (secrets opened, never logged)."""

    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)

    slug: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    secrets: tuple[tuple[str, str], ...]
    provider: str
    credential_env: str
    allowed_hosts: tuple[str, ...] = ()
    trusted_unsandboxed: bool = False
    npm_package: str = ""  # NAME@VERSION installed at add (its programs are first on the child's PATH)
    binds: tuple[Bind, ...] = ()  # folders bound into the child's sandbox
    pip_package: str = ""  # NAME==VERSION installed at add into a virtualenv

    def __repr__(self) -> str:
        return f"ServerConfig({self.slug})"


_ADAPTER: TypeAdapter[ServerConfig] = TypeAdapter(ServerConfig)


def encode_spec(config: ServerConfig) -> str:
    """The header's value: base64url of the config's JSON (ASCII, so any HTTP stack carries it)."""
    value = base64.urlsafe_b64encode(_ADAPTER.dump_json(config)).decode("ascii")
    if len(value) > MAX_SPEC_CHARS:
        raise SpecInvalid(
            f"stdio server {config.slug}: its command, environment and secrets take {len(value)} characters "
            f"encoded, more than the {MAX_SPEC_CHARS} the MCP host accepts; shorten them"
        )
    return value


@lru_cache(maxsize=256)
def decode_spec(value: bytes) -> ServerConfig:
    """The config a header carries, checked field by field; SpecInvalid otherwise.

    Cached by the header's bytes: the worker sends the same value with every call
    of a server (until the server's row changes), so decoding costs one lookup.
    """
    if not value:
        raise SpecInvalid("the request carries no server spec (X-Toolgate-Spec); the caller must send it")
    if len(value) > MAX_SPEC_CHARS:
        raise SpecInvalid(f"the server spec is larger than {MAX_SPEC_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(_ascii(value))
    except (binascii.Error, ValueError):
        raise SpecInvalid("the server spec is not base64url") from None
    try:
        config = _ADAPTER.validate_json(raw)
    except ValidationError as exc:
        where = sorted({".".join(map(str, error["loc"])) or "(whole)" for error in exc.errors(include_input=False)})
        raise SpecInvalid(f"the server spec is malformed at: {', '.join(where[:5])}") from None
    if not SLUG.match(config.slug):
        raise SpecInvalid("the server spec's slug is not a server slug")
    if not config.command or not all(config.command):
        raise SpecInvalid("the server spec has an empty command")
    if config.provider and not config.credential_env:
        raise SpecInvalid("the server spec names a provider but no credential variable")
    return config


def _ascii(value: bytes) -> bytes:
    """Only the base64url alphabet: `urlsafe_b64decode` alone would skip other bytes silently."""
    if not re.fullmatch(rb"[A-Za-z0-9_-]*={0,2}", value):
        raise ValueError("not base64url")
    return value
