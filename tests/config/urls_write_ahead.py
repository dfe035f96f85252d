"""An API view that sends a write ahead and answers 200 at once: what the API's middleware makes of its failure."""

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import path


def write_ahead(request: HttpRequest) -> JsonResponse:
    connection.write_ahead("INSERT INTO write_ahead_rows (id, note) VALUES (%s, %s)", [1, "from the view"])
    return JsonResponse({"written": True})


urlpatterns = [path("api/v1/write-ahead", write_ahead)]
