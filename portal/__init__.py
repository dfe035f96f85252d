"""The tenant web UI: a tenant's people manage their connections, grants, service accounts and delegations.

Pages under the site root (`urls.py`, namespace `web`; the templates are in
templates/tenant/): signing in and switching tenant (`tenancy.py`), connections
and their OAuth hand-off (`views.py`, `oauth.py`), grants, service accounts and
webhooks (`views.py`), delegations and the signed-in MCP clients they carry
(`delegations.py`), approvals and the calls waiting on their person
(`calls.py`), argument rules (`rules.py`), toolsets (`toolsets.py`), the
activity chart (`activity.py`) and the revoke confirmations every page shares
(`revoking.py`). Views are thin: what they change goes through the services of
the app that owns the rows.
"""
