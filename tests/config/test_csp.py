"""The site's policy is built once, and every response carries exactly the headers django-csp would give it."""

from __future__ import annotations

import pytest
from csp.constants import HEADER, HEADER_REPORT_ONLY, NONCE
from csp.exceptions import CSPNonceError
from csp.middleware import CSPMiddleware
from django.http import HttpResponse
from django.test import RequestFactory

from config import middleware
from config.middleware import SitePolicyCSPMiddleware

REPORT_ONLY = {"DIRECTIVES": {"default-src": ["'self'"], "report-uri": "/csp-report"}}


def _answers(view, path="/"):
    """The responses of the same request through django-csp's middleware and through ours."""
    theirs = CSPMiddleware(view)(RequestFactory().get(path))
    ours = SitePolicyCSPMiddleware(view)(RequestFactory().get(path))
    return theirs, ours


def _nonce(response):
    return response.content.decode().split("nonce='")[1].split("'")[0] if b"nonce=" in response.content else None


def _nonce_hidden(response, header):
    """The header with this response's own nonce (random each time) named the same for both."""
    value, nonce = response.get(header), _nonce(response)
    return value.replace(nonce, "NONCE") if value and nonce else value


def _page(request):
    return HttpResponse("page")


def _updated(request):
    response = HttpResponse("consent")
    response._csp_update = {"form-action": ["https://agent.example"]}
    return response


def _with_nonce(request):
    return HttpResponse(f"<script nonce='{request.csp_nonce}'></script>")


def _exempt(request):
    response = HttpResponse("exempt")
    response._csp_exempt = True
    return response


@pytest.mark.parametrize("view", [_page, _updated, _with_nonce, _exempt])
def test_each_response_carries_django_csps_own_headers(view, settings):
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = REPORT_ONLY
    if view is _with_nonce:  # a nonce reaches the header only where the policy asks for one
        settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"script-src": ["'self'", NONCE]}}

    theirs, ours = _answers(view)

    for header in (HEADER, HEADER_REPORT_ONLY):
        assert _nonce_hidden(ours, header) == _nonce_hidden(theirs, header)
    if view is _with_nonce:
        assert f"'nonce-{_nonce(ours)}'" in ours[HEADER]
    if view is _updated:
        assert "https://agent.example" in ours[HEADER]
    if view is _exempt:
        assert HEADER not in ours


def test_the_policy_is_built_once_and_again_when_the_settings_change(settings, monkeypatch):
    built = []
    monkeypatch.setattr(middleware, "build_policy", lambda **kw: built.append(kw) or f"policy {len(built)}")
    site = SitePolicyCSPMiddleware(_page)

    first, second = site(RequestFactory().get("/")), site(RequestFactory().get("/"))
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": ["'none'"]}}
    third = site(RequestFactory().get("/"))

    assert (first[HEADER], second[HEADER], third[HEADER]) == ("policy 1", "policy 1", "policy 3")
    assert len(built) == 4  # each time: the policy and the report-only policy


def test_a_header_a_view_set_itself_is_kept():
    response = SitePolicyCSPMiddleware(lambda request: HttpResponse(headers={HEADER: "default-src 'none'"}))(
        RequestFactory().get("/")
    )

    assert response[HEADER] == "default-src 'none'"


def test_a_nonce_asked_for_after_the_header_was_written_is_an_error():
    request = RequestFactory().get("/")
    SitePolicyCSPMiddleware(_page)(request)

    with pytest.raises(CSPNonceError):
        str(request.csp_nonce)
