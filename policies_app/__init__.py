"""Who may do what: tenants, service accounts, policies, approvals, delegations, governance.

policies_app is also the shared kernel: the lowest Django app, so the code
every app needs lives here once instead of being copied or pushed up
(docs/architecture.md, "The shared kernel"):

- `errors.py`: `AppError`, the one error services raise, and each code's HTTP status;
- `outages.py`: an unreachable database or cache told apart from a bug;
- `ids.py`: reading an id a caller sent;
- `crypto.py`: the AES-GCM key ring every sealed secret goes under, and `key_rotation.py`:
  what each app's rewrap of its sealed rows shares (`RewrapOutcome`, key ids read from envelopes);
- `api/`: the REST API's hardened JSON parser, pagination, strict serializers, error answers;
- revocation: the `Revocable` abstract model, `services.revoke_once` and the admin's
  `admin_display.revoke_action`, for every revocable row whichever app owns it.

Apps above import these directly.
"""
