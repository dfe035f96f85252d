"""Routes of the tenant web UI, mounted at the site root by config/urls.py."""

urlpatterns: list = []
