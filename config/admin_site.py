"""Toolgate's admin site: Django's, branded, with the operator's own sections first.

Operators come to admin for tools, policies, connections and the audit log. The
sections of the libraries underneath (django-axes' lockouts, Celery beat's
schedules) are maintenance: the index lists them last, under names that say what
they are, with only the one list an operator opens from there (unlocking a user,
pausing a periodic task). Their other lists stay one click away on the section's
own page, and permissions are Django's as ever.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden

# Toolgate's own sections, in the order the index shows them (the change log after what it records).
TOOLGATE_APPS = ("connections_app", "policies_app", "signin", "tools_app", "gateway", "identity_app", "changes_app")
# app label -> (the name the index shows, the models it lists there)
MAINTENANCE_APPS = {
    "axes": ("Maintenance: log-in lockouts", ("AccessAttempt",)),
    "django_celery_beat": ("Maintenance: scheduled tasks", ("PeriodicTask",)),
}


class ToolgateAdminSite(admin.AdminSite):
    site_header = "Toolgate administration"
    site_title = "Toolgate admin"
    index_title = "Operations"
    # At 1280 px Django's navigation sidebar takes a quarter of the width from every list, and
    # the filters another fifth: lists would hide their key columns (the kill switch among them).
    # The breadcrumbs and the index lead everywhere the sidebar did.
    enable_nav_sidebar = False

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Admin's password form, refused outright when local passwords are off (single sign-on only)."""
        if request.method == "POST" and not settings.TOOLGATE_LOCAL_LOGIN:
            return HttpResponseForbidden("local passwords are switched off: sign in with your identity provider")
        return super().login(request, extra_context)

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        apps = super().get_app_list(request, app_label)
        if app_label is not None:  # a section's own page lists everything it has
            return apps

        def rank(app: dict[str, Any]) -> tuple[int, int, str]:
            label = app["app_label"]
            if label in TOOLGATE_APPS:
                return 0, TOOLGATE_APPS.index(label), ""
            return (2 if label in MAINTENANCE_APPS else 1), 0, str(app["name"])

        for app in apps:
            if app["app_label"] in MAINTENANCE_APPS:
                name, models = MAINTENANCE_APPS[app["app_label"]]
                app["name"] = name
                app["models"] = [model for model in app["models"] if model["object_name"] in models]
        return sorted(apps, key=rank)


class ToolgateAdminConfig(AdminConfig):
    """Installs ToolgateAdminSite as `admin.site`, so every app's `@admin.register` lands on it."""

    default_site = "config.admin_site.ToolgateAdminSite"
