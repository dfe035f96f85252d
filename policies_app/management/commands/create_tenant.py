"""manage.py create_tenant SLUG [--name NAME]"""

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.errors import command_errors
from policies_app.models import Tenant
from policies_app.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant (the owner of connections, service accounts and audit rows)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug", help="short unique identifier, e.g. acme")
        parser.add_argument("--name", default="", help="display name (default: the slug)")

    def handle(self, *args, slug: str, name: str, **options) -> None:
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"tenant {slug!r} already exists")
        try:
            with command_errors(f"tenant {slug!r} refused: "):
                tenant = tenant_create(slug=slug, name=name)
        except IntegrityError:  # created concurrently after the check above
            raise CommandError(f"tenant {slug!r} already exists") from None
        self.stdout.write(self.style.SUCCESS(f"created tenant {tenant.slug} ({tenant.name})"))
