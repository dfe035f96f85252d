"""Toolgate's admin site: its name, its index order, and the library sections kept reachable."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from config.admin_site import ToolgateAdminSite

pytestmark = pytest.mark.django_db


def test_admin_site_is_toolgates(admin_client):
    response = admin_client.get(reverse("admin:index"))

    assert isinstance(admin.site, ToolgateAdminSite)
    assert response.status_code == 200
    assert "Toolgate administration" in response.text
    assert "Django administration" not in response.text
    assert "toolgate/favicon" in response.text


def test_index_lists_toolgate_first_and_maintenance_last(admin_client):
    response = admin_client.get(reverse("admin:index"))

    apps = response.context["app_list"]
    assert [app["app_label"] for app in apps] == [
        "connections_app",
        "policies_app",
        "signin",
        "tools_app",
        "gateway",
        "identity_app",
        "changes_app",
        "auth",
        "axes",
        "django_celery_beat",
    ]
    assert [model["object_name"] for model in apps[-2]["models"]] == ["AccessAttempt"]
    assert [model["object_name"] for model in apps[-1]["models"]] == ["PeriodicTask"]


def test_maintenance_sections_keep_every_list_on_their_own_page(admin_client):
    beat = admin_client.get(reverse("admin:app_list", args=["django_celery_beat"]))
    axes = admin_client.get(reverse("admin:app_list", args=["axes"]))

    assert {model["object_name"] for model in beat.context["app_list"][0]["models"]} >= {
        "PeriodicTask",
        "IntervalSchedule",
        "CrontabSchedule",
    }
    assert {model["object_name"] for model in axes.context["app_list"][0]["models"]} == {
        "AccessAttempt",
        "AccessFailureLog",
        "AccessLog",
    }
    assert admin_client.get(reverse("admin:django_celery_beat_crontabschedule_changelist")).status_code == 200


def test_favicon_ico_leads_to_the_icon(client):
    response = client.get("/favicon.ico")

    assert response.status_code == 301
    assert response["Location"].endswith("toolgate/favicon.svg")
