"""A person's browser on the portal, over a live server's socket (their session cookie, real CSRF)."""

from __future__ import annotations

import re
from typing import Any

import httpx
from django.test import Client as DjangoClient


class Browser:
    """A person's browser on the portal: their own session cookie, the page's CSRF token on each form.

    Each request has a client of its own, closed when it is answered, and the cookies live on in the
    browser: a test that keeps or drops a browser leaves no socket behind.
    """

    def __init__(self, base_url: str, user: Any) -> None:
        django = DjangoClient()
        django.force_login(user)
        self.base_url = base_url
        self.cookies = httpx.Cookies({"sessionid": django.cookies["sessionid"].value})

    def _send(self, method: str, url: str, **options: Any) -> httpx.Response:
        with httpx.Client(base_url=self.base_url, cookies=self.cookies) as http:
            response = http.request(method, url, **options)
            self.cookies.update(http.cookies)
        return response

    def open(self, url: str) -> httpx.Response:
        return self._send("GET", url)

    def post(self, url: str, data: dict[str, Any]) -> httpx.Response:
        return self._send("POST", url, data=data)

    def press(self, url: str, decision: str) -> httpx.Response:
        page = self.open(url)
        assert page.status_code == 200, page.text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token is not None, "the form carries a CSRF token"
        return self.post(url, {"csrfmiddlewaretoken": token.group(1), "decision": decision})
