"""The demo that `make run` seeds: one tenant, its people, one agent and one policy.

A fresh clone should be usable at once: an operator can log into admin, a
tenant user into the web UI, and a pasted curl runs a tool. Passwords and the
API key cannot be read back from the database (hashes and digests only), so the
seed keeps them in clear in a local, git-ignored file with mode 0600 and prints
them on every run. Re-running changes nothing and prints the same values.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from core.errors import AppError
from policies_app.keys import key_matches, key_prefix
from policies_app.models import ServiceAccount, Tenant, TenantMembership, ToolPolicy
from policies_app.services import policy_save, service_account_create, service_account_delete, tenant_create
from policies_app.users import tenant_user_upsert
from runner.types import ToolEffect
from tools_app.registry import code_specs
from tools_app.services import tool_set_enabled, tool_sync

DEMO_TENANT = "demo"
DEMO_OPERATOR = "operator"
DEMO_USER = "demo-user"
DEMO_ACCOUNT = "demo-agent"
DEMO_SCOPES = (ServiceAccount.Scope.TOOLS_EXEC.value, ServiceAccount.Scope.CONNECTIONS_MANAGE.value)
DEMO_POLICY = "demo-default"
# The search tool too: `/mcp?mode=search` works in the demo only where it is switched on and allowed.
DEMO_TOOLS = (
    "core__get_current_time",
    "core__wait",
    "github__create_issue",
    "github__get_user",
    "toolgate__search_tools",
)
DEMO_APPROVAL_EFFECTS = (ToolEffect.EXTERNAL_SIDE_EFFECT.value,)
DEMO_MAX_RUNTIME_MS = 15_000
DEMO_MAX_RESULT_BYTES = 32_768


@dataclass(frozen=True, slots=True)
class DemoSeed:
    """What the demo consists of, secrets included: only the seed command prints it."""

    tenant_slug: str
    operator_username: str
    user_username: str
    service_account: str
    operator_password: str = field(repr=False)
    user_password: str = field(repr=False)
    api_key: str = field(repr=False)
    changes: tuple[str, ...] = ()  # what this run did, e.g. "created tenant demo"


def demo_seed(*, credentials_file: Path) -> DemoSeed:
    """Make the demo exist, reusing the credentials stored in `credentials_file`.

    Idempotent: a second run finds everything and writes nothing. What it
    guarantees on every run is that the printed credentials work: a password
    that no longer matches is set back to the stored one, and a stored key that
    no longer opens the demo account (the file was lost or edited, the account
    revoked) cannot be recovered from its digest, so the account is deleted and
    created again with a fresh key. Deleting rather than revoking keeps the
    account's name, which is unique per tenant; the demo's grants and approvals
    go with it, its audit rows stay (their account becomes null).
    The policy and tool switches are created once and then left to operators:
    editing them in admin survives the next `make run`.
    """
    stored = _credentials_read(credentials_file)
    operator_password = stored.get("operator_password") or _new_password()
    user_password = stored.get("user_password") or _new_password()
    changes: list[str] = []
    with transaction.atomic():
        tool_sync(specs=code_specs())
        tenant = Tenant.objects.filter(slug=DEMO_TENANT).first()
        if tenant is None:
            tenant = tenant_create(slug=DEMO_TENANT, name="Demo")
            changes.append(f"created tenant {DEMO_TENANT}")
        operator = _operator_ensure(password=operator_password, changes=changes)
        # An owner, so every page of the tenant UI (toolsets, owner approvals, redirect URIs) can be tried.
        member = tenant_user_upsert(
            tenant=tenant, username=DEMO_USER, password=user_password, role=TenantMembership.Role.OWNER
        )
        if member.user_created:
            changes.append(f"created user {DEMO_USER}")
        elif member.password_changed:
            changes.append(f"reset the password of {DEMO_USER}")
        if member.membership_created and not member.user_created:
            changes.append(f"made {DEMO_USER} an owner of {DEMO_TENANT}")
        api_key = _account_ensure(
            tenant=tenant, stored_key=stored.get("api_key", ""), operator=operator, changes=changes
        )
        _policy_ensure(tenant=tenant, changes=changes)
        wanted = {"operator_password": operator_password, "user_password": user_password, "api_key": api_key}
        if stored != wanted:
            # Inside the transaction: if the file cannot be written, the new key is rolled back too.
            _credentials_write(credentials_file, wanted)
    return DemoSeed(
        tenant_slug=DEMO_TENANT,
        operator_username=DEMO_OPERATOR,
        user_username=DEMO_USER,
        service_account=DEMO_ACCOUNT,
        operator_password=operator_password,
        user_password=user_password,
        api_key=api_key,
        changes=tuple(changes),
    )


def _operator_ensure(*, password: str, changes: list[str]) -> AbstractBaseUser:
    """The admin superuser, with the stored password (a demo operator, not a tenant member)."""
    user_model = get_user_model()
    user, was_created = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: DEMO_OPERATOR})
    changed = was_created or not (user.is_staff and user.is_superuser and user.is_active)
    user.is_staff = user.is_superuser = user.is_active = True
    password_reset = not user.check_password(password)
    if password_reset:
        user.set_password(password)
    if changed or password_reset:
        user.save()
    if was_created:
        changes.append(f"created superuser {DEMO_OPERATOR}")
    elif password_reset:
        changes.append(f"reset the password of {DEMO_OPERATOR}")
    return user


def _account_ensure(*, tenant: Tenant, stored_key: str, operator: AbstractBaseUser, changes: list[str]) -> str:
    account = ServiceAccount.objects.filter(tenant=tenant, name=DEMO_ACCOUNT).first()
    if account is not None and _key_opens(stored_key, account):
        return stored_key
    if account is not None:
        service_account_delete(account=account)
        changes.append(f"deleted service account {tenant.slug}/{DEMO_ACCOUNT}: its stored key was lost or revoked")
    _account, api_key = service_account_create(
        tenant=tenant, name=DEMO_ACCOUNT, scopes=DEMO_SCOPES, created_by=operator
    )
    changes.append(f"created service account {tenant.slug}/{DEMO_ACCOUNT}")
    return api_key


def _key_opens(key: str, account: ServiceAccount) -> bool:
    return account.is_active and key_prefix(key) == account.key_prefix and key_matches(key, account.key_digest)


def _policy_ensure(*, tenant: Tenant, changes: list[str]) -> None:
    if ToolPolicy.objects.filter(name=DEMO_POLICY).exists():
        return
    policy = ToolPolicy(
        name=DEMO_POLICY,
        tenant=tenant,
        allowed_tools=sorted(DEMO_TOOLS),
        require_approval_for_effects=list(DEMO_APPROVAL_EFFECTS),
        max_runtime_ms=DEMO_MAX_RUNTIME_MS,
        max_result_bytes=DEMO_MAX_RESULT_BYTES,
    )
    policy.full_clean()
    # Through the services, as an operator's edits go: the change log records the demo (origin: the command).
    policy_save(policy=policy)
    changes.append(f"created policy {DEMO_POLICY}")
    for tool_id in tool_set_enabled(tool_ids=DEMO_TOOLS, enabled=True):
        changes.append(f"enabled tool {tool_id}")


def _new_password() -> str:
    return secrets.token_urlsafe(18)


def _credentials_read(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise AppError(f"{path} is unreadable ({error}); delete it and run seed_demo again") from None
    if not isinstance(data, dict) or not all(isinstance(value, str) for value in data.values()):
        raise AppError(f"{path} is not a demo credentials file; delete it and run seed_demo again")
    return data


def _credentials_write(path: Path, credentials: dict[str, str]) -> None:
    """Replace the file atomically; it is created with mode 0600 and never exists wider."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp opens with 0600
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(credentials, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
