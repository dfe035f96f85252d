"""A NUL character in a URL outside the API answers 400 before any view queries the database."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tools_app/tool/%00/change/",  # a string primary key: PostgreSQL answered this with a 500
        "/admin/tools_app/toolinvocation/?tool_id=%00",
        "/admin/tools_app/toolinvocation/?q=a%00b",
        "/activity/?run=%00",
        "/accounts/login/?next=%00",
        "/admin/?%00=1",
    ],
)
def test_a_nul_in_a_url_answers_400_to_an_operator(client, url, django_assert_num_queries):
    client.force_login(User.objects.create_superuser("op", "op@example.com", "a-long-password-1"))

    with django_assert_num_queries(0):
        response = client.get(url)

    assert response.status_code == 400
    assert response.content == b"URLs must not contain NUL characters (%00)."


def test_api_paths_are_left_to_the_api_which_answers_its_envelope(client):
    response = client.get("/api/v1/invocations/%00")

    assert response.status_code == 401  # the API's own gate, not this middleware
    assert response.json()["error_code"] == "unauthenticated"
