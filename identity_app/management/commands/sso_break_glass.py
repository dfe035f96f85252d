"""`manage.py sso_break_glass <username> --base-url https://toolgate.example.com`: a one-time admin link.

The way in when local passwords are off and the identity provider is down or
misconfigured: it needs a shell on the server, makes the user a superuser, and
is written to the change log (issuing and using the link both are).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.urls import reverse

from identity_app.services import BREAK_GLASS_TTL_S, break_glass_issue


class Command(BaseCommand):
    help = "Create (or promote) a superuser and print a one-time sign-in link valid for 15 minutes."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--base-url", default="", help="This deployment's public URL, printed before the path.")

    def handle(self, *args: Any, username: str, base_url: str, **options: Any) -> None:
        token = break_glass_issue(username=username)
        path = reverse("identity:break-glass", args=[token])
        self.stdout.write(f"{base_url.rstrip('/')}{path}")
        self.stderr.write(f"one use, valid for {BREAK_GLASS_TTL_S // 60} minutes")
