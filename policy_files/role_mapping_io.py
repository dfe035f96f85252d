"""Single sign-on role mappings in the policy file: the `role_mappings` list, exported and imported.

A mapping is its values (group, provider, what it grants): it has no name, so
an entry of the file is matched to a row by all of them, and there is nothing
to update in place. Import creates the listed mappings that do not exist yet;
with `--prune` it deletes the ones a present list does not hold; a file
without `role_mappings` changes none of them (as with the other lists).
Providers are named by slug and never exported: their client secrets stay in
admin. Every entry is checked as a save would (`RoleMapping.full_clean`, so a
tenant's own provider still cannot grant operator roles) before the first
write, and writes go through identity_app's services, which keep the change log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from identity_app.models import IdentityProvider, RoleMapping
from identity_app.services import role_mapping_delete, role_mapping_save
from policies_app.models import Tenant, TenantMembership

FILE_KEY = "role_mappings"
ENTRY_KEYS = ("group", "provider", "operator_role", "is_staff", "tenant", "tenant_role")
OPERATOR_ROLES = tuple(role for role in RoleMapping.OperatorRole.values if role)
TENANT_ROLES = tuple(TenantMembership.Role.values)
MAX_GROUP_LENGTH = RoleMapping._meta.get_field("group").max_length

# (group, provider slug, operator role, staff, tenant slug, tenant role); "" where the file has null.
MappingKey = tuple[str, str, str, bool, str, str]


def _key(mapping: RoleMapping) -> MappingKey:
    return (
        mapping.group,
        mapping.provider.slug if mapping.provider_id else "",
        mapping.operator_role,
        mapping.is_staff,
        mapping.tenant.slug if mapping.tenant_id else "",
        mapping.tenant_role,
    )


def _document(key: MappingKey) -> dict[str, Any]:
    group, provider, operator_role, is_staff, tenant, tenant_role = key
    return {
        "group": group,
        "provider": provider or None,
        "operator_role": operator_role or None,
        "is_staff": is_staff,
        "tenant": tenant or None,
        "tenant_role": tenant_role or None,
    }


def _label(key: MappingKey) -> str:
    group, provider, operator_role, is_staff, tenant, tenant_role = key
    granted = [label for label in (operator_role, "staff" if is_staff else "") if label]
    if tenant:
        granted.append(f"{tenant_role} of {tenant}")
    return f"{group} via {provider or 'any provider'} → {', '.join(granted)}"


def _rows() -> list[RoleMapping]:
    return list(RoleMapping.objects.select_related("provider", "tenant").order_by("pk"))


def role_mappings_export() -> list[dict[str, Any]]:
    """Every mapping once, sorted by its values: the same mappings always give the same text."""
    return [_document(key) for key in sorted({_key(mapping) for mapping in _rows()})]


@dataclass(frozen=True, slots=True)
class RoleMappingsChecked:
    """The present list's mappings, checked, as keys and as unsaved rows."""

    rows: dict[MappingKey, RoleMapping]


def role_mappings_validate(entries: Any, *, problems: list[str]) -> RoleMappingsChecked:
    """The list's mappings; what is wrong with each entry goes to `problems`, naming its position and group."""
    checked = RoleMappingsChecked(rows={})
    if not isinstance(entries, list):
        problems.append(f"{FILE_KEY} must be a list of objects")
        return checked
    providers = {provider.slug: provider for provider in IdentityProvider.objects.select_related("tenant")}
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.all()}
    for index, entry in enumerate(entries):
        mapping = _mapping(index, entry, providers=providers, tenants=tenants, problems=problems)
        if mapping is None:
            continue
        key = _key(mapping)
        if key in checked.rows:
            problems.append(f"{FILE_KEY}[{index}] ({_label(key)}): listed more than once")
        checked.rows[key] = mapping
    return checked


def _mapping(
    index: int,
    entry: Any,
    *,
    providers: dict[str, IdentityProvider],
    tenants: dict[str, Tenant],
    problems: list[str],
) -> RoleMapping | None:
    where = f"{FILE_KEY}[{index}]"
    if not isinstance(entry, dict):
        problems.append(f"{where} must be an object")
        return None
    group = entry.get("group")
    if isinstance(group, str) and group:
        where = f"{where} (group {group!r})"
    before = len(problems)
    problems += [f"{where}: unknown key {key!r}" for key in sorted(set(entry) - set(ENTRY_KEYS))]
    if not isinstance(group, str) or not group.strip() or len(group) > MAX_GROUP_LENGTH:
        problems.append(f"{where}: group must be a non-empty string of at most {MAX_GROUP_LENGTH} characters")
    provider_slug, tenant_slug = entry.get("provider"), entry.get("tenant")
    provider = providers.get(provider_slug) if isinstance(provider_slug, str) else None
    if provider_slug is not None and provider is None:
        problems.append(f"{where}: unknown identity provider {provider_slug!r}")
    tenant = tenants.get(tenant_slug) if isinstance(tenant_slug, str) else None
    if tenant_slug is not None and tenant is None:
        problems.append(f"{where}: unknown tenant {tenant_slug!r}")
    operator_role = entry.get("operator_role")
    if operator_role is not None and operator_role not in OPERATOR_ROLES:
        problems.append(f"{where}: operator_role must be null or one of {', '.join(OPERATOR_ROLES)}")
    tenant_role = entry.get("tenant_role")
    if tenant_role is not None and tenant_role not in TENANT_ROLES:
        problems.append(f"{where}: tenant_role must be null or one of {', '.join(TENANT_ROLES)}")
    is_staff = entry.get("is_staff", False)
    if not isinstance(is_staff, bool):
        problems.append(f"{where}: is_staff must be true or false")
    if len(problems) > before:
        return None
    mapping = RoleMapping(
        group=group,
        provider=provider,
        operator_role=operator_role or "",
        is_staff=is_staff,
        tenant=tenant,
        tenant_role=tenant_role or "",
    )
    try:
        # The rules admin applies (a tenant with its role, a grant, a tenant provider's limits); the database
        # constraints say the same in words meant for no one.
        mapping.full_clean(validate_constraints=False)
    except ValidationError as error:
        problems += [f"{where}: {message}" for message in error.messages]
        return None
    return mapping


def role_mappings_apply(checked: RoleMappingsChecked, *, prune: bool) -> tuple[list[str], list[str]]:
    """Create the missing mappings and, with `prune`, delete the others (inside the import's transaction).

    (created, pruned) labels. A mapping already there is not touched; with
    `prune`, a second row with the same values as another is deleted too, so
    the state left behind is exactly the file's list.
    """
    created, pruned = [], []
    kept: set[MappingKey] = set()
    for mapping in _rows():
        key = _key(mapping)
        if prune and (key not in checked.rows or key in kept):
            role_mapping_delete(mapping=mapping)
            pruned.append(_label(key))
        kept.add(key)
    for key, mapping in sorted(checked.rows.items()):
        if key not in kept:
            role_mapping_save(mapping=mapping)
            created.append(_label(key))
    return created, sorted(pruned)
