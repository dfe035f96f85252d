"""A person's browser on the portal, over a live server's socket (their session cookie, real CSRF)."""

from __future__ import annotations

import re
from typing import Any

import httpx
from django.test import Client as DjangoClient


class Browser:
    """A person's browser on the portal: their own session cookie, the page's CSRF token on each form."""

    def __init__(self, base_url: str, user: Any) -> None:
        django = DjangoClient()
        django.force_login(user)
        self.http = httpx.Client(base_url=base_url, cookies={"sessionid": django.cookies["sessionid"].value})

    def open(self, url: str) -> httpx.Response:
        return self.http.get(url)

    def press(self, url: str, decision: str) -> httpx.Response:
        page = self.http.get(url)
        assert page.status_code == 200, page.text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token is not None, "the form carries a CSRF token"
        return self.http.post(url, data={"csrfmiddlewaretoken": token.group(1), "decision": decision})
