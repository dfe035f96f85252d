"""The client's address as django-axes keys its lockouts (`AXES_CLIENT_IP_CALLABLE`).

Behind the reverse proxy every request arrives from the proxy's address, so
a lockout keyed on (username, address) would become a lockout on the
username alone, which anyone anywhere could trigger. The proxy tells the
client's address in `X-Real-IP`; that header is believed only from a peer in
`TOOLGATE_TRUSTED_PROXIES`, since any client can send it.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str | None:
    peer = request.META.get("REMOTE_ADDR")
    if peer and _is_trusted_proxy(peer):
        told = request.META.get("HTTP_X_REAL_IP", "").strip()
        if _is_address(told):
            return told
    return peer


def _is_trusted_proxy(peer: str) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in settings.TOOLGATE_TRUSTED_PROXY_NETWORKS)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
