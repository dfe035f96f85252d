"""Toolgate's URLs plus `POST /bench/bare`: a bare DRF echo with a token check.

The bare-DRF baseline `make bench` measures exec against: the same middleware, parser and
gunicorn as exec, with none of Toolgate's work (no key lookup, no runner, no audit).
"""

from __future__ import annotations

import hmac

from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as toolgate_urlpatterns

BARE_TOKEN = "bench-bare-token"  # noqa: S105 - a benchmark's fixed token, guarding nothing


class BareEchoView(APIView):
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()

    def post(self, request: Request) -> Response:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(header, f"Bearer {BARE_TOKEN}"):
            return Response({"error_code": "unauthenticated", "safe_message": "invalid token"}, status=401)
        return Response({"echo": request.data})


urlpatterns = [path("bench/bare", BareEchoView.as_view()), *toolgate_urlpatterns]
