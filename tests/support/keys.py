"""Spotting key material in text: what a leak check looks for."""

from __future__ import annotations

import base64


def key_material_forms(*keys: bytes) -> list[str]:
    """Every way a key could be spelled in a message or a log line."""
    forms = []
    for key in keys:
        forms += [
            key.decode("latin-1"),
            key.hex(),
            base64.b64encode(key).decode(),
            base64.urlsafe_b64encode(key).decode(),
        ]
    return forms
