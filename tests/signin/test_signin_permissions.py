"""Operators' permission sets reach the sign-in clients under their new app label, as they did before."""

from __future__ import annotations

import pytest

from identity_app.permission_sets import operator_groups_ensure


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "holds", "lacks"),
    [
        ("viewer", {"signin.view_signinclient", "signin.view_signingrant"}, {"signin.change_signinclient"}),
        ("tool_admin", {"signin.view_signinclient", "signin.change_signinclient", "signin.delete_signinclient"}, set()),
        ("approver", set(), {"signin.view_signinclient"}),
    ],
)
def test_each_permission_set_holds_the_signin_permissions_it_held_under_policies_app(role, holds, lacks):
    group = operator_groups_ensure()[role]

    granted = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}

    assert holds <= granted
    assert not lacks & granted
    assert not any(name.startswith("policies_app.") and "signin" in name for name in granted)
