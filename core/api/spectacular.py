"""The one place that reaches past drf-spectacular's public API (drf-spectacular 0.30.0, pinned).

An OpenAPI extension that only adds to the schema drf-spectacular would build anyway (NUL-free strings,
`additionalProperties: false` on strict input) needs that schema first, without the extension itself:
`AutoSchema._map_serializer_field` and `AutoSchema._map_serializer` with `bypass_extensions=True`, which
have no public twins. tests/arch/test_private_dependency_names.py pins the version and holds both names
to what this module takes them to mean.
"""

from __future__ import annotations

from typing import Any


def plain_field_schema(auto_schema: Any, field: Any, direction: Any) -> dict[str, Any]:
    """The schema drf-spectacular gives `field` when no extension is applied to it."""
    schema: dict[str, Any] = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
    return schema


def plain_serializer_schema(auto_schema: Any, serializer: Any, direction: Any) -> dict[str, Any]:
    """The schema drf-spectacular gives `serializer` when no extension is applied to it."""
    schema: dict[str, Any] = auto_schema._map_serializer(serializer, direction, bypass_extensions=True)
    return schema
