"""The "Sign in with ..." buttons both sign-in pages show, and whether they show the password form."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.conf import settings
from django.urls import reverse

from identity_app.selectors import providers_for_login

register = template.Library()


@register.inclusion_tag("identity/buttons.html")
def sso_buttons(audience: str, next_url: str = "") -> dict[str, Any]:
    query = urlencode({"for": audience, **({"next": next_url} if next_url else {})})
    return {
        "buttons": [
            {
                "label": f"Sign in with {provider.display_name or provider.slug}",
                "url": f"{reverse('identity:start', args=[provider.slug])}?{query}",
                "slug": provider.slug,
            }
            for provider in providers_for_login(audience=audience)
        ],
        "local_login": settings.TOOLGATE_LOCAL_LOGIN,
    }


@register.simple_tag
def local_login_enabled() -> bool:
    return bool(settings.TOOLGATE_LOCAL_LOGIN)
