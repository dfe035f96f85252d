"""The shared kernel: what every app needs, below them all (just above runner).

- `errors.py`: `AppError`, the one error services raise, and each code's HTTP
  status; how forms and management commands show one;
- `api/`: the REST API's hardened JSON parser, content negotiation, pagination,
  strict serializers, OpenAPI error answers, and the exception handler that
  turns every error under /api/ into the contract's envelope (`api/handlers.py`);
- `outages.py`: an unreachable database or cache told apart from a bug;
- `ids.py`: reading an id a caller sent;
- `crypto.py`: the AES-GCM key ring every sealed secret goes under, and
  `key_rotation.py`: what each app's rewrap of its sealed rows shares;
- `netguard.py`: the one guard for every outbound URL (upstream MCP servers,
  webhooks, sign-in documents, identity providers): checked addresses only, and
  `PinnedTransport`, which connects to nothing else, with `framing.py`'s check
  that an HTTP/1.1 answer ends where its framing says;
- `models.py`: the `Revocable` abstract model, and `admin_display.py`: the
  admin's compact values, filters and the revoke action for every revocable row.

It imports no other Toolgate app but runner; apps above import these directly.
"""
