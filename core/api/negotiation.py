"""Content negotiation that answers the headers nearly every API client sends without parsing them.

DRF's DefaultContentNegotiation parses the Accept header into media types and
orders them by precedence, and parses the Content-Type against each parser's,
on every request: on the exec endpoint's hot path that was the largest piece
of DRF's own per-request work. An absent Accept, `*/*`, or exactly the first
renderer's media type can only select the first renderer; a Content-Type that
is exactly the first parser's media type can only select that parser. Those
are answered at once, as DRF's negotiation answers them
(tests/tools_app/test_api_exec_negotiation.py holds both to the same answers).
Any other value, and a format suffix, goes through DRF's negotiation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.http import HttpResponse
from django.http.response import HttpResponseBase
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

# Accept values under which any renderer list selects its first renderer with its own media type.
ANY_MEDIA_TYPE = frozenset({"", "*/*"})


class PlainAcceptNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with the plain Accept and Content-Type values answered directly (a view opts in)."""

    def select_parser(self, request: Any, parsers: Sequence[BaseParser]) -> BaseParser | None:
        if parsers and request.content_type == parsers[0].media_type:
            return parsers[0]
        return super().select_parser(request, parsers)  # type: ignore[no-any-return]

    def select_renderer(
        self, request: Any, renderers: Sequence[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        plain = self.plain_choice(request, renderers, format_suffix)
        if plain is not None:
            return plain
        return super().select_renderer(request, renderers, format_suffix)  # type: ignore[no-any-return]

    def plain_choice(
        self, request: Any, renderers: Sequence[BaseRenderer], format_suffix: str | None
    ) -> tuple[BaseRenderer, str] | None:
        """DRF's choice when it needs no parsing: the first renderer, for an Accept that any renderer meets."""
        if format_suffix or not renderers or self.settings.URL_FORMAT_OVERRIDE:
            return None
        accept = request.META.get("HTTP_ACCEPT", "")
        first = renderers[0]
        if accept in ANY_MEDIA_TYPE or accept == first.media_type:
            return first, first.media_type
        return None


def plain_json_answer(
    request: Request, body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> HttpResponseBase:
    """`Response(body, status, headers)` as DRF would render it, rendered at once when the negotiated type has
    no parameters.

    A Response is a template response: DRF gives it a renderer context, then
    Django's handler renders it after the view. For the plain type those steps
    add nothing to the bytes (JSONRenderer reads only an `indent` parameter of
    the type), so the renderer DRF chose renders the body here, into a plain
    response with the same Content-Type. A type with parameters
    (`application/json; indent=4`) or a renderer with a charset gets the
    Response as before.
    """
    renderer = request.accepted_renderer
    media_type = request.accepted_media_type
    if media_type != renderer.media_type or renderer.charset is not None:
        return Response(body, status=status, headers=headers)
    return HttpResponse(renderer.render(body, media_type, {}), status=status, headers=headers, content_type=media_type)
