"""What every app's REST views share: the hardened JSON parser, pagination, strict serializers, error answers."""
