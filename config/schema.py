"""The OpenAPI document's view: drf-spectacular's, with its documented `?format=` honoured."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

from core.errors import ERROR_STATUS, envelope
from runner.types import ErrorCode

SCHEMA_FORMATS = ("json", "yaml")


class SchemaView(SpectacularAPIView):
    """`/api/schema/?format=json` (or `yaml`) picks the schema's format, as drf-spectacular documents.

    The API switches DRF's `?format=` override off (URL_FORMAT_OVERRIDE: the parameter belongs
    to the tool catalog), so the schema view reads it itself; without this it answered YAML
    whatever was asked. Another format is refused in the contract's envelope, as JSON.
    """

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        requested = request.GET.get("format")
        if requested is not None and requested not in SCHEMA_FORMATS:
            message = f"unknown schema format; use one of: {', '.join(SCHEMA_FORMATS)}"
            body = envelope(
                ErrorCode.VALIDATION, "the request is invalid", errors=[{"path": "format", "message": message}]
            )
            return JsonResponse(body, status=ERROR_STATUS[ErrorCode.VALIDATION])
        return super().dispatch(request, *args, **kwargs)

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[BaseRenderer, str]:
        requested = request.query_params.get("format")
        if requested in SCHEMA_FORMATS:
            renderer = next(cls() for cls in self.renderer_classes if cls.format == requested)
            return renderer, renderer.media_type
        return super().perform_content_negotiation(request, force)
