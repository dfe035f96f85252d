"""URL configuration: admin, health probes, the REST API and its schema, the tenant UI.

Every path under /api/ answers JSON: routes that do not exist fall through to
the catch-all at the end (new /api/ routes go above it), and the handlers below
answer the contract's error envelope for /api/ paths.
"""

from django.contrib import admin
from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularSwaggerSplitView

from config import health, metrics
from config.runtime import runtime
from config.schema import SchemaView
from core.api import handlers as api
from gateway.inbound.gateway import McpGatewayView
from portal.forms import AdminLoginForm
from tools_app.api.urls import urlpatterns_for as tools_api_urlpatterns

handler400 = api.bad_request
handler403 = api.permission_denied
handler404 = api.page_not_found
handler500 = api.server_error

admin.site.login_form = AdminLoginForm  # the username's length is checked before django-axes sees it


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """The static icon's URL is looked up per request: production's manifest exists only after collectstatic."""
    return HttpResponsePermanentRedirect(static("toolgate/favicon.svg"))


urlpatterns = [
    path("admin/", admin.site.urls),
    # Browsers and tools ask for /favicon.ico whatever the page links: answer with the icon, not a 404.
    path("favicon.ico", favicon),
    path("healthz", health.healthz, name="healthz"),
    # The same probe through the API's middleware list (settings.API_MIDDLEWARE): what exec is measured against.
    path("healthz/api", health.healthz, name="healthz-api"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),  # Prometheus: token or loopback (config/metrics.py)
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    # The split view serves its init script as a file: the CSP forbids inline scripts.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include(tools_api_urlpatterns(runtime))),
    path("api/v1/", include("connections_app.api.urls")),
    re_path(r"^api/", api.api_not_found),  # keep after every /api/ route
    path("mcp", McpGatewayView.as_view(runtime_provider=runtime), name="mcp"),
    path("mcp/t/<str:toolset>", McpGatewayView.as_view(runtime_provider=runtime), name="mcp-toolset"),
    path("", include("identity_app.urls")),  # single sign-on: start, callback, break glass, sign out
    path("", include("signin.urls")),  # MCP sign-in: discovery, authorize, token, register, revoke
    path("", include("portal.urls")),
]
