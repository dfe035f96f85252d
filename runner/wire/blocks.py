"""Content blocks (MCP's shape, `ToolExecResult.content`) as parts of a model format's tool result.

What a tool answered reaches the model as it was sent: text as text, images
as the format's image parts where it has them. A block a format cannot carry
(audio, binary resources, images in Chat Completions' tool messages) becomes
a short text saying what it was, never its bytes as text; a resource link is
its fields as JSON (uri, name, ...), which a model can read and act on.

Standard library and the runner package only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from runner.types import ErrorCode, ToolExecResult
from runner.wording import refusal_for_model

# The image types the Messages API accepts in an image block.
ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def answer_payload(
    result: ToolExecResult, part: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> str | list[dict[str, Any]]:
    """What answers one call in every format: its blocks as the format's parts, else its value or error as JSON text.

    `part` writes one content block as the format's own part; errors are
    answered too, so the model can correct itself instead of the run halting.
    """
    if answers_with_blocks(result):
        return [part(block) for block in result.content or ()]
    if result.ok:
        return json.dumps(result.value)
    return error_text(result)


def answers_with_blocks(result: ToolExecResult) -> bool:
    """The call answered content blocks: an upstream's result, or a tool's own error for the model."""
    return result.content is not None and (result.ok or result.error_code is ErrorCode.TOOL_ERROR)


def block_text(block: Mapping[str, Any]) -> str:
    """One block as text, for a format (or a block type) without a part of its own."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, Mapping) else {}
        if isinstance(resource.get("text"), str):
            return str(resource["text"])
        return f"[embedded resource {resource.get('uri', '')} ({resource.get('mimeType', 'binary')}): not shown here]"
    if kind in ("image", "audio"):
        return f"[{kind} ({block.get('mimeType', 'unknown type')}): this format cannot show it]"
    return json.dumps(dict(block), ensure_ascii=False)


def is_image(block: Mapping[str, Any]) -> bool:
    return (
        block.get("type") == "image" and isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str)
    )


def error_text(result: ToolExecResult) -> str:
    """A refused or failed call as the JSON text every format answers it with (field errors named)."""
    error_code = result.error_code.value if result.error_code is not None else None
    message = refusal_for_model(result.safe_message or "", result.errors)
    return json.dumps({"ok": False, "error_code": error_code, "message": message})
