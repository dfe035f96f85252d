"""The address django-axes keys lockouts on: X-Real-IP only from a trusted proxy."""

from __future__ import annotations

import ipaddress

import pytest
from django.test import RequestFactory

from config.clientip import client_ip


@pytest.fixture
def proxies(settings):
    settings.TOOLGATE_TRUSTED_PROXY_NETWORKS = [ipaddress.ip_network("172.28.0.0/16"), ipaddress.ip_network("::1")]


@pytest.mark.parametrize(
    ("peer", "real_ip", "expected"),
    [
        ("172.28.0.5", "203.0.113.7", "203.0.113.7"),  # the proxy names the client
        ("::1", "2001:db8::1", "2001:db8::1"),
        ("203.0.113.9", "198.51.100.1", "203.0.113.9"),  # anyone else cannot choose their address
        ("172.28.0.5", "", "172.28.0.5"),
        ("172.28.0.5", "not-an-address", "172.28.0.5"),
        ("172.28.0.5", "203.0.113.7, 10.0.0.1", "172.28.0.5"),
    ],
)
def test_x_real_ip_is_believed_from_trusted_proxies_only(proxies, peer, real_ip, expected):
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR=peer, HTTP_X_REAL_IP=real_ip)

    assert client_ip(request) == expected


def test_without_trusted_proxies_the_peer_is_the_client(settings):
    settings.TOOLGATE_TRUSTED_PROXY_NETWORKS = []
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="172.28.0.5", HTTP_X_REAL_IP="203.0.113.7")

    assert client_ip(request) == "172.28.0.5"
