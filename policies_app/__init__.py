"""Who may do what: tenants, service accounts, policies, approvals, delegations, governance.

Also what every row of governance shares across apps: `services.revoke_once`
(the one revocation, with its change-log entry), the governance cache and its
signals (`governance.py`, `signals.py`), and the hooks through which the apps
above install what only they know (`catalog.py`: tool ids;
`authentication.bearer_check_add`: other Bearer credentials). The kernel below
it (errors, API plumbing, crypto, `Revocable`) is the `core` app.
"""
