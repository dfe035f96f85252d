"""Every model change has its migration: a change without one would reach production unapplied."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_its_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exited:
        pytest.fail(f"makemigrations would write migrations (exit {exited.code}):\n{out.getvalue()}")
