"""A view answering 502 as an upstream failure does: what logging a 5xx answer writes (test_logs.py)."""

from django.http import HttpRequest, JsonResponse
from django.urls import path


def bad_gateway(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"error_code": "upstream_error"}, status=502)


urlpatterns = [path("bad-gateway", bad_gateway)]
