"""factory_boy factories shared by the suite."""

from __future__ import annotations

import uuid

import factory
from django.contrib.auth import get_user_model

from connections_app.models import Connection, ExecutionGrant
from connections_app.services import connection_create
from policies_app.models import Tenant, TenantMembership, ToolPolicy
from policies_app.services import service_account_create

PASSWORD = "correct-horse-battery-staple"


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password(PASSWORD)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TenantMembership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = TenantMembership.Role.OWNER


def service_account_with_key(
    tenant: Tenant | None = None, *, name: str | None = None, scopes: tuple[str, ...] = ("tools:exec",)
):
    """A service account and its clear key (only services can mint keys)."""
    tenant = tenant or TenantFactory()
    name = name or f"svc-{uuid.uuid4().hex[:8]}"
    return service_account_create(tenant=tenant, name=name, scopes=scopes)


class ToolPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ToolPolicy

    name = factory.Sequence(lambda n: f"policy-{n}")
    tenant = None
    service_account = None
    allowed_tools = factory.LazyFunction(lambda: ["core__get_current_time", "core__wait"])
    require_approval_for_effects = factory.LazyFunction(list)


class ConnectionFactory(factory.django.DjangoModelFactory):
    """A hand-entered connection, stored through the service (so it is encrypted like a real one)."""

    class Meta:
        model = Connection

    tenant = factory.SubFactory(TenantFactory)
    provider = "github"
    credential_type = Connection.CredentialType.API_KEY
    credentials = factory.LazyFunction(lambda: {"api_key": f"ghp_{uuid.uuid4().hex}"})
    label = factory.Sequence(lambda n: f"account {n}")

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return connection_create(**kwargs)


class GrantFactory(factory.django.DjangoModelFactory):
    """A grant; pass `connections=[...]` (rows of the same tenant)."""

    class Meta:
        model = ExecutionGrant
        skip_postgeneration_save = True

    tenant = factory.LazyAttribute(lambda o: o.service_account.tenant)

    @factory.post_generation
    def connections(grant, create, extracted, **kwargs):
        if create and extracted:
            grant.connections.set(extracted)
