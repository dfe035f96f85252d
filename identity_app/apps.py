from django.apps import AppConfig


class IdentityAppConfig(AppConfig):
    """Single sign-on: OpenID Connect providers, the roles their groups map to, and the login they drive."""

    name = "identity_app"
    verbose_name = "Single sign-on"
    default_auto_field = "django.db.models.BigAutoField"
