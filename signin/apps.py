from django.apps import AppConfig


class SigninConfig(AppConfig):
    """MCP clients that sign in: the models and both halves of Toolgate's OAuth 2.1 authorization server."""

    name = "signin"
    verbose_name = "MCP sign-in"

    def ready(self) -> None:
        from policies_app.authentication import bearer_check_add  # noqa: PLC0415 - needs the app registry
        from signin.authentication import access_token_caller  # noqa: PLC0415

        bearer_check_add(access_token_caller)  # the API accepts a signed-in client's access token
