"""manage.py create_tenant_user --tenant SLUG USERNAME [--role owner|member]"""

import os

from django.core.management.base import BaseCommand, CommandError

from core.errors import command_errors
from policies_app.management import tenant_or_error
from policies_app.models import TenantMembership
from policies_app.users import tenant_user_upsert

PASSWORD_VARIABLE = "TOOLGATE_USER_PASSWORD"  # noqa: S105 - the name of the variable, not a password


class Command(BaseCommand):
    help = (
        "Create or update a web-UI user and make them a member of a tenant. The password is read from the "
        f"environment variable {PASSWORD_VARIABLE}, never from the command line (argv is visible to other users)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", required=True, help="slug of the tenant")
        parser.add_argument("--role", choices=TenantMembership.Role.values, default=TenantMembership.Role.MEMBER.value)

    def handle(self, *args, username: str, tenant: str, role: str, **options) -> None:
        password = os.environ.get(PASSWORD_VARIABLE, "")
        if not password:
            raise CommandError(f"set the password in the environment variable {PASSWORD_VARIABLE}")
        owner = tenant_or_error(tenant)
        with command_errors(f"user {username!r}: "):
            result = tenant_user_upsert(tenant=owner, username=username, password=password, role=role)
        action = "created" if result.user_created else "updated"
        self.stdout.write(self.style.SUCCESS(f"{action} user {username}, {role} of tenant {owner.slug}"))
