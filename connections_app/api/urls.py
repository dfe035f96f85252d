"""Routes of the connections and grants API, mounted under /api/v1/ by config/urls.py."""

urlpatterns: list = []
