"""manage.py add_oauth_provider NAME --authorize-url URL --token-url URL --client-id ID [--scopes a,b] [--no-pkce]"""

import os

from django.core.management.base import BaseCommand, CommandError

from connections_app.oauth import oauth_provider_upsert
from core.errors import command_errors

SECRET_VARIABLE = "TOOLGATE_OAUTH_CLIENT_SECRET"  # noqa: S105 - the name of the variable, not a secret


class Command(BaseCommand):
    help = (
        "Register or update an OAuth provider tenants can connect to (upsert by NAME). The client secret is read "
        f"from the environment variable {SECRET_VARIABLE}, never from the command line, and stored encrypted."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="the provider's name, as tools name it (e.g. github)")
        parser.add_argument("--authorize-url", required=True)
        parser.add_argument("--token-url", required=True)
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--scopes", default="", help="default scopes, comma separated")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--no-pkce", action="store_true", help="do not send a PKCE challenge (not recommended)")

    def handle(self, *args, name: str, **options) -> None:
        secret = os.environ.get(SECRET_VARIABLE, "")
        if not secret:
            raise CommandError(f"set the client secret in the environment variable {SECRET_VARIABLE}")
        with command_errors(f"provider {name!r}: "):
            provider, created = oauth_provider_upsert(
                name=name,
                authorize_url=options["authorize_url"],
                token_url=options["token_url"],
                client_id=options["client_id"],
                client_secret=secret,
                scopes=options["scopes"].split(","),
                use_pkce=not options["no_pkce"],
                display_name=options["display_name"],
            )
        pkce = "with PKCE" if provider.use_pkce else "without PKCE"
        action = "registered" if created else "updated"
        self.stdout.write(self.style.SUCCESS(f"{action} OAuth provider {provider.name} ({pkce})"))
