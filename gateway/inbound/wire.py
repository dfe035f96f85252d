"""Catalog specs and runner results in MCP's shapes (docs/mcp.md), and the list cursor.

Pure functions of their inputs: the same spec gives the same tool entry in
every process, which is what lets `tools/list` pages from different gunicorn
processes line up.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from runner.types import ErrorCode, ToolEffect, ToolExecResult, ToolSpec
from runner.wording import refusal_for_model
from tools_app.routing import CALL_ROUTING_FIELDS

META_PREFIX = "toolgate/"
TOOL_CALL_ID_META = "toolgate/tool_call_id"
# The out-of-band fields of `POST /api/v1/tools/exec` as tools/call carries them in params._meta: key -> field.
CALL_META_FIELDS: Mapping[str, str] = {
    TOOL_CALL_ID_META: "tool_call_id",
    **{f"{META_PREFIX}{name}": name for name in CALL_ROUTING_FIELDS},
}
ERROR_CODE_META = "toolgate/error_code"
APPROVAL_ID_META = "toolgate/approval_id"
RETRY_AFTER_META = "toolgate/retry_after_s"
ERRORS_META = "toolgate/errors"

# Hints, not guarantees (MCP's defaults are readOnly false, openWorld true): what the effect says.
_ANNOTATIONS: Mapping[ToolEffect, Mapping[str, bool]] = {
    ToolEffect.READ_ONLY: {"readOnlyHint": True},
    ToolEffect.STATE_CHANGE: {"readOnlyHint": False},
    ToolEffect.EXTERNAL_SIDE_EFFECT: {"readOnlyHint": False, "openWorldHint": True},
}
_CURSOR_VERSION = "v1"
# A value's JSON text block, compact; one encoder for every call (json.dumps with options builds one each time).
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def tool_entry(spec: ToolSpec) -> dict[str, Any]:
    """One entry of `tools/list`: the spec as the REST catalog has it, in MCP's names.

    An upstream tool's pinned title, icons and annotation hints pass on; the
    hints only ever get stricter (see `annotations`).
    """
    entry: dict[str, Any] = {"name": spec.name}
    if spec.title is not None:
        entry["title"] = spec.title
    entry.update(
        description=spec.description,
        inputSchema=dict(spec.input_schema),
        annotations=annotations(spec),
    )
    if spec.output_schema is not None:
        entry["outputSchema"] = dict(spec.output_schema)
    if spec.icons is not None:
        entry["icons"] = [dict(icon) for icon in spec.icons]
    # Tool metadata (consequence level, tags ...) has no MCP field: it travels in `_meta` under Toolgate's prefix.
    entry["_meta"] = {
        "toolgate/consequence_level": spec.consequence_level.value,
        "toolgate/requires_confirmation": spec.requires_confirmation,
        "toolgate/tags": list(spec.tags),
        "toolgate/version": spec.version,
    }
    return entry


def annotations(spec: ToolSpec) -> dict[str, Any]:
    """The upstream's hints (if any) with the effect's on top, never looser than either.

    `readOnlyHint` is true only when the effect is read_only and the upstream
    did not say false; `openWorldHint` is true whenever the effect reaches
    outside. The other hints (destructive, idempotent, title) are the
    upstream's, which Toolgate cannot vouch for and does not loosen.
    """
    merged = dict(spec.annotations or {})
    ours = _ANNOTATIONS[spec.effect]
    merged["readOnlyHint"] = bool(ours["readOnlyHint"]) and merged.get("readOnlyHint") is not False
    if ours.get("openWorldHint"):
        merged["openWorldHint"] = True
    return merged


def call_result(result: ToolExecResult) -> dict[str, Any]:
    """A `tools/call` result: the tool's blocks and structured content, or the refusal as `isError`.

    A tool that answered content blocks (an upstream MCP tool) is answered with
    those blocks as sent, and its structuredContent when it has one; a tool
    that answered a value, with the value as structuredContent and as JSON
    text. A tool's own error (`tool_error`) is `isError` with its own blocks.
    A refused or failed call is a result, not a JSON-RPC error: the call was
    understood, and the model reading `content` should learn why it failed
    (a validation refusal names each wrong argument in that text).
    """
    meta: dict[str, Any] = {TOOL_CALL_ID_META: result.tool_call_id} if result.tool_call_id else {}
    if result.ok:
        answer: dict[str, Any] = {
            "content": _blocks(result) if result.content is not None else [_json_block(result.value)],
        }
        if result.structured:
            answer["structuredContent"] = result.value
        return {**answer, "isError": False, "_meta": meta}
    code = str(result.error_code)
    meta[ERROR_CODE_META] = code
    if result.error_code is ErrorCode.TOOL_ERROR:
        return {
            "content": _blocks(result) or [{"type": "text", "text": result.safe_message or code}],
            "isError": True,
            "_meta": meta,
        }
    if result.approval_id is not None:
        meta[APPROVAL_ID_META] = result.approval_id
    if result.retry_after_s is not None:
        meta[RETRY_AFTER_META] = result.retry_after_s
    if result.errors:
        meta[ERRORS_META] = [{"path": error.path, "message": error.message} for error in result.errors]
    text = refusal_for_model(result.safe_message or code, result.errors)
    return {"content": [{"type": "text", "text": f"{code}: {text}"}], "isError": True, "_meta": meta}


def _blocks(result: ToolExecResult) -> list[dict[str, Any]]:
    return [dict(block) for block in result.content or ()]


def _json_block(value: Any) -> dict[str, Any]:
    return {"type": "text", "text": _TEXT_ENCODER.encode(value)}


def encode_cursor(after: str) -> str:
    """An opaque cursor naming the last tool of a page; the next page starts after it.

    A name, not an offset: a tool switched off between two pages shifts no
    other tool onto the wrong page, and no process has to remember anything.
    """
    raw = json.dumps([_CURSOR_VERSION, after], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> str | None:
    """The tool name a cursor points after, or None when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, after = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        return None
    if version != _CURSOR_VERSION or not isinstance(after, str):
        return None
    return after


def page_after(specs: Sequence[ToolSpec], after: str | None, size: int) -> tuple[list[ToolSpec], str | None]:
    """The page of name-sorted `specs` that follows `after`, and the cursor of the next page."""
    ordered = sorted(specs, key=lambda spec: spec.name)
    remaining = ordered if after is None else [spec for spec in ordered if spec.name > after]
    page = remaining[:size]
    next_cursor = encode_cursor(page[-1].name) if len(remaining) > size else None
    return page, next_cursor
