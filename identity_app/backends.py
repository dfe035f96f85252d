"""Authentication backends: local passwords that a deployment can switch off, and single sign-on sessions.

TOOLGATE_LOCAL_LOGIN=false turns every password form off at its root: the
password backend then authenticates nobody, whatever form or view asks. A
session opened by single sign-on names `SingleSignOnBackend`, which checks no
password at all; it only loads the session's user, so it keeps working when
passwords are off.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest

SSO_BACKEND = "identity_app.backends.SingleSignOnBackend"


class LocalPasswordBackend(ModelBackend):
    """Django's username and password check, only while local login is on."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if not settings.TOOLGATE_LOCAL_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class SingleSignOnBackend(ModelBackend):
    """Loads the users identity_app logged in; never authenticates anyone by credentials."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        return None
