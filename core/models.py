"""The abstract models every app's own models build on; core itself has no table."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Revocable(models.Model):
    """A row that is revoked, never deleted or un-revoked: connections, grants, service accounts, delegations.

    Every app's revocable models inherit it. The fields are not editable: only `revoke_once`
    (policies_app/services.py) writes them, with one conditional UPDATE, so
    two revocations racing cannot both count, and the change log always says
    who. Deleting would cut audit rows and change entries loose; a revoked row
    stays, attributed, and stops working on the next call.
    """

    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        abstract = True

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
