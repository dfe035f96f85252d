"""Writes of web-UI users: a Django user and their place in one tenant."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

from core.errors import AppError, full_clean_or_refuse
from policies_app.models import Tenant, TenantMembership


@dataclass(frozen=True, slots=True)
class TenantUser:
    """What `tenant_user_upsert` did, for the interface to report (never the password)."""

    user: AbstractBaseUser
    membership: TenantMembership
    user_created: bool
    membership_created: bool
    password_changed: bool


@transaction.atomic
def tenant_user_upsert(*, tenant: Tenant, username: str, password: str, role: str) -> TenantUser:
    """Create or update a user with this password and make them `role` in `tenant`.

    The password passes Django's validators before anything is written, so a
    weak one leaves no user behind. It is only re-hashed when it changed: a
    re-run with the same password (the demo seed) writes nothing.
    """
    if role not in TenantMembership.Role.values:
        raise AppError(f"unknown role {role!r}: use one of {', '.join(TenantMembership.Role.values)}")
    user_model = get_user_model()
    user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
    user_created = user is None
    if user is None:
        user = user_model(**{user_model.USERNAME_FIELD: username})
        full_clean_or_refuse(user, exclude=["password"])
    try:
        validate_password(password, user)
    except ValidationError as error:
        raise AppError(f"password rejected: {_messages(error)}") from None
    password_changed = not user.check_password(password)
    if password_changed:
        user.set_password(password)
    if user_created or password_changed:
        user.save()
    membership, membership_created = TenantMembership.objects.get_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    if membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    return TenantUser(
        user=user,
        membership=membership,
        user_created=user_created,
        membership_created=membership_created,
        password_changed=password_changed,
    )


def _messages(error: ValidationError) -> str:
    return " ".join(error.messages)
