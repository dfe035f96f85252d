"""Upstream resources, resource templates and prompts: canonical form, hashes, bounds and Toolgate's names.

Pure functions (no Django, no I/O), like `definitions.py` for tools, so discovery,
approval, policy checks and the inbound `/mcp` agree on what "the same resource"
or "the same prompt" means.

Names a caller sees:
- a prompt is `mcp__<slug>__<name>`, mapped exactly as a tool name is (`tool_id_for`);
- a resource is `toolgate://<slug>/<upstream URI, percent-encoded>`: the slug is the
  authority, the upstream URI is the path with every character outside a small safe
  set (and `%` itself) escaped, so `upstream_uri_of` gives back the exact upstream
  URI and two upstreams' URIs never meet;
- a resource template is `toolgate://<slug>/<upstream URI template>` with the same escaping
  of its literal text and its `{...}` expressions kept as they are, so a client expands it
  as it would the upstream's. A read of a URI that no resource names is matched against the
  Toolgate templates (RFC 6570 matching, the SDK's `UriTemplate`), and the values it
  carries are expanded into the upstream's own template: what the upstream is asked for is
  always what its template makes of those values.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from mcp.shared.path_security import contains_path_traversal
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from gateway.hidden_characters import is_hidden_character, visible_text
from gateway.upstream.definitions import DefinitionRefused, DiscoveryBounds, safe_label, tool_id_for
from runner.schema import canonical_json

RESOURCE = "resource"
PROMPT = "prompt"
TEMPLATE = "template"  # a resource template: read as resources are, allowed by `allowed_resources`
KINDS = (RESOURCE, PROMPT, TEMPLATE)
RESOURCE_SCHEME = "toolgate"
MAX_URI_CHARS = 2000
MAX_PROMPT_ARGUMENTS = 64
MAX_FEATURES = 500  # resources, and prompts, per server listing
# Characters kept as they are in the mapped path: readable URIs, nothing that ends the path (`?`, `#`)
# and never `%`, so unquoting gives the upstream URI back exactly.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
# The reviewed fields of a listed resource and prompt: what an operator pins.
RESOURCE_FIELDS = ("uri", "name", "title", "description", "mimeType", "size", "annotations", "icons")
PROMPT_FIELDS = ("name", "title", "description", "arguments", "icons")
TEMPLATE_FIELDS = ("uriTemplate", "name", "title", "description", "mimeType", "annotations", "icons")
FIELDS = {RESOURCE: RESOURCE_FIELDS, PROMPT: PROMPT_FIELDS, TEMPLATE: TEMPLATE_FIELDS}
KEY_FIELD = {RESOURCE: "uri", PROMPT: "name", TEMPLATE: "uriTemplate"}
_TEXT_FIELDS = ("title", "description")
_EXPRESSION = re.compile(r"(\{[^{}]*\})")


def resource_uri_for(slug: str, upstream_uri: str) -> str:
    """`toolgate://<slug>/<escaped upstream URI>`: what callers list, read and policies match."""
    return f"{RESOURCE_SCHEME}://{slug}/{quote(upstream_uri, safe=_PATH_SAFE)}"


def resource_prefix(slug: str) -> str:
    """What every resource URI of one server starts with: a policy's `toolgate://<slug>/*` allows them all."""
    return f"{RESOURCE_SCHEME}://{slug}/"


def split_resource_uri(uri: str) -> tuple[str, str] | None:
    """(slug, upstream URI) of a Toolgate resource URI, or None when it is not one."""
    head = f"{RESOURCE_SCHEME}://"
    if not uri.startswith(head):
        return None
    slug, sep, rest = uri[len(head) :].partition("/")
    if not sep or not slug or not rest:
        return None
    return slug, unquote(rest)


def template_name_for(slug: str, upstream_template: str) -> str:
    """`toolgate://<slug>/<template>`: literal text escaped as resource URIs are, `{...}` expressions kept."""
    parts = _EXPRESSION.split(upstream_template)
    mapped = "".join(part if index % 2 else quote(part, safe=_PATH_SAFE) for index, part in enumerate(parts))
    return resource_prefix(slug) + mapped


def template_problem(upstream_template: str) -> str | None:
    """Why Toolgate cannot serve reads through this template (its name, mapped, must parse too), or None."""
    try:
        UriTemplate.parse(upstream_template)
        UriTemplate.parse(template_name_for("s", upstream_template))
    except InvalidUriTemplate as invalid:
        return str(invalid)[:200]
    return None


def template_read_uri(*, toolgate_template: str, upstream_template: str, uri: str) -> str | None:
    """The upstream URI a read of `uri` stands for through this template, or None when it does not match.

    The values are matched out of Toolgate's name for the template and expanded into the
    upstream's own, so each is encoded as the upstream's template encodes it. A value that
    climbs out of a path (`..`) or holds a control character matches nothing.
    """
    try:
        values = UriTemplate.parse(toolgate_template).match(uri, max_uri_length=MAX_URI_CHARS)
        if values is None:
            return None
        for value in values.values():
            for item in [value] if isinstance(value, str) else value:
                if contains_path_traversal(item) or any(ord(char) < 0x20 or is_hidden_character(char) for char in item):
                    return None
        expanded = UriTemplate.parse(upstream_template).expand(values)
    except (InvalidUriTemplate, TypeError):
        return None
    return expanded if len(expanded) <= MAX_URI_CHARS else None


def prompt_name_for(slug: str, upstream_name: str) -> str:
    """`mcp__<slug>__<name>`, the tools' mapping (names outside the alphabet get a hash suffix)."""
    return tool_id_for(slug, upstream_name)


def feature_ident(kind: str, slug: str, key: str) -> str:
    """A short id (at most 64 characters) for audit rows and budgets: the prompt's name, or a resource's mapping."""
    if kind == PROMPT:
        return prompt_name_for(slug, key)
    return tool_id_for(slug, f"{kind}:{key}")


def canonical_feature(kind: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The reviewed fields, absent ones left out, hidden characters written out as `[U+XXXX]`."""
    definition = {key: raw[key] for key in FIELDS[kind] if raw.get(key) is not None}
    for key in _TEXT_FIELDS:
        if isinstance(definition.get(key), str):
            definition[key] = visible_text(definition[key])
    if kind == PROMPT and isinstance(definition.get("arguments"), list):
        definition["arguments"] = [
            {**argument, "description": visible_text(argument["description"])}
            if isinstance(argument, Mapping) and isinstance(argument.get("description"), str)
            else argument
            for argument in definition["arguments"]
        ]
    return definition


def feature_hash(kind: str, raw: Mapping[str, Any]) -> str:
    """sha256 hex of the kind and the canonical definition: equal hashes, equal definitions."""
    return hashlib.sha256(canonical_json({"kind": kind, **canonical_feature(kind, raw)})).hexdigest()


def feature_key(kind: str, raw: Mapping[str, Any]) -> str:
    """What identifies a listed entry upstream: a resource's URI, a template's URI template, a prompt's name."""
    return str(raw.get(KEY_FIELD[kind]))


def check_feature(kind: str, raw: Mapping[str, Any], bounds: DiscoveryBounds) -> None:
    """Refuse an entry over the bounds, with hidden characters in its key, or malformed."""
    key = raw.get(KEY_FIELD[kind])
    limit = 512 if kind == PROMPT else MAX_URI_CHARS
    if not isinstance(key, str) or not key or len(key) > limit:
        raise DefinitionRefused(f"a listed {kind} has no usable {KEY_FIELD[kind]}")
    label = f"{kind} {safe_label(key)}"
    if any(is_hidden_character(char) or char == "\x00" for char in key):
        raise DefinitionRefused(f"{label}: it contains invisible or control characters")
    encoded = canonical_json(canonical_feature(kind, raw))
    if b"\\u0000" in encoded:
        raise DefinitionRefused(f"{label}: the definition contains NUL characters")
    if len(encoded) > bounds.max_schema_bytes:
        raise DefinitionRefused(f"{label}: definition over {bounds.max_schema_bytes} bytes")
    for field in _TEXT_FIELDS:
        value = raw.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > bounds.max_description_chars):
            raise DefinitionRefused(f"{label}: {field} over {bounds.max_description_chars} characters")
    if kind == PROMPT:
        arguments = raw.get("arguments") or []
        if not isinstance(arguments, list) or len(arguments) > MAX_PROMPT_ARGUMENTS:
            raise DefinitionRefused(f"{label}: arguments must be a list of at most {MAX_PROMPT_ARGUMENTS}")
        if not all(isinstance(argument, Mapping) and isinstance(argument.get("name"), str) for argument in arguments):
            raise DefinitionRefused(f"{label}: every argument must be an object with a string name")


def prompt_argument_problem(definition: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why these arguments do not fit the pinned prompt (unknown, missing required, not strings), or None."""
    declared = {str(argument["name"]): bool(argument.get("required")) for argument in definition.get("arguments") or []}
    unknown = sorted(set(arguments) - set(declared))
    if unknown:
        return f"unknown argument {unknown[0]!r}; the prompt takes: {', '.join(sorted(declared)) or 'none'}"
    missing = sorted(name for name, required in declared.items() if required and name not in arguments)
    if missing:
        return f"missing required argument {missing[0]!r}"
    if not all(isinstance(value, str) for value in arguments.values()):
        return "prompt arguments must be strings"
    return None
