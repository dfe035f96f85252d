"""manage.py create_service_account --tenant SLUG NAME [--scopes tools:exec,connections:manage,invocations:read]"""

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.errors import command_errors
from policies_app.management import tenant_or_error
from policies_app.models import ServiceAccount
from policies_app.services import service_account_create


def parse_scopes(value: str) -> list[str]:
    return [scope.strip() for scope in value.split(",") if scope.strip()]


class Command(BaseCommand):
    help = (
        "Create a service account (a REST API caller) and print its API key once, alone on the last line of stdout. "
        "The key cannot be shown again: store it now."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="unique within the tenant, e.g. support-bot")
        parser.add_argument("--tenant", required=True, help="slug of the tenant the account belongs to")
        parser.add_argument(
            "--scopes",
            default=ServiceAccount.Scope.TOOLS_EXEC.value,
            help=f"comma-separated, of {', '.join(ServiceAccount.Scope.values)} (default: tools:exec)",
        )

    def handle(self, *args, name: str, tenant: str, scopes: str, **options) -> None:
        owner = tenant_or_error(tenant)
        requested = parse_scopes(scopes)
        if not requested:
            raise CommandError("--scopes names no scope")
        if ServiceAccount.objects.filter(tenant=owner, name=name).exists():
            raise CommandError(f"service account {tenant}/{name} already exists")
        try:
            with command_errors(prefix=f"service account {tenant}/{name} refused: "):
                account, key = service_account_create(tenant=owner, name=name, scopes=requested)
        except IntegrityError:  # created concurrently after full_clean's check
            raise CommandError(f"service account {tenant}/{name} already exists") from None
        self.stdout.write(f"created service account {account} with scopes {', '.join(account.scopes)}")
        self.stdout.write("its API key follows; it is shown only this once:")
        self.stdout.write(key)
